"""`kfchaos replay` (the real CLI, in this process) against the hostile model server, one attack after another, in a
process of its own so that its memory can be measured: `python -m tests.hostile.model_replay URL FOLDER TIMEOUT
ATTACK...`. For each attack it replays one request asking for that model and prints one JSON line: the attack, the
exit code, VmRSS before and VmHWM after (kB, /proc/self/status; the peak is reset before each attack through
/proc/self/clear_refs), its seconds, and the records file."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import kfchaos.traffic.engine  # noqa: F401  (imported before the first measure, as the command would have it)
from kfchaos.cli import main
from tests.hostile.flood_reader import memory


def replay(url: str, folder: Path, timeout: str, attack: str) -> dict[str, object]:
    traffic = folder / f"{attack}.jsonl"
    traffic.write_text(json.dumps({"id": "r0", "timestamp": 0}) + "\n")
    out = folder / f"{attack}.parquet"
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = memory("VmRSS")
    started = time.monotonic()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(["replay", str(traffic), "--target", url, "--api", "openai-completions", "--model", attack,
                     "--timeout", timeout, "--out", str(out), "--quiet"])  # fmt: skip
    took = time.monotonic() - started
    return {"attack": attack, "code": code, "rss_before_kb": before, "hwm_kb": memory("VmHWM"), "seconds": took,
            "records": str(out), "output": printed.getvalue()[-2000:]}  # fmt: skip


if __name__ == "__main__":
    url, folder, timeout, *attacks = sys.argv[1:]
    replay(url, Path(folder), timeout, "warm-up")  # a well-formed answer first: the first replay's imports and caches
    for name in attacks:
        print(json.dumps(replay(url, Path(folder), timeout, name)), flush=True)
