"""Result files that are never half-written, and output folders that one run writes at a time.

Every file goes to a hidden temporary in its folder (`.<name>.<random>.tmp`, or `.<stem>.<random>.tmp<ext>`
for writers that pick the format from the extension), is fsynced, then renamed over the final name: a
process killed at any moment leaves each result file absent, old, or complete. `hold_output` locks a
folder (flock on `.syncsim.lock`, released by the kernel when the holder dies, SIGKILL included) so
two runs never interleave their files, and removes the temporaries a killed run left there.
Stdlib only: the emulation's state files use it too.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from sim.errors import OutputBusy

try:
    import fcntl
except ImportError:  # not POSIX: folders are not locked
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".syncsim.lock"
# what `_temporary` creates; nothing else in a folder is ever removed by `clean_temporaries`
TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp(\.[A-Za-z0-9]+)?$")


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Replace `path` with `data` (str: UTF-8) in one rename: readers see the old file or the new one."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    target = Path(path)
    with _replacing(target, target.name, ".tmp") as tmp, open(tmp, "wb") as file:
        file.write(raw)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path to write `path`'s content to (it keeps the extension, for savefig, np.savez,
    to_parquet); renamed over `path` when the block ends, removed if the block raises."""
    target = Path(path)
    with _replacing(target, target.stem, f".tmp{target.suffix}") as tmp:
        yield tmp


def clean_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries a killed writer left in `folder` (call it while holding the folder);
    returns what was removed."""
    removed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if TEMPORARY.match(entry.name) and entry.is_file():
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


@contextmanager
def hold_output(folder: str | os.PathLike[str], command: Optional[str] = None) -> Iterator[Path]:
    """Create `folder` and hold it for this process until the block ends: a second holder (another
    process) gets OutputBusy naming this one's pid and `command` (default: this process's argv).
    Stale temporaries are removed once the folder is held. Without fcntl, nothing is locked."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield out
        return
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _lock(fd, folder):  # a file system without locks (some network mounts): written unlocked
            yield out
            return
        holder = command if command is not None else shlex.join(sys.argv)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {' '.join(holder.split())}\n".encode(), 0)
        clean_temporaries(out)
        try:
            yield out
        finally:
            os.ftruncate(fd, 0)  # a later reader of the file sees no stale holder
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, folder: str | os.PathLike[str]) -> bool:
    """Lock without waiting; OutputBusy if another process holds it, False where locks are unsupported."""
    assert fcntl is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        raise OutputBusy(
            f"--out {folder}: another syncsim run ({_holder(fd)}) is writing there; wait for it or choose another --out"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            return False
        raise


def _holder(fd: int) -> str:
    """'pid 1234, syncsim run a.yaml' from the lock file (its holder may not have written it yet)."""
    pid, _, command = os.pread(fd, 4096, 0).decode(errors="replace").strip().partition(" ")
    if not pid:
        return "pid unknown"
    return f"pid {pid}, {command}" if command else f"pid {pid}"


@contextmanager
def _replacing(target: Path, head: str, tail: str) -> Iterator[Path]:
    tmp = _temporary(target, head, tail)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # the rename itself survives a power cut only once the folder is synced
        _fsync(target.parent)
    except OSError:  # some file systems cannot sync a folder; the file itself is complete
        pass


def _temporary(target: Path, head: str, tail: str) -> Path:
    """A new empty file `.<head>.<random><tail>` beside `target`, with the mode a plain open() gives."""
    while True:
        tmp = target.with_name(f".{head}.{secrets.token_hex(4)}{tail}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
