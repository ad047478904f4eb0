"""Writes that stay in their folder: every output goes to a new temporary file in the destination's folder and is
renamed over the destination. rename(2) replaces a symlink planted at the destination instead of writing through
it (POSIX: "If newpath exists it is atomically replaced", and a symlink is an entry like any other), so a link
planted in an output folder (`--out`) can neither redirect a write to another file nor be half-written by a
crash: a reader sees the old file or the new one, never a cut one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from kfchaos.errors import KfchaosError


def replace_with(path: str | Path, write: Callable[[Path], object]) -> None:
    """Call `write(temporary path)`, then rename the temporary file onto `path`. The temporary file is created
    new (O_EXCL, mode 0600 then the usual 0644 less umask) next to `path`; it is removed when `write` fails."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        write(temporary)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    replace_with(path, lambda temporary: temporary.write_bytes(data))


def write_text(path: str | Path, text: str) -> None:
    replace_with(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def subfolder(path: str | Path) -> Path:
    """A folder inside an output folder, created if missing; refused when something planted it as a symlink
    (writing into it would write wherever the link points)."""
    path = Path(path)
    if path.is_symlink():
        raise FileExistsError(f"{path} is a symlink; kfchaos writes into its own folders only")
    path.mkdir(parents=True, exist_ok=True)
    return path


class FolderBusy(KfchaosError):
    """Another live process holds the folder's lock."""


def unique_folder(parent: str | Path, prefix: str) -> Path:
    """A new folder `<prefix>-<local time to the second>-<random>` under `parent`: readable by a person, and
    never shared by two runs started in the same second (mkdtemp creates it with O_EXCL semantics)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{stamp}-", dir=parent))


def lock_folder(path: str | Path) -> int:
    """Take the folder's lock (flock(2) on the folder itself: no lock file joins its contents) for as long as
    the returned descriptor is open; the kernel releases it when the process ends, however it ends.
    FolderBusy when another process holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderBusy(f"{path} is in use by another kfchaos process") from None
    return fd


def in_use(path: str | Path) -> bool:
    """Whether a live process holds the folder's lock."""
    try:
        os.close(lock_folder(path))
    except FolderBusy:
        return True
    except OSError:
        return False
    return False


@contextlib.contextmanager
def locked(path: str | Path) -> Iterator[None]:
    fd = lock_folder(path)
    try:
        yield
    finally:
        os.close(fd)
