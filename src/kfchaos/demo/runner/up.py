"""`kfchaos demo up` / `kfchaos demo down`: the demo stack kept running for one's own experiments.

`up` starts the demo LLM server (under its supervisor), the fault proxy and a local Prometheus, records a
control baseline for the demo experiment (unless --no-baseline), writes what it started to a state file
(runs/.work/demo-up.json), writes the environment a `run --local` needs to runs/.work/demo-up.env (to
`source`), and prints it with the exact `kfchaos run --local` line.
`down` reads the state file and stops every process it names (each is the leader of its own session, so
its group is signalled), then removes the file. `up` while a stack is up prints the same lines again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from kfchaos import safefile
from kfchaos.demo.stack.demostack import RECORD_NAME, DemoStack
from kfchaos.errors import KfchaosError

STATE_NAME = "demo-up.json"
ENV_NAME = "demo-up.env"
# Not read by kfchaos: the demo target's URL for the user's own `run --local --target "$KFCHAOS_TARGET"`, and the
# stack's control baseline file for `kfchaos init` (which copies it beside a starter experiment).
TARGET_ENV = "KFCHAOS_TARGET"
BASELINE_ENV = "KFCHAOS_DEMO_BASELINE"


@dataclass
class UpState:
    scenario: str
    workdir: str
    pids: list[int]
    target: str
    control: str
    prometheus: str
    server_state: str
    experiment: str
    started: str

    def env(self) -> dict[str, str]:
        env = {
            "KFCHAOS_FAULT_BACKEND": "local",
            "KFCHAOS_FAULT_PROXY": self.control,
            "KFCHAOS_DEMO_STATE": self.server_state,
            "KFCHAOS_PROMETHEUS_URL": self.prometheus,
            TARGET_ENV: self.target,
        }
        baseline = Path(self.workdir) / "baseline.yaml"
        if baseline.is_file():
            env[BASELINE_ENV] = str(baseline)
        return env

    def env_text(self) -> str:
        """The environment as a file to `source` (values quoted for a POSIX shell: paths may hold spaces)."""
        return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in self.env().items())

    def instructions(self, env_file: Path | None = None) -> str:
        from kfchaos.demo.faults.local_backend import LOCAL_FAULT_TYPES

        exports = self.env_text().rstrip("\n")
        source = f"written to {env_file}: source {env_file}\n" if env_file else ""
        return (
            f"demo stack up ({self.scenario} server settings); logs in {self.workdir}\n\n"
            f"{exports}\n{source}"
            f"kfchaos run {self.experiment} --local --target {self.target}\n\n"
            "Your own experiment: kfchaos init my-experiment.yaml, then\n"
            f"kfchaos run my-experiment.yaml --local --target {self.target}\n"
            f"(faults the local backend performs: {', '.join(LOCAL_FAULT_TYPES)}, and long-context bursts)\n"
            "Stop it with: kfchaos demo down"
        )


def state_path(runs_root: Path) -> Path:
    return runs_root / ".work" / STATE_NAME


def env_path(runs_root: Path) -> Path:
    return runs_root / ".work" / ENV_NAME


def write_env(state: UpState, runs_root: Path) -> Path:
    path = env_path(runs_root)
    safefile.write_text(path, state.env_text(), private=True)
    return path


def _alive(pid: int) -> bool:
    """Running and still one of ours: a pid from an old state file may since belong to another program."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc (not Linux): trust the state file
    return b"kfchaos.demo" in command or b"prometheus" in command


def read_state(runs_root: Path) -> UpState | None:
    path = state_path(runs_root)
    try:
        return UpState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise KfchaosError(f"{path}: unreadable demo state ({exc}); remove it after stopping the processes") from None


