"""The one way kfchaos writes a file: nothing is written through a link someone else planted, nothing is left
half-written, and what holds evidence or secrets is the owner's alone.

How (every writer in kfchaos goes through `Folder`, or the one-file helpers below, which open a `Folder` for the
file's folder):
- A folder is opened once (`open(2)` with O_DIRECTORY) and every name inside it is used relative to that
  descriptor (the *at(2) calls, Python's `dir_fd`): a symlink swapped in for the folder's path after it was opened
  does not move where the writes go, and a name inside it is never resolved through a link.
- A file is written to a new temporary in the same folder, created with O_CREAT|O_EXCL|O_NOFOLLOW (so a name
  planted at the temporary's name, link or file, is never opened: the create fails and another name is tried),
  flushed to disk, and renamed onto its name. rename(2) replaces the directory entry: a symlink planted at the
  name is replaced, not followed, and a hard link planted at it keeps the other file's contents untouched (only
  this folder's entry changes). A reader sees the old file or the new one, never a cut one; a failed write
  leaves the old file and no temporary.
- A file that is written as things happen (a log, the cleanup's audit lines) is made the same way and renamed onto
  its name at once (`Folder.stream`), then written through its own descriptor.
- kfchaos's own folders (a run folder, evidence/, a replay's `.partial/`, a demo's work folder, the key folder) are
  refused when a symlink stands at their name or another user owns them (that user could change their files);
  folders and files that hold evidence or secrets are created 0700 / 0600 (`private`), and an own private folder
  that is open to others is closed to them first.
The path a person gives (`--out DIR`, the folder of `--out FILE`) is followed as given: it is theirs to name.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from kfchaos.errors import KfchaosError

PRIVATE_FILE_MODE = 0o600
PRIVATE_FOLDER_MODE = 0o700
# Mode bits asked for a shared file or folder; the process umask takes its part away (0644 / 0755 usually).
SHARED_FILE_MODE = 0o666
SHARED_FOLDER_MODE = 0o777
_TEMPORARY_TRIES = 100
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeFolder(KfchaosError):
    """A folder kfchaos would write into is a symlink, or is not its user's."""


class FolderBusy(KfchaosError):
    """Another live process holds the folder's lock."""


