"""The audit record of one run, and its verification.

A run writes one JSON record: run id, pipeline name/version/IR hash, image, git commit, the parameters it ran
with (so `kfchaos rerun` can resubmit it), the experiment and baseline with their hashes, the replay plan hash
of every stage, every chaos object applied with its events, timestamps, every step's result and the verdict.
`record_hash` covers all of it (canonical JSON), so an edited record is detected; `verify` recomputes every
hash it can from the record itself, plus the IR hash from the compiled pipeline file when the repository has it.
A recomputable hash does not stop whoever rewrites the record from rewriting the hash: when the step that writes
it has the pipeline's signing key (the Kubernetes Secret, kfchaos.signing), `record_signature` is an Ed25519
signature of `record_hash`, and `verify` checks it against the keys the verifier trusts ("integrity only: not
authenticated" without one). With the shared KFCHAOS_SEAL_KEY (kfchaos.runseal, an alternative: symmetric),
`record_hmac` is an HMAC of `record_hash`, checked where the key is given.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kfchaos import runseal, safefile, signing
from kfchaos.errors import KfchaosError
from kfchaos.faults.activity import run_fault_windows
from kfchaos.irhash import ir_hash
from kfchaos.jsonsource import load_json
from kfchaos.runseal import Finding

RECORD_KIND = "kfchaos.AuditRecord"
RECORD_VERSION = 1


def canonical(value: Any) -> bytes:
    """The bytes that are hashed: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def sha256_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_json(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def chaos_object_entry(obj: dict[str, Any]) -> dict[str, Any]:
    """An applied object as the record keeps it: the manifest, its hash, when and what happened."""
    manifest = obj.get("manifest", {})
    return {**obj, "manifest_sha256": sha256_json(manifest)}


def build_record(
    *,
    run_id: str,
    pipeline: dict[str, str],
    image: str,
    git_commit: str,
    parameters: dict[str, str],
    steps: list[dict[str, Any]],
    recovery: dict[str, Any] | None,
    verdict: dict[str, Any],
    started_at: float | None,
    finished_at: float,
) -> dict[str, Any]:
    """The sealed record. `parameters` must hold the run's pipeline parameters, `experiment` among them."""
    experiment_text = parameters.get("experiment", "")
    baseline_text = parameters.get("baseline", "")
    chaos_objects = [
        chaos_object_entry(obj)
        for step in steps
        if step.get("step") in ("inject", "stage")  # "inject": records of runs before faults moved into stages
        for obj in step.get("detail", {}).get("chaos_objects", [])
    ]
    plans = [
        {"stage": step["stage"], "plan_hash": step.get("detail", {}).get("plan_hash")}
        for step in steps
        if step.get("step") == "stage" and step.get("status") != "SKIPPED"
    ]
    record: dict[str, Any] = {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "run": {"id": run_id, "started_at": started_at, "finished_at": finished_at},
        "pipeline": pipeline,
        "image": image,
        "git_commit": git_commit,
        "parameters": parameters,
        "experiment": {"sha256": sha256_text(experiment_text)},
        "baseline": {"sha256": sha256_text(baseline_text) if baseline_text.strip() else None},
        "replay_plans": plans,
        "chaos_objects": chaos_objects,
        "fault_windows": run_fault_windows(steps),
        "steps": steps,
        "recovery": recovery,
        "verdict": verdict,
    }
    record["record_hash"] = sha256_json(record)
    secret = runseal.key()
    if secret is not None:
        record["record_hmac"] = runseal.sign(secret, record["record_hash"])
    try:  # the pipeline's key (a Kubernetes Secret); a step without it leaves the record unsigned, and says why
        signer = signing.configured_signer()
    except signing.SigningError as exc:
        signer, why = None, f"the signing key cannot be used: {exc}"
    else:
        why = f"no signing key in this step ({signing.SIGNING_KEY_ENV} and {signing.SIGNING_KEY_FILE_ENV} unset)"
    if signer is not None:
        record["record_signature"] = signer.sign(RECORD_KIND, record["record_hash"].encode())
    else:
        record["record_unsigned"] = why
    return record


def write_record(record: dict[str, Any], path: str | Path) -> None:
    safefile.write_text(path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")


def load_record(path: str | Path) -> dict[str, Any]:
    """The record in `path`; KfchaosError (exit 3) when unreadable or not a kfchaos audit record."""
    # Verdict figures may be NaN (json.dumps writes it), so the record reader accepts it.
    data = load_json(path, "audit record", finite_only=False)
    if not isinstance(data, dict) or data.get("kind") != RECORD_KIND:
        raise KfchaosError(f"{path}:1: kind: not a {RECORD_KIND}")
    for key in ("record_hash", "parameters", "pipeline", "experiment", "chaos_objects", "run"):
        if key not in data:
            raise KfchaosError(f"{path}:1: {key}: required field is missing")
    problems = _shape_problems(data)
    if problems:
        # A wrongly typed field is a damaged or hand-made record: an input error, not a "hash mismatch".
        raise KfchaosError("\n".join(f"{path}: {problem}" for problem in problems))
    return data


# A pipeline name or version becomes a path under pipelines/compiled/: plain names only, never `..` or `/`.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_OBJECT, _LIST, _TEXT, _OPTIONAL_TEXT = dict, list, str, (str, type(None))


def _kind(value: Any) -> str:
    names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _shape_problems(record: dict[str, Any]) -> list[str]:
    """The types `verify` relies on, `field: expected ..., got ...` per field that has another."""
    out: list[str] = []

    def want(field: str, value: Any, kind: type | tuple[type, ...], label: str) -> bool:
        if isinstance(value, kind) and not isinstance(value, bool):
            return True
        out.append(f"{field}: expected {label}, got {_kind(value)}")
        return False

    want("record_hash", record.get("record_hash"), _TEXT, "a string")
    if want("parameters", record.get("parameters"), _OBJECT, "an object"):
        for key, value in record["parameters"].items():
            want(f"parameters.{key}", value, _TEXT, "a string")
    if want("pipeline", record.get("pipeline"), _OBJECT, "an object"):
        for key in ("name", "version", "ir_hash"):
            value = record["pipeline"].get(key)
            typed = want(f"pipeline.{key}", value, _OPTIONAL_TEXT, "a string")
            if typed and key != "ir_hash" and value and not _PLAIN_NAME.fullmatch(value):
                out.append(f"pipeline.{key}: not a plain name (letters, digits, '.', '_', '-')")
    if want("experiment", record.get("experiment"), _OBJECT, "an object"):
        want("experiment.sha256", record["experiment"].get("sha256"), _OPTIONAL_TEXT, "a string")
    if "baseline" in record and want("baseline", record["baseline"], _OBJECT, "an object"):
        want("baseline.sha256", record["baseline"].get("sha256"), _OPTIONAL_TEXT, "a string or null")
    want("run", record.get("run"), _OBJECT, "an object")
    if want("chaos_objects", record.get("chaos_objects"), _LIST, "a list"):
        for index, obj in enumerate(record["chaos_objects"]):
            where = f"chaos_objects[{index}]"
            if want(where, obj, _OBJECT, "an object"):
                want(f"{where}.manifest", obj.get("manifest", {}), _OBJECT, "an object")
                want(f"{where}.manifest_sha256", obj.get("manifest_sha256"), _OPTIONAL_TEXT, "a string")
    if "replay_plans" in record and want("replay_plans", record["replay_plans"], _LIST, "a list"):
        for index, plan in enumerate(record["replay_plans"]):
            where = f"replay_plans[{index}]"
            if want(where, plan, _OBJECT, "an object"):
                stage = plan.get("stage")
                if want(f"{where}.stage", stage, int, "a stage percent") and not 0 <= stage <= 100:
                    out.append(f"{where}.stage: {stage} is not a stage percent (0..100)")
                want(f"{where}.plan_hash", plan.get("plan_hash"), _OPTIONAL_TEXT, "a string or null")
    return out[:50]


def _compare(what: str, recorded: Any, computed: Any) -> Finding:
    if recorded == computed:
        return Finding(what, True, str(computed))
    return Finding(what, False, f"recorded {recorded}, computed {computed}")


@contextlib.contextmanager
def _placeholder_env(name: str | None) -> Iterator[None]:
    if name is None or name in os.environ:
        yield
        return
    os.environ[name] = "placeholder-for-audit-verify"
    try:
        yield
    finally:
        os.environ.pop(name, None)


def _verify_plans(record: dict[str, Any]) -> list[Finding]:
    """Re-plan every stage from the recorded experiment: the plan is a pure function of the experiment, the
    traffic and the seed, so its hash must come out the same. Needs the traffic file where the run had it
    (synthetic traffic needs nothing); without it the plan is reported as not checked, never as ok."""
    from kfchaos.validate import parse_experiment

    findings: list[Finding] = []
    plans = record.get("replay_plans", [])
    if not plans:
        return findings
    parameters = record.get("parameters", {})
    try:
        experiment = parse_experiment(parameters.get("experiment", ""), "record parameters.experiment")
        from kfchaos.traffic.api import plan_stage
    except (KfchaosError, ImportError) as exc:
        return [Finding("replay_plans", False, f"cannot re-plan: {exc}")]
    base_dir = parameters.get("experiment_dir") or "."
    synthetic = experiment.spec.traffic.synthetic
    # A synthetic workload fitted to a recording (`fit_from`) needs that recording as a replay needs its file.
    for traffic_file in (experiment.spec.traffic.file, synthetic.fit_from if synthetic else None):
        if traffic_file and not (Path(base_dir) / traffic_file).is_file():
            return [Finding("replay_plans", True, f"not checked: traffic {Path(base_dir) / traffic_file} not here")]
    auth = experiment.spec.target.auth
    for plan in plans:
        what = f"replay_plans[stage {plan.get('stage')}]"
        try:
            # The plan hash names the credential header, never its value: verifying needs no secret.
            with _placeholder_env(auth.env if auth else None):
                computed = plan_stage(experiment, int(plan["stage"]), base_dir=base_dir).hash
        except (KfchaosError, OSError, KeyError, ValueError) as exc:
            findings.append(Finding(what, False, f"cannot re-plan: {exc}"))
            continue
        findings.append(_compare(what, plan.get("plan_hash"), computed))
    return findings


# Added after record_hash is computed: not part of what it covers.
SIGNATURE_FIELDS = ("record_hash", "record_hmac", "record_signature", "record_unsigned")


def verify(record: dict[str, Any], root: Path | None = None, trusted: signing.Trust | None = None) -> list[Finding]:
    """Recompute every hash and check the record's signature against `trusted` (default: what the user's config
    folder trusts); with `root`, also the IR hash of pipelines/compiled/<name>/<version>.yaml."""
    findings: list[Finding] = []
    body = {k: v for k, v in record.items() if k not in SIGNATURE_FIELDS}
    findings.append(_compare("record_hash", record.get("record_hash"), sha256_json(body)))
    verification = signing.verify(
        record.get("record_signature"),
        RECORD_KIND,
        str(record.get("record_hash")).encode(),
        signing.trust() if trusted is None else trusted,
    )
    if verification.status == "unsigned" and isinstance(record.get("record_unsigned"), str):
        verification = signing.Verification("unsigned", f"{verification.detail}: {record['record_unsigned'][:300]}")
    findings.append(runseal.signature_finding("record_signature", verification))
    signed, detail = runseal.check_signature(record.get("record_hmac"), record.get("record_hash"))
    findings.append(Finding("record_hmac", signed, detail))
    parameters = record.get("parameters", {})
    findings.append(
        _compare("experiment.sha256", record["experiment"].get("sha256"), sha256_text(parameters.get("experiment", "")))
    )
    baseline_text = parameters.get("baseline", "")
    findings.append(
        _compare(
            "baseline.sha256",
            record.get("baseline", {}).get("sha256"),
            sha256_text(baseline_text) if baseline_text.strip() else None,
        )
    )
    for index, obj in enumerate(record.get("chaos_objects", [])):
        name = f"chaos_objects[{index}] {obj.get('kind')}/{obj.get('name')}"
        findings.append(_compare(name, obj.get("manifest_sha256"), sha256_json(obj.get("manifest", {}))))
    findings += _verify_plans(record)
    pipeline = record.get("pipeline", {})
    if root is not None and pipeline.get("name") and pipeline.get("version"):
        compiled = root / "pipelines" / "compiled" / pipeline["name"] / f"{pipeline['version']}.yaml"
        if compiled.is_file():
            findings.append(
                _compare(f"pipeline.ir_hash ({compiled})", pipeline.get("ir_hash"), ir_hash(compiled.read_bytes()))
            )
        else:
            findings.append(Finding("pipeline.ir_hash", True, f"not checked: {compiled} not in this repository"))
    return findings
