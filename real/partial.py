"""What a rank measured before a failure, saved for rank 0 to merge (real/session.py): files in
`<out>/partial/` in a data format that cannot run code.

A report (real.accounting.RankReport, real.results.ServerReport, with its DeviceUse) is turned into
plain values (dicts, lists, tuples, numbers, strings, None and CPU tensors) and written with
`torch.save`; it is read back with `torch.load(weights_only=True)`, whose unpickler builds only
those types and refuses any other global, so a file planted in the folder cannot execute anything.
Each file's name carries the run's id (`<policy index>-rank<r>.<run id>.pt`, `run_id` below): rank 0
merges only its own run's files and deletes them, and clears older runs' leftovers when a run starts.
"""

from __future__ import annotations

import io
import pickle
import re
import secrets
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from real.accounting import RankReport
from real.device_use import DeviceUse
from real.results import ServerReport
from sim.files import atomic_write

FOLDER = "partial"
_KINDS: dict[str, type] = {cls.__name__: cls for cls in (RankReport, ServerReport, DeviceUse)}
_TAG = "__report__"  # key naming the dataclass a dict stands for
_OURS = re.compile(r"\d+-rank\d+\.(pkl|[0-9a-f]+\.pt)")  # this module's files (and the pickles of older versions)


def run_id(group: Optional[Any] = None) -> str:
    """An id every rank of this run shares: rank 0 draws it and broadcasts it over `group` (a gloo group)."""
    drawn = torch.tensor([secrets.randbits(62) if dist.get_rank() == 0 else 0], dtype=torch.int64)
    dist.broadcast(drawn, src=0, group=group)
    return format(int(drawn.item()), "x")


def path(out: Path, index: int, rank: int, run: str) -> Path:
    return out / FOLDER / f"{index}-rank{rank}.{run}.pt"


def save(out: Path, index: int, rank: int, run: str, report: Any) -> None:
    """Write `report` (of policy `index`, by `rank`) whole, in one rename: rank 0 never sees half a file."""
    target = path(out, index, rank, run)
    target.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(_plain(report), buffer)
    atomic_write(target, buffer.getvalue())


def load(file: Path) -> Any:
    """A report `save` wrote. Nothing in the file runs: torch's weights-only unpickler builds plain values
    and tensors only (anything else raises `pickle.UnpicklingError`)."""
    return _report(torch.load(file, map_location="cpu", weights_only=True))


def read(out: Path, index: int, run: str) -> list[Any]:
    """This run's reports for policy `index`; a file that is not one is skipped with a line on stderr."""
    reports = []
    for file in files(out, index, run):
        try:
            reports.append(load(file))
        except (pickle.UnpicklingError, RuntimeError, ValueError, TypeError, EOFError, OSError) as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"syncsim real: skipped {file}: not a saved report ({why})", file=sys.stderr)
    return reports


def files(out: Path, index: int, run: str) -> list[Path]:
    """This run's files for policy `index`, in rank order."""
    found = (out / FOLDER).glob(f"{index}-rank*.{run}.pt")
    return sorted(found, key=lambda p: int(p.name.split(".")[0].partition("-rank")[2]))


def clear(out: Path, keep: str = "") -> None:
    """Remove the files of runs other than `keep` (this module's names only) and the folder once empty."""
    folder = out / FOLDER
    if not folder.is_dir():
        return
    for file in folder.iterdir():
        if _OURS.fullmatch(file.name) and not file.name.endswith(f".{keep}.pt"):
            file.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:  # not empty: this run's files, or something the user put there
        pass


def _plain(value: Any) -> Any:
    """`value` as types the weights-only unpickler builds; a known dataclass as a tagged dict."""
    if is_dataclass(value) and not isinstance(value, type):
        kind = type(value).__name__
        if _KINDS.get(kind) is not type(value):
            raise TypeError(f"cannot save a {kind} in a partial report")
        return {_TAG: kind, **{f.name: _plain(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, np.generic):  # numpy scalars pickle through numpy's globals
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return type(value)(_plain(v) for v in value)
    if type(value) is dict:
        return {k: _plain(v) for k, v in value.items()}
    raise TypeError(f"cannot save a {type(value).__name__} in a partial report")


def _report(value: Any) -> Any:
    """The inverse of `_plain`: tagged dicts back to the dataclasses they came from."""
    if isinstance(value, dict):
        items = {k: _report(v) for k, v in value.items()}
        kind = items.pop(_TAG, None)
        if kind is None:
            return items
        if kind not in _KINDS:
            raise ValueError(f"a partial report names an unknown kind {kind!r}")
        return _KINDS[kind](**items)
    if isinstance(value, (list, tuple)):
        return type(value)(_report(v) for v in value)
    return value
