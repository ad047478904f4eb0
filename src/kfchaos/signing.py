"""Ed25519 signatures over what a run wrote, and the keys a verifier trusts.

A hash shows a file is what the seal lists; anyone who can write the folder can rewrite both. A signature made with
a key the folder's writer does not hold shows who sealed it. Two rules follow, and everything here keeps them:

- the key that signs is never in the folder: the pipeline's comes from a Kubernetes Secret (KFCHAOS_SIGNING_KEY, the
  PEM text as an environment variable, or KFCHAOS_SIGNING_KEY_FILE, the Secret mounted as a file); a local run's from
  a key file in the user's config folder (`$XDG_CONFIG_HOME/kfchaos/signing-key.pem`, made 0600 on first use);
- the key that verifies comes from outside the folder: a public key given (`--public-key FILE`), a pinned
  fingerprint (`--public-key sha256:...`), one placed in `$XDG_CONFIG_HOME/kfchaos/trusted-keys/`, or the public
  half of the user's own signing key. A signature records its public key, but only as a name: whoever rewrites the
  folder can sign it again with a key of their own and record that one, so a recorded key is trusted only when its
  fingerprint is pinned. A valid signature by any other key is reported as "not authenticated", never as ok; where
  this verifier trusts keys and the signer is none of them, as "signed by a stranger", apart from "unsigned".

Each signature is made over a domain-separated message (`<kind>\\0<bytes>`), so that a signature of one kind of
document can never stand for another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kfchaos import safefile
from kfchaos.errors import KfchaosError

ALGORITHM = "ed25519"
SIGNING_KEY_ENV = "KFCHAOS_SIGNING_KEY"  # the PEM text (a Kubernetes Secret as an environment variable)
# The Kubernetes Secret the pipeline mounts as SIGNING_KEY_ENV, given to the verdict task alone.
SIGNING_SECRET = "kfchaos-signing-key"
SIGNING_SECRET_KEY = "signing-key.pem"
SIGNING_KEY_FILE_ENV = "KFCHAOS_SIGNING_KEY_FILE"  # a PEM file (a Kubernetes Secret mounted as a volume)
LOCAL_KEY = "signing-key.pem"
LOCAL_PUBLIC_KEY = "signing-key.pub.pem"
TRUSTED_KEYS = "trusted-keys"
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
MAX_KEY_BYTES = 64 << 10  # a PEM key is a few hundred bytes; a larger file is not one


class SigningError(KfchaosError):
    """A key that is configured but cannot be used: named, with the reason."""


def config_folder() -> Path:
    """kfchaos's folder in the user's config dir (XDG Base Directory: $XDG_CONFIG_HOME, else ~/.config)."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "kfchaos"


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public: Ed25519PublicKey) -> str:
    """sha256:<hex> of the raw 32-byte public key: what a person pins."""
    return "sha256:" + hashlib.sha256(_raw(public)).hexdigest()


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _message(kind: str, data: bytes) -> bytes:
    return kind.encode() + b"\0" + data


@dataclass(frozen=True)
class Signer:
    key: Ed25519PrivateKey
    source: str  # where the key came from, for what is printed

    @property
    def public(self) -> Ed25519PublicKey:
        return self.key.public_key()

    def sign(self, kind: str, data: bytes) -> dict[str, str]:
        """The signature as a document records it: its public key is a name, never a reason to trust it."""
        return {
            "algorithm": ALGORITHM,
            "key_id": fingerprint(self.public),
            "public_key": base64.b64encode(_raw(self.public)).decode(),
            "value": base64.b64encode(self.key.sign(_message(kind, data))).decode(),
        }


