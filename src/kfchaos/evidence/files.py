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


def write(bundle: Bundle, parent: str | Path | safefile.Folder) -> Path:
    """evidence/ inside `parent` (a run folder, already open, or a path): private (0700, files 0600), since pod
    logs and events may hold what their services print; a symlink planted at evidence/ is refused."""
    opened = parent if isinstance(parent, safefile.Folder) else safefile.Folder.open(parent, private=True, own=True)
    try:
        with opened.subfolder(FOLDER, private=True) as folder:
            index = bundle.to_dict()
            for item, entry in zip(bundle.items, index["items"], strict=True):
                entry.pop("data", None)
                if not item.collected:
                    continue
                if isinstance(item.data, str):
                    folder.write_text(item.file, item.data)
                else:
                    folder.write_text(item.file, json.dumps(item.data, indent=1, default=str) + "\n")
            return folder.write_text(INDEX, json.dumps(index, indent=2) + "\n")
    finally:
        if opened is not parent:
            opened.close()


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
