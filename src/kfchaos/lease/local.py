"""A local run's lease: the same Lease object (kfchaos.lease.record) in a file, one folder per target URL under the
user's cache folder ($XDG_CACHE_HOME/kfchaos/locks, else ~/.cache/kfchaos/locks; KFCHAOS_LOCK_DIR to choose another),
for runs with no cluster (`kfchaos run --local` against the demo or any URL).

The file plays the API server's part: every write names the resourceVersion it read and is refused (Conflict) when
the file has another by then, and each read-modify-write of the file happens under the folder's lock (flock: the
kernel drops it with the process that held it, so a killed run never leaves the folder locked; the lease inside
it then expires by the rules of kfchaos.lease.queue, or at once when its owner process is gone on this host).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kfchaos import safefile
from kfchaos.errors import KfchaosError
from kfchaos.lease.queue import Conflict, LeaseUnavailable
from kfchaos.lease.record import url_key

LOCK_DIR_ENV = "KFCHAOS_LOCK_DIR"
LEASE_FILE = "lease.json"
MAX_FILE_BYTES = 1 << 20
LOCK_WAIT_S = 10.0  # another process's read-modify-write takes milliseconds


def lock_root() -> Path:
    chosen = os.environ.get(LOCK_DIR_ENV)
    if chosen:
        return Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kfchaos" / "locks"


def folder_for(url: str, root: Path | None = None) -> Path:
    key = url_key(url)
    return (root or lock_root()) / hashlib.sha256(key.encode()).hexdigest()[:24]


class FileLeaseStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def for_url(cls, url: str) -> FileLeaseStore:
        return cls(folder_for(url))

    @property
    def where(self) -> str:
        return f"lock {self.folder / LEASE_FILE}"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KfchaosError(f"{self.where}: cannot make its folder ({exc})") from None
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fd = safefile.lock_folder(self.folder)
                break
            except safefile.FolderBusy:
                if time.monotonic() > deadline:
                    raise LeaseUnavailable(f"{self.where}: its folder stayed locked for {LOCK_WAIT_S:g}s") from None
                time.sleep(0.02)
        try:
            yield
        finally:
            os.close(fd)

    def _read(self) -> dict[str, Any] | None:
        path = self.folder / LEASE_FILE
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KfchaosError(f"{self.where}: {exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise KfchaosError(f"{self.where}: larger than {MAX_FILE_BYTES} bytes, not a lease")
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):
            raise KfchaosError(f"{self.where}: not JSON; remove it once no run uses the target") from None
        if not isinstance(parsed, dict):
            raise KfchaosError(f"{self.where}: not a Lease object; remove it once no run uses the target")
        return parsed

    def _write(self, obj: dict[str, Any], version: int) -> dict[str, Any]:
        stored = {**obj, "metadata": {**(obj.get("metadata") or {}), "resourceVersion": str(version)}}
        safefile.write_text(self.folder / LEASE_FILE, json.dumps(stored, sort_keys=True), private=True)
        return stored

    def get(self) -> dict[str, Any] | None:
        with self._locked():
            return self._read()

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        with self._locked():
            if self._read() is not None:
                raise Conflict(f"{self.where}: already exists")
            return self._write(obj, 1)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        with self._locked():
            current = self._read()
            if current is None:
                raise Conflict(f"{self.where}: gone since it was read")
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            if version != str((obj.get("metadata") or {}).get("resourceVersion") or ""):
                raise Conflict(f"{self.where}: changed since it was read")
            return self._write(obj, int(version) + 1 if version.isdigit() else 1)
