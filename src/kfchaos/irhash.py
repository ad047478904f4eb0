"""The IR hash a compiled pipeline carries (kfchaos.kfp.versioning seals it at compile; kfchaos.audit recomputes it).

A compiled pipeline file embeds its own hash: it is compiled with a fixed stand-in (`IR_HASH_PLACEHOLDER`, passed
to the verdict step), the file is hashed, and the stand-in is replaced by that hash -- same length, so nothing else
moves. Every run's audit record therefore names the exact IR it ran, and anyone can recompute it from the file.
Pure hashing, in the model layer, so the audit verifies a pipeline without importing the KFP glue.
"""

from __future__ import annotations

import hashlib
import re

from kfchaos.errors import KfchaosError

IR_HASH_PLACEHOLDER = "sha256:" + "0" * 64
_IR_HASH = re.compile(r"pipeline_ir_hash:\s+runtimeValue:\s+constant:\s+(sha256:[0-9a-f]{64})")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def seal(compiled: bytes) -> tuple[bytes, str]:
    """Replace the stand-in by the hash of the file as compiled with it; returns (sealed bytes, IR hash)."""
    if IR_HASH_PLACEHOLDER.encode() not in compiled:
        raise KfchaosError("compiled pipeline has no pipeline_ir_hash stand-in; was it built by build_pipeline?")
    digest = _sha256(compiled)
    return compiled.replace(IR_HASH_PLACEHOLDER.encode(), digest.encode()), digest


def ir_hash(sealed: bytes) -> str:
    """Recompute the IR hash of a sealed pipeline file (undoing the seal, then hashing)."""
    match = _IR_HASH.search(sealed.decode("utf-8"))
    if not match:
        raise KfchaosError("not a sealed kfchaos pipeline: no pipeline_ir_hash constant found")
    embedded = match.group(1)
    return _sha256(sealed.replace(embedded.encode(), IR_HASH_PLACEHOLDER.encode()))


def embedded_ir_hash(sealed: bytes) -> str | None:
    match = _IR_HASH.search(sealed.decode("utf-8"))
    return match.group(1) if match else None
