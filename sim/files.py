"""Result files that are never half-written, and output folders that one run writes at a time.

Every file goes to a hidden temporary in its folder (`.<name>.<random>.tmp`, or `.<stem>.<random>.tmp<ext>`
for writers that pick the format from the extension), is fsynced, then renamed over the final name: a
process killed at any moment leaves each result file absent, old, or complete. `hold_output` locks a
folder (flock on `.syncsim.lock`, released by the kernel when the holder dies, SIGKILL included) so
two runs never interleave their files, and removes the temporaries a killed run left there.

A forked child (a sweep's pool worker) shares its parent's open lock, and would keep the folder held
after the parent is SIGKILLed: children close their copy at fork, and a lock still held while the pid
it names is gone (left by such a child of an older version, or of a process that forked another way)
is taken over with a note on stderr: the lock file is replaced by a new one.
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

from sim.errors import OutputBusy, UsageError

try:
    import fcntl
except ImportError:  # not POSIX: folders are not locked
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".syncsim.lock"
# a new holder writes its pid just after locking: a dead pid read in that instant is re-read after this
SETTLE_S = 0.2
_held_fds: set[int] = set()  # this process's lock files, closed in forked children


def _forget_locks_in_child() -> None:
    """Close the forked child's copies of the parent's lock files: the lock stays the parent's alone, so
    it ends with the parent (a child holding the folder after its parent died would refuse re-runs)."""
    for fd in list(_held_fds):
        try:
            os.close(fd)  # never LOCK_UN: that would release the parent's lock too
        except OSError:
            pass
    _held_fds.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)
# what `_temporary` creates; nothing else in a folder is ever removed by `clean_temporaries`
TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp(\.[A-Za-z0-9]+)?$")


def not_a_link(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """`path`, refused (UsageError naming `flag`) when it is a symbolic link, dangling or not: results are
    never written through a link, whose target may be anywhere (a shared folder, a system file); naming
    the target itself says where they go. `syncsim` applies it to every command's --out before running."""
    out = Path(path)
    if out.is_symlink():
        raise UsageError(
            f"{flag}: {out} is a symbolic link (to {os.readlink(out)}); output is not written through a link: "
            "name the folder or file it points to, or another path"
        )
    return out


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
    fd = _acquire(out, folder)
    try:
        if fd is None:  # a file system without locks (some network mounts): written unlocked
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
        if fd is not None:
            _held_fds.discard(fd)
            os.close(fd)  # releases the lock


def _acquire(out: Path, folder: str | os.PathLike[str]) -> Optional[int]:
    """The locked lock file's descriptor (None where the file system has no locks). A lock whose named
    holder is dead is taken over: the file is renamed away, and the lock taken on a new one."""
    path = out / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _lock(fd, folder)
        except OutputBusy:
            dead = _dead_holder(fd)
            if dead is None:
                os.close(fd)
                raise
            _take_over(fd, path, dead)
            os.close(fd)
            continue
        if locked and not _same_file(fd, path):  # replaced by a take-over meanwhile: lock the new file
            os.close(fd)
            continue
        if not locked:
            os.close(fd)
            return None
        _held_fds.add(fd)
        return fd


def _dead_holder(fd: int) -> Optional[str]:
    """The holder the lock file names ('pid 123, syncsim sweep a.yaml') if that pid is not running, and
    still names after `SETTLE_S` (a new holder may not have written its pid yet); None otherwise."""
    first = os.pread(fd, 4096, 0)
    pid = first.split(b" ", 1)[0]
    if not pid.isdigit() or _alive(int(pid)):
        return None
    import time

    time.sleep(SETTLE_S)
    return _holder(fd) if os.pread(fd, 4096, 0) == first else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _take_over(fd: int, path: Path, dead: str) -> None:
    """Move the dead holder's lock file aside (its leftover processes keep their lock on it, harmlessly)
    so that the next open creates a fresh one; a note says so."""
    assert fcntl is not None
    aside = path.with_name(f".{LOCK_NAME.lstrip('.')}.{secrets.token_hex(4)}.tmp")
    guard = os.open(path.parent, os.O_RDONLY)  # take-overs one at a time: the folder itself is their lock
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not _same_file(fd, path):  # another process took it over first
            return
        os.rename(path, aside)
    finally:
        os.close(guard)
    os.unlink(aside)
    print(
        f"note: {path.parent}: took over the lock of a syncsim process that is gone ({dead}); "
        "processes it left may still run",
        file=sys.stderr,
    )


def _same_file(fd: int, path: Path) -> bool:
    """`path` still names the file `fd` has open (a take-over replaces the lock file)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


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
