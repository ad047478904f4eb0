"""Run one fuzz case with a bound on time and memory, and check its outcome against the contract.

Every input must end in a result (exit 0/1/2), an input error (exit 3) or INCONCLUSIVE, within a time bound and
with bounded memory. A case runs in a forked child (no re-import, a few milliseconds) with RLIMIT_AS set to the
parent's current address space plus MEMORY_BUDGET and an alarm at TIME_BOUND_S; a child that runs out of either is
reported as a failure of the case, with the input that caused it.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import resource
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
FUZZ_SCALE = int(os.environ.get("FUZZ_SCALE", "50"))  # `make fuzz FUZZ_SCALE=10` for a shorter hunt
TIME_BOUND_S = 20
MEMORY_BUDGET = 1 << 30  # bytes above the parent's address space at the fork


def budget(ci_examples: int) -> int:
    """Examples a fuzz test runs: its fixed CI budget, or FUZZ_SCALE times that under `make fuzz`."""
    return ci_examples * FUZZ_SCALE if PROFILE == "fuzz" else ci_examples


@dataclass(frozen=True)
class Outcome:
    """What a bounded call did: its return value, or the exception type and message, or a bound it broke."""

    value: Any = None
    error: str | None = None  # "ExcType: message" of an exception that escaped
    broke: str | None = None  # "time" or "memory" or "signal N"


def _address_space() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * resource.getpagesize()


def bounded(fn: Callable[[], Any], time_s: int = TIME_BOUND_S, memory: int = MEMORY_BUDGET) -> Outcome:
    """Call `fn` in a forked child under a time and memory bound; its return value must be picklable."""
    limit = _address_space() + memory
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            signal.alarm(time_s)
            try:
                result = Outcome(value=fn())
            except MemoryError:
                result = Outcome(broke="memory")
            except BaseException as exc:
                result = Outcome(error=f"{type(exc).__name__}: {str(exc)[:2000]}")
            signal.alarm(0)
            payload = pickle.dumps(result)
            with os.fdopen(write_fd, "wb") as out:
                out.write(payload)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as handle:
        payload = handle.read()
    _, status = os.waitpid(pid, 0)
    if payload:
        return pickle.loads(payload)  # type: ignore[no-any-return]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return Outcome(broke="time" if sig == signal.SIGALRM else f"signal {sig}")
    return Outcome(broke=f"child exited {os.waitstatus_to_exitcode(status)} without a result (likely memory)")


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


def _run_cli(argv: Sequence[str]) -> CliResult:
    from kfchaos.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 3
    return CliResult(code, out.getvalue(), err.getvalue())


_WARM = False


def warm() -> None:
    """Import every command and the modules commands import lazily, once, in the parent: a forked child then
    starts with them loaded (a cold child spends most of a second importing)."""
    global _WARM
    if _WARM:
        return
    import importlib

    from kfchaos.cli import build_parser

    build_parser()
    for name in (
        "kfchaos.spec", "kfchaos.baseline", "kfchaos.verdict", "kfchaos.faults.render", "kfchaos.kfp.schedules",
        "kfchaos.report.markdown", "kfchaos.report.page", "kfchaos.audit", "kfchaos.metrics.snapshot",
        "pyarrow.parquet", "pyarrow.dataset",
    ):  # fmt: skip
        importlib.import_module(name)
    _WARM = True


def run_cli(argv: Sequence[str], time_s: int = TIME_BOUND_S, memory: int = MEMORY_BUDGET) -> CliResult:
    """`kfchaos ARGV` in-process in a bounded child; fails the test if a bound broke or an exception escaped."""
    warm()
    outcome = bounded(lambda: _run_cli(argv), time_s, memory)
    assert outcome.broke is None, f"kfchaos {' '.join(argv)} broke its {outcome.broke} bound"
    assert outcome.error is None, f"kfchaos {' '.join(argv)} raised {outcome.error}"
    result: CliResult = outcome.value
    return result


def assert_contract(result: CliResult, allowed: Sequence[int] = (0, 1, 2, 3)) -> None:
    """The exit code is one the contract defines, and no traceback reached the user."""
    assert result.code in allowed, f"exit {result.code}; stderr: {result.stderr[-2000:]}"
    assert "Traceback (most recent call last)" not in result.stderr, result.stderr[-2000:]
    if result.code == 3:
        assert result.stderr.strip(), "an input error must say what was wrong"


if __name__ == "__main__":  # pragma: no cover
    sys.exit("harness is a library for tests/fuzz")
