"""The tick log's files: their formats, the atomic ``.npz`` writes and reads every nonstop file of
columns uses (tick logs, replays), and the checks that tell a whole chunk from a torn one.

The layouts themselves (a log directory of ``meta.json`` and ``chunk-NNNNNN.npz`` files, or one
``ticklog.npz``) are described in `nonstop.realtime.ticklog`, which reads and writes them.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop._io import atomic_file, write_atomic
from nonstop.realtime.tickcolumns import COLUMNS

__all__ = ["LOG_FORMAT", "DIR_FORMAT", "CHUNK_FORMAT", "META_FILE", "CHUNK_FILE_RE", "save_npz_atomic", "load_npz",
           "write_json_atomic", "is_ticklog_dir", "check_chunk"]

LOG_FORMAT: Final = "nonstop.ticklog/1"  # a whole log in one .npz (`save`)
DIR_FORMAT: Final = "nonstop.ticklog.dir/1"
CHUNK_FORMAT: Final = "nonstop.ticklog.chunk/1"
META_FILE: Final = "meta.json"
CHUNK_FILE_RE: Final = re.compile(r"chunk-(\d{6,})\.npz")


def save_npz_atomic(
    path: Path, header: dict[str, Any], arrays: dict[str, np.ndarray], *, fsync: bool = False,
    compresslevel: int | None = None,
) -> Path:
    """Write a compressed ``.npz`` of ``arrays`` plus a JSON ``__header__`` atomically (a temp
    file in the same directory, then a rename): a crash never leaves half a file under ``path``.
    ``fsync`` also forces the bytes to the device (`nonstop._io.atomic_file`'s ``durable``: a power cut keeps it whole).
    ``compresslevel``: zlib's level (default: numpy's, 6; the tick log's chunks use 1, five times
    faster for the same size on tick-log columns)."""
    blob = np.frombuffer(json.dumps(header, default=str).encode(), np.uint8)
    with atomic_file(path, durable=fsync) as f:
        if compresslevel is None:
            # allow_pickle=False as in the branch below: an object array could not be read back
            np.savez_compressed(f, __header__=blob, allow_pickle=False, **arrays)
        else:  # what savez_compressed does, at a chosen level
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as z:
                for name, array in {"__header__": blob, **arrays}.items():
                    with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
    return path


def load_npz(path: str | os.PathLike, fmt: str, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read back a `save_npz_atomic` file whose header says ``format: fmt``: ``(header, arrays)``.
    Every failure is a ``ValueError`` (``FileNotFoundError`` if absent) naming the file and ``what``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no {what} at {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["__header__"]).decode())
            arrays = {name: data[name] for name in data.files if name != "__header__"}
    except (OSError, KeyError, json.JSONDecodeError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != fmt:
        found = header.get("format") if isinstance(header, dict) else header
        raise ValueError(f"{path} is not a nonstop {what} (format {found!r})")
    return header, arrays


def write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(obj, default=str).encode())


def is_ticklog_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a tick-log directory (holds a ``meta.json`` of the right format)."""
    meta = Path(path) / META_FILE
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("format") == DIR_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_chunk(path: Path, *, full: bool, names: Sequence[str] = tuple(COLUMNS)) -> int:
    """Rows in chunk file ``path`` after checking its zip directory and header (``full``: every
    column too, through the zip CRC-32). ValueError naming the file if it is torn or foreign."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["__header__"]).decode())
            if not isinstance(header, dict) or header.get("format") != CHUNK_FORMAT:
                raise ValueError("not a tick-log chunk")
            n = int(header["rows"])
            missing = [c for c in names if c not in data.files]
            if missing:
                raise ValueError(f"it lacks columns {missing}")
            if full:
                for name in names:
                    if len(data[name]) != n:
                        raise ValueError(f"column {name} has {len(data[name])} rows, the header says {n}")
    except (OSError, KeyError, json.JSONDecodeError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"torn or unreadable chunk {path}: {exc}") from exc
    return n
