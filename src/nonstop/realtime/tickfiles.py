"""The tick log's files: their formats, the atomic ``.npz`` writes and reads every nonstop file of
columns uses (tick logs, replays), and the checks that tell a whole chunk from a torn one.

The layouts themselves (a log directory of ``meta.json`` and ``chunk-NNNNNN.npz`` files, or one
``ticklog.npz``) are described in `nonstop.realtime.ticklog`, which reads and writes them. A file's
format names how it keeps a several-seat world's per-seat columns: ``…/1``, one named column per
seat and quantity (``seat1_delay``: every log written before the blocks, and every one-seat log,
which has no prefixed column); ``…/2``, one (rows × seats) array per quantity (`BLOCK_CHUNK_FORMAT`,
`BLOCK_LOG_FORMAT`).
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop._io import atomic_file, write_atomic
from nonstop.realtime.tickcolumns import SEAT_COLUMNS, SHARED_COLUMNS, column_names

__all__ = [
    "LOG_FORMAT",
    "BLOCK_LOG_FORMAT",
    "DIR_FORMAT",
    "CHUNK_FORMAT",
    "BLOCK_CHUNK_FORMAT",
    "META_FILE",
    "CHUNK_FILE_RE",
    "save_npz_atomic",
    "load_npz",
    "write_json_atomic",
    "is_ticklog_dir",
    "check_chunk",
]

LOG_FORMAT: Final = "nonstop.ticklog/1"  # a whole log in one .npz (`save`); seats as named columns
BLOCK_LOG_FORMAT: Final = "nonstop.ticklog/2"  # the same, a several-seat world's quantities as (ticks × seats) blocks
DIR_FORMAT: Final = "nonstop.ticklog.dir/1"
CHUNK_FORMAT: Final = "nonstop.ticklog.chunk/1"
BLOCK_CHUNK_FORMAT: Final = "nonstop.ticklog.chunk/2"
META_FILE: Final = "meta.json"
CHUNK_FILE_RE: Final = re.compile(r"chunk-(\d{6,})\.npz")


def save_npz_atomic(
    path: Path,
    header: dict[str, Any],
    arrays: dict[str, np.ndarray],
    *,
    fsync: bool = False,
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


def load_npz(
    path: str | os.PathLike, fmt: str | tuple[str, ...], what: str
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read back a `save_npz_atomic` file whose header says ``format: fmt`` (or one of ``fmt``): ``(header, arrays)``.
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
    if not isinstance(header, dict) or header.get("format") not in ((fmt,) if isinstance(fmt, str) else fmt):
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


def check_chunk(path: Path, *, full: bool, seats: int = 1) -> tuple[int, bool]:
    """Rows in chunk file ``path`` after checking its zip directory and header (``full``: every
    column too, through the zip CRC-32), and whether it keeps seats as named columns (``/1``) rather
    than blocks (``/2``). ValueError naming the file if it is torn or foreign, or of another seat count."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["__header__"]).decode())
            if not isinstance(header, dict) or header.get("format") not in (CHUNK_FORMAT, BLOCK_CHUNK_FORMAT):
                raise ValueError("not a tick-log chunk")
            n = int(header["rows"])
            named = header["format"] == CHUNK_FORMAT
            if not named and int(header.get("seats", 0)) != seats:
                raise ValueError(f"it holds {header.get('seats')} seats, the log {seats}")
            names = column_names(seats) if named else SHARED_COLUMNS + SEAT_COLUMNS
            missing = [c for c in names if c not in data.files]
            if missing:
                raise ValueError(f"it lacks columns {missing}")
            if full:
                for name in names:
                    shape = (n,) if named or name in SHARED_COLUMNS else (n, seats)
                    if data[name].shape != shape:
                        raise ValueError(f"column {name} has shape {data[name].shape}, the header says {shape}")
    except (OSError, KeyError, json.JSONDecodeError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"torn or unreadable chunk {path}: {exc}") from exc
    return n, named
