"""Run every benchmark, or those named: `python -m tests.bench [NAME...]` (NAME as in bench_NAME.py)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import tests.bench as package


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("bench_"))
    wanted = [f"bench_{n.removeprefix('bench_')}" for n in argv] or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(names)}", file=sys.stderr)
        return 3
    for name in wanted:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"tests.bench.{name}").run()
        print(f"== {name} done in {time.perf_counter() - started:.1f}s\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
