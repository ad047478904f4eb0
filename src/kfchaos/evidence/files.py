"""The run folder's evidence/: index.json (the bundle: trigger, window, findings, each item without its data,
with its file name) and one file per collected item (JSON, or .log text for a log tail)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kfchaos import safefile
from kfchaos.evidence.model import Bundle

FOLDER = "evidence"
INDEX = "index.json"
MAX_FILE_BYTES = 1 << 20  # an item file read back into the report: never more than this


def write(bundle: Bundle, folder: Path) -> Path:
    safefile.subfolder(folder)
    index = bundle.to_dict()
    for item, entry in zip(bundle.items, index["items"], strict=True):
        entry.pop("data", None)
        if not item.collected:
            continue
        path = folder / item.file
        if isinstance(item.data, str):
            safefile.write_text(path, item.data)
        else:
            safefile.write_text(path, json.dumps(item.data, indent=1, default=str) + "\n")
    safefile.write_text(folder / INDEX, json.dumps(index, indent=2) + "\n")
    return folder / INDEX


def read(folder: Path) -> Bundle | None:
    """The bundle from evidence/ (item data read back from its file, bounded); None when there is none."""
    try:
        index = json.loads((folder / INDEX).read_text())
    except (OSError, ValueError):
        return None
    bundle = Bundle.from_dict(index)
    if bundle is None:
        return None
    for item in bundle.items:
        name = item.file
        path = folder / name
        if not item.collected or Path(name).name != name or not path.is_file():
            continue
        text = path.read_bytes()[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
        item.data = text if name.endswith(".log") else _json(text)
    return bundle


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
