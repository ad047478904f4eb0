"""The seal of a run folder (kfchaos.rundir): the SHA-256 of every file a verdict or report of the folder reads,
signed, written last as `seal.json`, and its verification.

What the seal proves, and what it cannot (`kfchaos audit verify DIR` prints both; docs/reliability.md, "An audit
nobody can forge", says what an attacker with the folder, the key, or both can do):
- The hashes show that no sealed file was changed, added or removed since the seal was written. Alone they are
  integrity only, not authenticity: anyone who can write the folder can rewrite a file and recompute every hash.
- The Ed25519 signature (kfchaos.signing) shows who sealed it: it is made with a key the folder's writer does not
  hold (a Kubernetes Secret in the pipeline, a key file in the user's config folder for a local run), and checked
  with a key the verifier trusts from outside the folder (`--public-key`, a pinned fingerprint, the config folder).
  A seal without a signature, or signed by a key not trusted here, verifies as "integrity only: not authenticated"
  (`kfchaos audit verify --require-signed` fails on it); a signature that does not verify is a mismatch.
- The HMAC (`KFCHAOS_SEAL_KEY`, kept as an alternative for setups that already share that key) is symmetric: anyone
  who can check it can also make it, the verifier included, so it never counts as signed. A verifier that has the
  key set requires it: a seal without an HMAC, or with one that does not match, is a mismatch.
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

from kfchaos import signing

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
    """The shared HMAC key from KFCHAOS_SEAL_KEY, None when unset."""
    value = os.environ.get(KEY_ENV, "")
    return value.encode() if value else None


def sign(secret: bytes, body: Any) -> str:
    """HMAC-SHA256 over the canonical JSON of `body`."""
    return "hmac-sha256:" + hmac.new(secret, _canonical(body), hashlib.sha256).hexdigest()


def check_signature(recorded: Any, body: Any) -> tuple[bool, str]:
    """(ok, detail) of a recorded HMAC against this environment's key. Where the key is set, the HMAC must be there
    and match it: a verifier given the key expects it on everything it checks, so a missing one is a mismatch (else
    whoever rewrites a folder would only have to drop the HMAC). Without the key here it is not checked, and the
    detail says so."""
    secret = key()
    if secret is None:
        if recorded is None:
            return True, f"not checked: signed without a key ({KEY_ENV} was not set), and it is not set here"
        return True, f"not checked: {KEY_ENV} is not set here"
    if recorded is None:
        return False, (
            f"missing: {KEY_ENV} is set here, and this carries no HMAC: whoever wrote it did not hold the key "
            "(sealed without it, or rewritten by someone without it)"
        )
    good = hmac.compare_digest(str(recorded), sign(secret, body))
    return good, "matches the key" if good else "does not match the key"


def sealed_names(folder: Path, candidates: tuple[str, ...]) -> list[str]:
    """The files of `candidates` present in the folder, plus every file under evidence/ (one per item)."""
    names = [name for name in candidates if (folder / name).is_file()]
    evidence = folder / "evidence"
    if evidence.is_dir():
        names += sorted(str(p.relative_to(folder)) for p in evidence.rglob("*") if p.is_file())
    return sorted(set(names))


def seal(
    folder: Path,
    run_id: str,
    candidates: tuple[str, ...],
    signer: signing.Signer | None = None,
    unsigned_because: str = "no signing key",
) -> dict[str, Any]:
    """The seal over the folder's files, signed by `signer` (the caller writes it as SEAL, through kfchaos.safefile,
    with `dumps`)."""
    body: dict[str, Any] = {
        "kind": SEAL_KIND,
        "version": SEAL_VERSION,
        "run_id": run_id,
        "files": {name: file_sha256(folder / name) for name in sealed_names(folder, candidates)},
    }
    secret = key()
    document = {**body, "seal_hash": "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()}
    document["hmac"] = sign(secret, body) if secret else None
    document["signature"] = signer.sign(SEAL_KIND, _canonical(body)) if signer is not None else None
    if signer is None:
        document["unsigned"] = unsigned_because
    return document


def dumps(document: dict[str, Any]) -> str:
    """seal.json's text."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Finding:
    what: str
    ok: bool
    detail: str
    authenticated: bool = False  # a signature that verified with a key trusted here
    signer: str = ""  # a signature's finding: its kfchaos.signing.Verification status ("stranger", "unsigned", ...)

    def __str__(self) -> str:
        return f"{'ok      ' if self.ok else 'MISMATCH'} {self.what}: {self.detail}"


def signature_finding(what: str, verification: signing.Verification) -> Finding:
    """A signature's finding: a mismatch only when it does not verify; authenticated only with a trusted key."""
    return Finding(what, not verification.tampered, verification.detail, verification.authenticated,
                   verification.status)  # fmt: skip


def signer(findings: list[Finding], what: str = "signature") -> str:
    """The status of the finding `what`'s signature (kfchaos.signing.Verification.status), "" when it has none."""
    return next((f.signer for f in findings if f.what == what and f.signer), "")


def sealed_run_id(folder: Path) -> str | None:
    """The run id the folder's seal names (covered by its hash list, its signature and its HMAC), or None when the
    seal cannot be read: `check` says why."""
    path = folder / SEAL
    try:
        if path.stat().st_size > MAX_SEAL_BYTES:
            return None
        document = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    run_id = document.get("run_id") if isinstance(document, dict) else None
    return run_id if isinstance(run_id, str) else None


def check(folder: Path, candidates: tuple[str, ...], trusted: signing.Trust | None = None) -> list[Finding]:
    """Each sealed file's hash recomputed, files added or removed since, the seal's own hash, its signature (against
    `trusted`, default: what the user's config folder trusts) and its HMAC."""
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
    trusted = signing.trust() if trusted is None else trusted
    verification = signing.verify(document.get("signature"), SEAL_KIND, _canonical(body), trusted)
    if verification.status == "unsigned" and isinstance(document.get("unsigned"), str):
        verification = signing.Verification("unsigned", f"{verification.detail}: {document['unsigned'][:300]}")
    out.append(signature_finding("signature", verification))
    good, detail = check_signature(document.get("hmac"), body)
    out.append(Finding("hmac", good, detail))
    return out


def _same(what: str, recorded: Any, computed: str) -> Finding:
    if recorded == computed:
        return Finding(what, True, computed)
    return Finding(what, False, f"recorded {recorded}, computed {computed}")


def authenticated(findings: list[Finding], what: str = "signature") -> bool:
    """Whether the finding `what` (the seal's signature, or a record's) verified with a key trusted here."""
    return any(f.what == what and f.authenticated for f in findings)


def proves(findings: list[Finding]) -> list[str]:
    """What this verification can and cannot prove, in words (printed by `kfchaos audit verify DIR`)."""
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
    signature = next((f for f in findings if f.what == "signature"), None)
    if signature is not None and signature.authenticated:
        lines.append(
            f"proves: the seal was {signature.detail}: whoever wrote the folder without that key could not have made it"
        )
    else:
        lines.append(
            "integrity only: not authenticated: anyone who can write the folder could have rewritten its files and "
            "recomputed every hash (sign runs with a key of the runner's, and verify with --public-key FILE or a "
            "pinned fingerprint)"
        )
    if any(f.what.endswith("hmac") and f.ok and f.detail == "matches the key" for f in findings):
        lines.append(
            f"proves: the HMAC was made by a holder of {KEY_ENV}; it is symmetric, so any holder, this verifier "
            "included, could have made it: it is not a signature"
        )
    lines.append("cannot prove: that the records are what the target really answered (they are the replay's own)")
    return lines
