"""Reading an input file with a bound: a regular file, at most a given size, checked before it is read.

Configs, their `extends:` bases, sweep files and `workload.profile` files name paths the user chose,
and a path can name anything: `/dev/zero` never ends, a FIFO blocks until someone writes, a directory
cannot be read. The file is opened without blocking, checked to be a regular file (`fstat` on the open
descriptor, so the check is about what is read), and at most `limit + 1` bytes are read: a file that
grows past the cap while being read is still refused, and nothing larger than the cap is ever in memory.
A path is made absolute through `resolved`, which words a loop of symbolic links as the field's error.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Union

from sim.errors import ConfigError

MB = 1_000_000


def read_bounded(path: Union[str, os.PathLike[str]], field: str, limit: int, what: str = "a file") -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes; `ConfigError` naming
    `field` (and the cap, for `what`) otherwise. A missing or unreadable file raises the `OSError`, for
    the caller to word as it words its other read errors."""
    target = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(target, flags)  # O_NONBLOCK: opening a FIFO with no writer returns at once
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{field}: {target} is not a regular file ({_kind(info.st_mode)}); name a file")
        if info.st_size > limit:
            raise ConfigError(_too_big(field, target, info.st_size, limit, what))
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew while being read (only limit + 1 bytes were read)
        raise ConfigError(_too_big(field, target, len(data), limit, what))
    return data


def resolved(path: Union[str, os.PathLike[str]], field: str) -> Path:
    """`path` made absolute with its symbolic links followed; `ConfigError` naming `field` and the path
    where they cannot be followed: a link to itself, or a loop of links (Python 3.11 raises that as a
    RuntimeError, 3.13 as OSError ELOOP), which would otherwise end as a traceback."""
    if "\0" in str(path):  # os functions refuse a NUL byte with a ValueError, deep inside
        raise ConfigError(f"{field}: {str(path)!r}: a path cannot hold a NUL character")
    try:
        return Path(path).resolve()
    except RuntimeError:
        why = "its symbolic links loop"
    except OSError as exc:
        why = "its symbolic links loop" if exc.errno == errno.ELOOP else f"cannot follow it ({exc.strerror})"
    raise ConfigError(f"{field}: {path}: {why}; name the file itself")


def _too_big(field: str, path: Path, size: int, limit: int, what: str) -> str:
    cap = f"{limit / MB:g} MB" if limit >= MB else f"{limit:,} bytes"
    shown = f"{size / MB:,.1f} MB"
    if limit < MB or shown == f"{limit / MB:,.1f} MB":  # just over: the bytes say by how much
        shown = f"{size:,} bytes"
    return f"{field}: {path}: {shown}, over the {cap} limit for {what}"


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"