def _check_name(name: str) -> str:
    """A name inside a folder: one path component, never `.`, `..` or one with a separator."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"{name!r} is not a file name inside a folder")
    return name


class Folder:
    """A folder opened once; every file and folder inside it is made through its descriptor."""

    def __init__(self, fd: int, path: Path, private: bool) -> None:
        self.fd = fd
        self.path = path
        self.private = private

    @classmethod
    def open(cls, path: str | Path, *, private: bool = False, own: bool = False) -> Folder:
        """The folder at `path`, created (with its parents) when missing. `own`: a folder of kfchaos's own, refused
        when a symlink stands at its name or another user owns it. `private`: made 0700 (an own folder that is
        open to others is closed to them)."""
        path = Path(path)
        if not path.is_dir() and not path.is_symlink():
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: checked below as any other
                os.mkdir(path, PRIVATE_FOLDER_MODE if private else SHARED_FOLDER_MODE)
        flags = _OPEN_DIR | (os.O_NOFOLLOW if own else 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if own and exc.errno in (errno.ELOOP, errno.ENOTDIR) and path.is_symlink():
                raise UnsafeFolder(f"{path} is a symlink; kfchaos writes into its own folders only") from None
            raise
        folder = cls(fd, path, private)
        if own:
            try:
                folder._check_own()
            except BaseException:
                folder.close()
                raise
        return folder

    def _check_own(self) -> None:
        info = os.fstat(self.fd)
        if info.st_uid != os.geteuid():
            raise UnsafeFolder(
                f"{self.path} belongs to user id {info.st_uid}, not to this user ({os.geteuid()}): its owner could "
                "change the files kfchaos writes there; give a folder of your own"
            )
        if self.private and stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(self.fd, PRIVATE_FOLDER_MODE)

    # ------------------------------------------------------------------ files

    def _temporary(self, name: str) -> tuple[str, int]:
        mode = PRIVATE_FILE_MODE if self.private else SHARED_FILE_MODE
        for _ in range(_TEMPORARY_TRIES):
            temporary = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
            try:
                return temporary, os.open(temporary, _CREATE, mode, dir_fd=self.fd)
            except FileExistsError:  # taken, or something planted there: another name
                continue
        raise FileExistsError(errno.EEXIST, f"no free temporary name for {name} in {self.path}")

    def write(self, name: str, fill: Callable[[BinaryIO], object]) -> Path:
        """Call `fill(handle)` on a new temporary file, then rename it onto `name`; returns the file's path."""
        _check_name(name)
        temporary, fd = self._temporary(name)
        try:
            with os.fdopen(fd, "wb") as handle:
                fill(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise
        return self.path / name

    def write_bytes(self, name: str, data: bytes) -> Path:
        return self.write(name, lambda handle: handle.write(data))

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8"))

    def copy(self, name: str, source: str | Path) -> Path:
        """A copy of the file `source` (read as given) under `name`."""

        def fill(handle: BinaryIO) -> None:
            with open(source, "rb") as original:
                shutil.copyfileobj(original, handle)

        return self.write(name, fill)

    def stream(self, name: str) -> BinaryIO:
        """A new, empty file under `name` (replacing what was there), open for writing as things happen."""
        _check_name(name)
        temporary, fd = self._temporary(name)
        try:
            os.rename(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise
        return os.fdopen(fd, "wb")

    def create(self, name: str) -> BinaryIO:
        """A new file under `name`, which must not exist (not even as a link): FileExistsError otherwise."""
        mode = PRIVATE_FILE_MODE if self.private else SHARED_FILE_MODE
        return os.fdopen(os.open(_check_name(name), _CREATE, mode, dir_fd=self.fd), "wb")

    def rename(self, name: str, new_name: str) -> Path:
        os.rename(_check_name(name), _check_name(new_name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return self.path / new_name

    def remove(self, name: str) -> None:
        """Remove the entry `name` (a link is removed, never what it points to); nothing when it is missing."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_check_name(name), dir_fd=self.fd)

    def remove_tree(self, name: str) -> None:
        """Remove the folder `name` and what is in it; a symlink at the name is removed, never followed."""
        _check_name(name)
        try:
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=self.fd)  # fd-based: it follows no link (shutil._rmtree_safe_fd)
        else:
            os.unlink(name, dir_fd=self.fd)

    def read(self, name: str, limit: int) -> tuple[bytes, os.stat_result]:
        """Up to `limit` + 1 bytes of the file `name` and its status, opened without following a link (a symlink
        at the name is an OSError, ELOOP)."""
        fd = os.open(_check_name(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        with os.fdopen(fd, "rb") as handle:
            return handle.read(limit + 1), os.fstat(handle.fileno())

    def names(self) -> list[str]:
        """The entries of the folder (read through its descriptor)."""
        return os.listdir(self.fd)

    def exists(self, name: str) -> bool:
        try:
            os.stat(_check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    # ------------------------------------------------------------------ folders

    def subfolder(self, name: str, *, private: bool | None = None) -> Folder:
        """The folder `name` inside this one, made when missing; kfchaos's own (a symlink at the name, or one another
        user owns, is refused). Private when this folder is, unless told."""
        _check_name(name)
        private = self.private if private is None else private
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, PRIVATE_FOLDER_MODE if private else SHARED_FOLDER_MODE, dir_fd=self.fd)
        try:
            fd = os.open(name, _OPEN_DIR | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafeFolder(
                    f"{self.path / name} is a symlink or not a folder; kfchaos writes into its own folders only"
                ) from None
            raise
        folder = Folder(fd, self.path / name, private)
        try:
            folder._check_own()
        except BaseException:
            folder.close()
            raise
        return folder

    # ------------------------------------------------------------------ lifetime

    def lock(self) -> None:
        """Take the folder's lock (flock(2) on the folder itself: no lock file joins its contents) until it is
        closed; the kernel releases it when the process ends, however it ends. FolderBusy when another holds it."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(f"{self.path} is in use by another kfchaos process") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- one file


def replace_with(path: str | Path, fill: Callable[[BinaryIO], object], *, private: bool = False) -> Path:
    """Write the file `path` through `fill(handle)` (Folder.write in the file's folder, made when missing)."""
    path = Path(path)
    with Folder.open(path.parent, private=private) as folder:
        return folder.write(path.name, fill)


def write_bytes(path: str | Path, data: bytes, *, private: bool = False) -> Path:
    return replace_with(path, lambda handle: handle.write(data), private=private)


def write_text(path: str | Path, text: str, *, private: bool = False) -> Path:
    return write_bytes(path, text.encode("utf-8"), private=private)


def copy_file(path: str | Path, source: str | Path, *, private: bool = False) -> Path:
    path = Path(path)
    with Folder.open(path.parent, private=private) as folder:
        return folder.copy(path.name, source)


def stream(path: str | Path, *, private: bool = False) -> BinaryIO:
    """A new, empty file at `path`, open for writing as things happen (Folder.stream)."""
    path = Path(path)
    with Folder.open(path.parent, private=private) as folder:
        return folder.stream(path.name)


def create(path: str | Path, *, private: bool = False) -> BinaryIO:
    """A new file at `path`, which must not exist, not even as a link (a guessable name in a shared folder)."""
    path = Path(path)
    with Folder.open(path.parent, private=private) as folder:
        return folder.create(path.name)


# ---------------------------------------------------------------------- folders


def unique_folder(parent: str | Path, prefix: str) -> Path:
    """A new folder `<prefix>-<local time to the second>-<random>` under `parent`: readable by a person, and
    never shared by two runs started in the same second (mkdtemp creates it 0700, with O_EXCL semantics)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{stamp}-", dir=parent))


def lock_folder(path: str | Path) -> int:
    """Take the folder's lock for as long as the returned descriptor is open (Folder.lock)."""
    fd = os.open(path, _OPEN_DIR)
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
