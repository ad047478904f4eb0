"""The seal of a run folder (kfchaos.rundir): the SHA-256 of every file a verdict or report of the folder reads,
written last as `seal.json`, and its verification.

What the seal proves, and what it cannot (`kfchaos audit verify DIR` prints both):
- Without a key, the seal is a recomputable hash. It shows that no sealed file was changed, added to or removed
  from the folder by accident or by a tool that does not rewrite the seal; it cannot show that someone who
  rewrote a file did not also rewrite seal.json (anyone can recompute SHA-256).
- With a key (`KFCHAOS_SEAL_KEY`, held by the runner: in a cluster, a Kubernetes Secret mounted into the pipeline
  pod as that environment variable), the seal also carries an HMAC-SHA256 over its file list. Whoever verifies with
  the same key knows the files are the ones the key holder sealed; without the key the HMAC is reported as not
  checked, never as ok. docs/verdict.md ("Sealed run folder") says why a key and not a write-once store.
The verdict is re-judged from the folder's own inputs as well, so an edited verdict.json or report is caught even
when its hash was rewritten.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEAL = "seal.json"
SEAL_KIND = "kfchaos.RunSeal"
SEAL_VERSION = 1
KEY_ENV = "KFCHAOS_SEAL_KEY"
_CHUNK = 1 << 20
# A seal lists a few dozen files (evidence items included): far below this. A larger one is not read.
MAX_SEAL_BYTES = 4 << 20


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def key() -> bytes | None:
    """The runner's sealing key from KFCHAOS_SEAL_KEY, None when unset."""
    value = os.environ.get(KEY_ENV, "")
    return value.encode() if value else None


def sign(secret: bytes, body: Any) -> str:
    """HMAC-SHA256 over the canonical JSON of `body`."""
    return "hmac-sha256:" + hmac.new(secret, _canonical(body), hashlib.sha256).hexdigest()


def check_signature(recorded: Any, body: Any) -> tuple[bool, str]:
    """(ok, detail) of a recorded HMAC against this environment's key; ok without a key or without an HMAC, but
    the detail then says it was not checked."""
    secret = key()
    if recorded is None:
        return True, f"not checked: signed without a key ({KEY_ENV} was not set)"
    if secret is None:
        return True, f"not checked: {KEY_ENV} is not set here"
    good = hmac.compare_digest(str(recorded), sign(secret, body))
    return good, "matches the key" if good else "does not match the key"


def sealed_names(folder: Path, candidates: tuple[str, ...]) -> list[str]:
    """The files of `candidates` present in the folder, plus every file under evidence/ (one per item)."""
    names = [name for name in candidates if (folder / name).is_file()]
    evidence = folder / "evidence"
    if evidence.is_dir():
        names += sorted(str(p.relative_to(folder)) for p in evidence.rglob("*") if p.is_file())
    return sorted(set(names))


def seal(folder: Path, run_id: str, candidates: tuple[str, ...]) -> dict[str, Any]:
    """The seal over the folder's files (the caller writes it as SEAL, through kfchaos.safefile, with `dumps`)."""
    body: dict[str, Any] = {
        "kind": SEAL_KIND,
        "version": SEAL_VERSION,
        "run_id": run_id,
        "files": {name: file_sha256(folder / name) for name in sealed_names(folder, candidates)},
    }
    secret = key()
    document = {**body, "seal_hash": "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()}
    document["hmac"] = sign(secret, body) if secret else None
    return document


def dumps(document: dict[str, Any]) -> str:
    """seal.json's text."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Finding:
    what: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok      ' if self.ok else 'MISMATCH'} {self.what}: {self.detail}"


def check(folder: Path, candidates: tuple[str, ...]) -> list[Finding]:
    """Each sealed file's hash recomputed, files added or removed since, the seal's own hash and its HMAC."""
    path = folder / SEAL
    if not path.is_file():
        return [Finding(SEAL, False, "missing: the folder is not sealed, its files cannot be checked")]
    if path.stat().st_size > MAX_SEAL_BYTES:
        return [Finding(SEAL, False, f"larger than {MAX_SEAL_BYTES} bytes: not a seal")]
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return [Finding(SEAL, False, f"unreadable: {exc}")]
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict) or document.get("kind") != SEAL_KIND:
        return [Finding(SEAL, False, f"not a {SEAL_KIND}")]
    body = {k: document.get(k) for k in ("kind", "version", "run_id", "files")}
    out = []
    computed = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    out.append(_same("seal_hash", document.get("seal_hash"), computed))
    for name in sorted(files):
        target = folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            out.append(Finding(name, False, "not a file of the folder"))
        elif not target.is_file():
            out.append(Finding(name, False, "sealed but missing"))
        else:
            out.append(_same(name, files[name], file_sha256(target)))
    for name in sealed_names(folder, candidates):
        if name not in files:
            out.append(Finding(name, False, "present but not sealed (added after the run)"))
    good, detail = check_signature(document.get("hmac"), body)
    out.append(Finding("hmac", good, detail))
    return out


def _same(what: str, recorded: Any, computed: str) -> Finding:
    if recorded == computed:
        return Finding(what, True, computed)
    return Finding(what, False, f"recorded {recorded}, computed {computed}")


def proves(findings: list[Finding]) -> list[str]:
    """What this verification can and cannot prove, in words (printed by `kfchaos audit verify DIR`)."""
    keyed = any(f.what.endswith("hmac") and f.ok and f.detail == "matches the key" for f in findings)
    sealed = [f for f in findings if f.what != "rejudge"]
    rejudged = [f for f in findings if f.what == "rejudge"]
    lines = [
        "proves: every sealed file is byte for byte what was sealed, none is missing, none was added"
        if all(f.ok for f in sealed)
        else "proves: the folder is not as it was sealed, or its audit record disagrees with it (see MISMATCH)",
    ]
    if rejudged:
        lines.append(
            "proves: the verdict re-judged from the folder's own inputs is the verdict it holds"
            if all(f.ok for f in rejudged)
            else "proves: the verdict the folder holds is not the one its own inputs give (see rejudge)"
        )
    if keyed:
        lines.append("proves: the seal was written by a holder of the key")
    else:
        lines.append(
            "cannot prove: that seal.json itself was not rewritten along with the files (no key to check an HMAC; "
            f"set {KEY_ENV} to the runner's key)"
        )
    lines.append("cannot prove: that the records are what the target really answered (they are the replay's own)")
    return lines