def up(runs_root: Path, scenario: str, baseline_seconds: float, with_baseline: bool = True) -> UpState:
    from kfchaos.demo.runner.scenarios import DEMO_EXPERIMENT, SCENARIOS, _capture_baseline, _scenario_experiment, log

    existing = read_state(runs_root)
    if existing is not None and any(_alive(pid) for pid in existing.pids):
        log(f"a demo stack is already up (started {existing.started}); `kfchaos demo down` stops it")
        return existing
    _, settings = SCENARIOS[scenario]
    workdir = safefile.unique_folder(runs_root.resolve() / ".work", f"up-{scenario}")
    stack = DemoStack(settings, workdir=workdir, tied=False)  # it outlives `up`, until `demo down`
    try:
        stack.start()
        experiment = DEMO_EXPERIMENT
        if with_baseline:
            log(f"recording the control baseline ({len(_stages())} stages of fault-free traffic)")
            baseline = _capture_baseline(stack, DEMO_EXPERIMENT, workdir / "baseline.yaml", baseline_seconds)
            experiment = _scenario_experiment(workdir, baseline)
    except BaseException:
        stack.stop()
        raise
    state = UpState(
        scenario=scenario,
        workdir=str(workdir),
        pids=[p.pid for p in stack.processes],
        target=stack.target_url,
        control=stack.control_url,
        prometheus=stack.prometheus_url or "",
        server_state=str(stack.state_file),
        experiment=str(experiment),
        started=datetime.now().isoformat(timespec="seconds"),
    )
    safefile.write_text(state_path(runs_root), json.dumps(asdict(state), indent=2), private=True)
    write_env(state, runs_root)
    return state


def _stages() -> list[int]:
    from kfchaos.demo.runner.scenarios import DEMO_EXPERIMENT
    from kfchaos.validate import load_experiment

    return list(load_experiment(DEMO_EXPERIMENT).spec.traffic.stages)


def _orphans(runs_root: Path) -> tuple[list[int], list[Path]]:
    """Process groups named by the records of tied stacks whose owner is gone (their folder's lock is free):
    a `kfchaos demo` killed where its children could not die with it. Their records, to remove after."""
    pids: list[int] = []
    records: list[Path] = []
    for record in sorted((runs_root / ".work").glob(f"*/{RECORD_NAME}")):
        if safefile.in_use(record.parent):
            continue  # a live demo's stack
        records.append(record)
        try:
            data = json.loads(record.read_text()[: 1 << 16])
            if data.get("tied"):  # an untied stack is `demo up`'s, named in its state file
                pids += [int(pid) for pid in data.get("pids", [])]
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return pids, records


def _stop_groups(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM the process groups led by the live ones of `pids`, SIGKILL what is left after `grace_s`; the pids
    that were alive."""
    running = [pid for pid in pids if _alive(pid)]
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in running):
        time.sleep(0.1)
    for pid in running:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    return running


def sweep_orphans(runs_root: Path, grace_s: float = 10.0) -> int:
    """End only what killed `kfchaos demo` runs left (their stack records), not a `demo up` stack: for
    `kfchaos cleanup --demo-runs`. The number of processes that were still running."""
    pids, records = _orphans(runs_root)
    running = _stop_groups(pids, grace_s)
    for record in records:
        record.unlink(missing_ok=True)
    return len(running)


def down(runs_root: Path, grace_s: float = 10.0) -> int:
    """Stop what `up` started, and what a killed `kfchaos demo` left (its stack record); the number of processes
    that were still running."""
    orphans, records = _orphans(runs_root)
    state = read_state(runs_root)
    if state is None:
        state = UpState("", "", [], "", "", "", "", "", "")
    running = _stop_groups([*state.pids, *orphans], grace_s)
    # The supervisor's child (the server) is in the supervisor's session; end it too if it outlived it.
    try:
        child = json.loads(Path(state.server_state).read_text()).get("pid") if state.server_state else None
        if child and _alive(int(child)):
            os.kill(int(child), signal.SIGKILL)
    except (OSError, ValueError):
        pass
    state_path(runs_root).unlink(missing_ok=True)
    for record in records:
        record.unlink(missing_ok=True)
    env_path(runs_root).unlink(missing_ok=True)
    return len(running)