def _private_from_pem(data: bytes, where: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{where}: not an unencrypted PEM private key ({str(exc).splitlines()[0]})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{where}: a {type(key).__name__}, not an Ed25519 key (openssl genpkey -algorithm ed25519)")
    return key


def _read_limited(path: Path, where: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise SigningError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_KEY_BYTES:
        raise SigningError(f"{where}: {path} is larger than {MAX_KEY_BYTES} bytes: not a key")
    return data


def _check_private(info: os.stat_result, path: Path) -> None:
    """As ssh does for its keys: a key file others may read or replace is refused (it may already be theirs)."""
    if info.st_uid != os.geteuid():
        raise SigningError(f"{path}: belongs to user id {info.st_uid}, not to this user: refused as a signing key")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise SigningError(
            f"{path}: mode {stat.S_IMODE(info.st_mode):o}, open to others: a signing key must be yours alone "
            f"(chmod 600 {path}, and make a new key if others could have read it)"
        )


def _make_local_key(folder: safefile.Folder) -> None:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:  # a new file only: a second kfchaos making its key at the same moment keeps the first one's
        with folder.create(LOCAL_KEY) as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
    except FileExistsError:
        return
    folder.write_text(LOCAL_PUBLIC_KEY, public_pem(key.public_key()))  # to hand to whoever verifies


def local_signer(create: bool = True) -> Signer | None:
    """The user's own signing key, made on first use (0600, in a 0700 folder); None when absent and not `create`."""
    folder_path = config_folder()
    path = folder_path / LOCAL_KEY
    if not create and not path.exists():
        return None
    with safefile.Folder.open(folder_path, private=True, own=True) as folder:
        if create and not folder.exists(LOCAL_KEY):
            _make_local_key(folder)
        try:
            data, info = folder.read(LOCAL_KEY, MAX_KEY_BYTES)  # never through a link
        except OSError as exc:
            raise SigningError(f"{path}: cannot read the signing key: {exc.strerror or exc}") from None
    _check_private(info, path)
    if len(data) > MAX_KEY_BYTES:
        raise SigningError(f"{path}: larger than {MAX_KEY_BYTES} bytes: not a key")
    return Signer(_private_from_pem(data, str(path)), str(path))


def configured_signer() -> Signer | None:
    """The key a pipeline step signs with: the Kubernetes Secret, as an environment variable or a mounted file."""
    text = os.environ.get(SIGNING_KEY_ENV, "")
    if text.strip():
        return Signer(_private_from_pem(text.encode(), SIGNING_KEY_ENV), SIGNING_KEY_ENV)
    path = os.environ.get(SIGNING_KEY_FILE_ENV, "")
    if path.strip():
        where = f"{SIGNING_KEY_FILE_ENV}={path}"
        return Signer(_private_from_pem(_read_limited(Path(path), where), where), where)
    return None


def signer(*, local: bool) -> Signer | None:
    """The key to sign with: the configured one (Secret) first; with `local`, else the user's own (made on first
    use). None: nothing to sign with (a pipeline step without the Secret)."""
    configured = configured_signer()
    if configured is not None or not local:
        return configured
    return local_signer(create=True)


# ---------------------------------------------------------------------- verifying


@dataclass
class Trust:
    """The public keys a verifier trusts, each with where it came from; pinned fingerprints besides."""

    keys: dict[str, tuple[Ed25519PublicKey, str]] = field(default_factory=dict)
    pinned: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # trusted-keys entries that could not be read

    def add(self, public: Ed25519PublicKey, where: str) -> None:
        self.keys.setdefault(fingerprint(public), (public, where))

    def describe(self) -> str:
        names = [f"{fp} ({where})" for fp, (_, where) in sorted(self.keys.items())]
        names += [f"{fp} (pinned: {where})" for fp, where in sorted(self.pinned.items())]
        return ", ".join(names) or "none"


def _public_from_pem(data: bytes, where: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{where}: not a PEM public key ({str(exc).splitlines()[0]})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{where}: a {type(key).__name__}, not an Ed25519 public key")
    return key


def trust(given: Sequence[str] = ()) -> Trust:
    """What this verifier trusts: each `--public-key` (a PEM file, or a sha256: fingerprint to pin), the keys in the
    config folder's trusted-keys/ (a folder others may write into is not read), and the user's own key's public
    half. Never anything from the folder being verified."""
    out = Trust()
    for value in given:
        if _FINGERPRINT.fullmatch(value.strip().lower()):
            out.pinned[value.strip().lower()] = "--public-key"
        else:
            where = f"--public-key {value}"
            out.add(_public_from_pem(_read_limited(Path(value), where), where), where)
    folder = config_folder()
    trusted = folder / TRUSTED_KEYS
    if trusted.is_dir():
        if any(_writable_by_others(p) for p in (folder, trusted)):
            out.problems.append(f"{trusted}: not only yours to write; its keys are not trusted")
        else:
            for path in sorted(trusted.iterdir()):
                if path.is_file() and not path.is_symlink() and path.suffix in (".pem", ".pub"):
                    try:
                        out.add(_public_from_pem(_read_limited(path, str(path)), str(path)), str(path))
                    except SigningError as exc:
                        out.problems.append(str(exc))
    try:
        own = local_signer(create=False)  # the public half of the user's own key, never made here
    except (SigningError, OSError) as exc:
        out.problems.append(str(exc))
    else:
        if own is not None:
            out.add(own.public, f"your own key, {own.source}")
    return out


def _writable_by_others(path: Path) -> bool:
    info = path.lstat()
    return info.st_uid != os.geteuid() or bool(stat.S_IMODE(info.st_mode) & 0o022) or stat.S_ISLNK(info.st_mode)


@dataclass(frozen=True)
class Verification:
    # "authenticated"; "unsigned"; "untrusted": a valid signature, and no key is trusted here; "stranger": a valid
    # signature by a key other than those trusted here; "invalid": a signature that does not verify
    status: str
    detail: str
    key_id: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.status == "authenticated"

    @property
    def tampered(self) -> bool:
        return self.status == "invalid"


def _decode(value: Any, length: int | None = None) -> bytes | None:
    if not isinstance(value, str) or len(value) > 256:
        return None
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if length is None or len(data) == length else None


def verify(signature: Any, kind: str, data: bytes, trusted: Trust) -> Verification:
    """Check a recorded signature over `data` against what this verifier trusts."""
    if signature is None:
        return Verification("unsigned", "integrity only: not authenticated (no signature)")
    if not isinstance(signature, dict) or signature.get("algorithm") != ALGORITHM:
        return Verification("invalid", "not an Ed25519 signature (damaged or forged)")
    value, recorded = _decode(signature.get("value"), 64), _decode(signature.get("public_key"), 32)
    if value is None:
        return Verification("invalid", "its value is not a 64-byte signature (damaged or forged)")
    message = _message(kind, data)
    for key_id, (public, where) in trusted.keys.items():
        try:
            public.verify(value, message)
        except InvalidSignature:
            continue
        return Verification("authenticated", f"signed by key {key_id}, trusted here ({where})", key_id)
    if recorded is None:
        return Verification("invalid", "it records no usable public key, and no key trusted here verifies it")
    public = Ed25519PublicKey.from_public_bytes(recorded)
    key_id = fingerprint(public)
    try:
        public.verify(value, message)
    except InvalidSignature:
        return Verification(
            "invalid", f"does not verify with the key it names ({key_id}): the signed content was changed", key_id
        )
    if key_id in trusted.pinned:
        return Verification("authenticated", f"signed by key {key_id}, pinned here ({trusted.pinned[key_id]})", key_id)
    if trusted.keys or trusted.pinned:
        # Keys are trusted here and this is none of them: someone else sealed it (a re-signed forgery, or a runner
        # whose key this verifier was never given). Said apart from "unsigned": removing the signature is still open
        # to whoever re-signed, so only --require-signed keeps either out.
        return Verification(
            "stranger",
            f"signed by a stranger: key {key_id} is not one of the keys trusted here ({trusted.describe()}): "
            "integrity only: not authenticated (whoever rewrites a folder can sign it with a key of their own); "
            "if the runner's key changed, trust the new one with --public-key FILE or its pinned fingerprint",
            key_id,
        )
    return Verification(
        "untrusted",
        f"integrity only: not authenticated: signed by key {key_id}, which is not trusted here (a key recorded in "
        "the folder is no proof: whoever rewrites the folder can sign with a key of their own); trust the runner's "
        "key with --public-key FILE or its pinned fingerprint",
        key_id,
    )
