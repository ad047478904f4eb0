"""Where the test suite's minutes go: a pytest plugin that records, per test, the wall time of its setup, call and
teardown and the CPU time spent meanwhile (this process and the child processes it reaped), and `--quick`, which
leaves out the tests known to take a second or more.

    pytest --timing-report timings.json ...      # appends one JSON line per test: nodeid, file, phases, cpu
    python -m tests.support.timing timings.json  # the table by file: wall, setup, CPU share (docs/development.md)
    pytest --quick ...                           # `make check`: leaves out the tests listed in tests/slow-tests.txt

CPU against wall tells waiting from work: a test whose CPU is a small share of its wall time waits (on a server, a
subprocess, a stage's duration) and can run beside others; one near 100 % of one core cannot. Child processes count
only once reaped (`RUSAGE_CHILDREN`), so a server a session fixture keeps running is charged to the test that stops
it, and a daemon never reaped not at all: the CPU figures are a floor.

tests/slow-tests.txt is written from a timing report by `python -m tests.support.timing REPORT --write-slow`: every
test whose setup + call + teardown took 1 s or more, and every test of a file whose fixtures took that long (a shared
server is paid for by whichever test runs first); `--quick` also leaves out the folders that start a real engine,
cluster or package build. A test not in the file is taken as quick, so a new
test runs in `make check` until the next report lists it.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLOW_LIST = ROOT / "tests" / "slow-tests.txt"
QUICK_LIMIT_S = 1.0
# Folders whose tests share a heavy part started by a session fixture (the first test to run pays for it).
HEAVY_FOLDERS = ("tests/cluster/", "tests/engine/", "tests/e2e/", "tests/package/", "tests/bench/")


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class TimingRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        cpu0 = _cpu()
        yield
        entry = self.tests.setdefault(item.nodeid, {"nodeid": item.nodeid, "file": str(item.path.relative_to(ROOT))})
        entry["cpu"] = round(_cpu() - cpu0, 3)
        # Appended as each test ends, so that a run killed midway still says where its time went (and scripts/test.sh
        # runs pytest twice, without and with the cluster, into one report).
        with self.path.open("a") as report:
            report.write(json.dumps(self.tests.pop(item.nodeid), sort_keys=True) + "\n")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "file": report.location[0]})
        entry[report.when] = round(report.duration, 3)
        if report.outcome != "passed":
            entry.setdefault("outcome", report.outcome)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kfchaos timing")
    group.addoption("--timing-report", metavar="FILE", help="write each test's setup/call/teardown and CPU time")
    group.addoption("--quick", action="store_true", help="leave out the tests listed in tests/slow-tests.txt")


def pytest_configure(config: pytest.Config) -> None:
    report = config.getoption("--timing-report")
    # Under pytest-xdist the tests run in the workers: each records its own (the controller only relays reports).
    distributing = bool(config.getoption("numprocesses", default=None)) and not hasattr(config, "workerinput")
    if report and not distributing:
        config.pluginmanager.register(TimingRecorder(Path(report)), "kfchaos-timing")


def slow_tests() -> set[str]:
    if not SLOW_LIST.exists():
        return set()
    return {line.strip() for line in SLOW_LIST.read_text().splitlines() if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--quick"):
        return
    slow = slow_tests()
    keep, drop = [], []
    for item in items:
        heavy = any(item.nodeid.startswith(folder) for folder in HEAVY_FOLDERS)
        (drop if heavy or item.nodeid in slow else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wall(entry: dict[str, Any]) -> float:
    return float(entry.get("setup", 0) + entry.get("call", 0) + entry.get("teardown", 0))


def table(entries: list[dict[str, Any]], top: int = 40) -> str:
    """Markdown: the files that take longest, with setup's share and CPU's share of their wall time."""
    by_file: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for entry in entries:
        row = by_file[entry["file"]]
        row["tests"] += 1
        row["wall"] += wall(entry)
        row["setup"] += entry.get("setup", 0) + entry.get("teardown", 0)
        row["cpu"] += entry.get("cpu", 0)
    total = sum(row["wall"] for row in by_file.values())
    lines = [
        "| file | tests | wall (min) | share | setup + teardown | CPU / wall |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in sorted(by_file.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        cpu_share = row["cpu"] / row["wall"] if row["wall"] else 0.0
        lines.append(
            f"| {name} | {int(row['tests'])} | {row['wall'] / 60:.1f} | {row['wall'] / total:.0%} "
            f"| {row['setup'] / max(row['wall'], 1e-9):.0%} | {cpu_share:.0%} |"
        )
    tests = sum(int(row["tests"]) for row in by_file.values())
    cpu = sum(row["cpu"] for row in by_file.values())
    share = cpu / max(total, 1e-9)
    lines.append(f"| **all {len(by_file)} files** | {tests} | {total / 60:.1f} | 100% | | {share:.0%} |")
    return "\n".join(lines)


def write_slow(entries: list[dict[str, Any]]) -> int:
    """Every test that took QUICK_LIMIT_S or more, and every test of a file where one test's setup or teardown did:
    such a file shares a costly fixture (a server, a stack), which whichever of its tests runs first pays for."""
    costly_files = {e["file"] for e in entries if e.get("setup", 0) + e.get("teardown", 0) >= QUICK_LIMIT_S}
    slow = sorted(e["nodeid"] for e in entries if wall(e) >= QUICK_LIMIT_S or e["file"] in costly_files)
    header = (
        "# Tests that took 1 s or more (setup + call + teardown) in the last timing report, and every test of a file\n"
        "# whose fixtures took that long: `make check` leaves them out. Written by\n"
        "# `python -m tests.support.timing REPORT --write-slow` (tests/support/timing.py).\n"
    )
    SLOW_LIST.write_text(header + "\n".join(slow) + "\n")
    return len(slow)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.timing", description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--write-slow", action="store_true", help="rewrite tests/slow-tests.txt from the report")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    entries = load(args.report)
    print(table(entries, args.top))
    quick = [e for e in entries if wall(e) < QUICK_LIMIT_S]
    quick_min = sum(wall(e) for e in quick) / 60
    print(f"\n{len(quick)} of {len(entries)} tests under {QUICK_LIMIT_S:g} s: {quick_min:.1f} min")
    if args.write_slow:
        print(f"{write_slow(entries)} tests written to {SLOW_LIST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
