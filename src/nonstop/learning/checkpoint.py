"""Checkpoints that survive crashes: atomic writes, an integrity header, and resume checks.

A long realtime run (hours of env ticks, millions of updates) must be able to stop at any instant —
Ctrl-C, OOM-kill, power loss — and resume from the newest checkpoint that is whole. Three rules:

1. **Atomic.** `save_checkpoint` writes a temp file in the same directory, flushes and fsyncs it,
   then ``os.replace``-s it onto the final name (and fsyncs the directory). A reader sees the old
   file or the new one, never half of one; an interrupted write leaves no file under the final name.
2. **Verified.** The file is a 52-byte header then a ``torch.save`` payload. The header holds a magic
   tag, the format version, the payload length and its SHA-256, so a truncated or bit-flipped file
   is named as such by `load_checkpoint` (`CheckpointError`), instead of an unpickling traceback.
3. **Resume from what loads.** `latest_checkpoint` walks ``RUN/checkpoints/ckpt-<updates:09d>.pt``
   from the newest down and returns the first that verifies, reporting each newer one it skipped.

`check_compatible` guards ``--resume``: a run may only continue under the config it was started
with, except for keys that legitimately change (the tick budget, the output dir).

>>> import tempfile, torch
>>> run = Path(tempfile.mkdtemp())
>>> for updates in (100, 200):
...     _ = save_checkpoint(checkpoint_path(run, updates), {"updates": updates, "w": torch.ones(2)})
>>> _ = checkpoint_path(run, 200).write_bytes(b"NSCKPT")        # a crash ruined the newest one
>>> found = latest_checkpoint(run, warn=lambda message: None)
>>> (found.updates, found.state["updates"], [p.name for p, _ in found.skipped])
(100, 100, ['ckpt-000000200.pt'])
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import re
import struct
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from nonstop._io import TMP_SUFFIX, atomic_file, write_atomic

__all__ = [
    "CHECKPOINT_DIR",
    "DEFAULT_MAY_DIFFER",
    "Checkpoint",
    "atomic_file",
    "CheckpointError",
    "CheckpointWarning",
    "IncompatibleConfigError",
    "check_compatible",
    "checkpoint_path",
    "keep_last",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "save_checkpoint",
    "write_atomic",
]

#: Sub-directory of a run dir that holds the checkpoints.
CHECKPOINT_DIR: Final = "checkpoints"
#: Format of the file header (little endian): magic, format version, payload length, SHA-256.
MAGIC: Final = b"NSCKPT\r\n"  # the CR LF catches a text-mode (newline-mangling) copy
FORMAT_VERSION: Final = 1
_HEADER: Final = struct.Struct("<8sIQ32s")
HEADER_SIZE: Final = _HEADER.size  # 52 bytes
_NAME: Final = re.compile(r"^ckpt-(\d{9,})\.pt$")
#: Config keys that may change on resume: budgets and where things are written, not what is learned.
DEFAULT_MAY_DIFFER: Final = (
    "duration",
    "duration_s",
    "seconds",
    "ticks",
    "max_ticks",
    "total_ticks",
    "env_ticks",
    "budget",
    "updates",
    "max_updates",
    "out",
    "run_dir",
    "resume",
    "progress_every",
    "progress_interval_s",
    "checkpoint_every",
    "keep_checkpoints",
    "quiet",
    "verbose",
    "max_restarts",
    "restart_window",
    "trim_above",
    "device",
    "dtype",  # the same model, placed elsewhere: a run may move to (or off) a GPU
)


class CheckpointError(RuntimeError):
    """A checkpoint file cannot be used; the message names the file and what is wrong with it."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"checkpoint {self.path}: {problem}")


class CheckpointWarning(UserWarning):
    """A newer checkpoint was skipped because it does not load."""


class IncompatibleConfigError(ValueError):
    """``--resume`` under a config that differs from the saved one in keys that must not change.

    ``differences`` maps each differing key (dotted for nested dicts) to ``(saved, new)``; a key
    present on one side only shows as ``<absent>`` on the other.
    """

    def __init__(self, differences: dict[str, tuple[Any, Any]], may_differ: Iterable[str], where: str = "") -> None:
        self.differences = differences
        lines = [f"  {key}: saved {_show(saved)}, now {_show(new)}" for key, (saved, new) in differences.items()]
        allowed = ", ".join(may_differ) or "none"
        super().__init__(
            f"cannot resume{' ' + where if where else ''}: the config differs from the saved one in "
            f"{len(differences)} key{'s' if len(differences) != 1 else ''} that must stay the same:\n"
            + "\n".join(lines)
            + f"\nstart a new run with a different --out, or change these back (keys allowed to differ: {allowed})"
        )


class _Absent:
    """Stands for a key that one config lacks."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Final = _Absent()


def _show(value: Any) -> str:
    return repr(value) if value is _ABSENT else json.dumps(value, default=str)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint that loaded: its file, the update count in its name, its state, and the newer
    files that were skipped on the way, each with the reason."""

    path: Path
    updates: int
    state: dict[str, Any]
    skipped: list[tuple[Path, str]] = field(default_factory=list)


# ----------------------------------------------------------------------------- atomic files


# `atomic_file` and `write_atomic` live in `nonstop._io` (one writer for every atomic file); re-exported here.


# ----------------------------------------------------------------------------- one checkpoint


def checkpoint_path(run_dir: str | os.PathLike, updates: int) -> Path:
    """``RUN/checkpoints/ckpt-<updates:09d>.pt``: the name sorts by the learner update count."""
    if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
        raise ValueError(f"updates must be a non-negative int, got {updates!r}")
    return Path(run_dir) / CHECKPOINT_DIR / f"ckpt-{updates:09d}.pt"


class _HashingWriter:
    """Passes writes through to a file while hashing and counting them, so the payload is never
    held twice in memory (a 1B-parameter model is 4 GB)."""

    def __init__(self, file: BinaryIO) -> None:
        self.file, self.sha256, self.length = file, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.length += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


class _PayloadView(io.RawIOBase):
    """The payload of an open checkpoint file as a file of its own (positions relative to its start),
    so ``torch.load`` reads it in place."""

    def __init__(self, file: io.BufferedReader, offset: int) -> None:
        super().__init__()
        self.file, self.offset = file, offset
        file.seek(offset)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.file.readinto(buffer)

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            position += self.offset
        return self.file.seek(position, whence) - self.offset

    def tell(self) -> int:
        return self.file.tell() - self.offset


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any]) -> Path:
    """Save ``state`` (model and optimizer state dicts, counters, RNG states, config…) atomically.

    ``state`` must be a mapping with string keys. The payload streams to disk through a hash (no
    in-memory copy); the header, written last, records its length and SHA-256. If ``torch.save``
    fails half way the temp file is removed and ``path`` keeps whatever it held before.
    """
    import torch

    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict of what to save, got {type(state).__name__}")
    bad = [k for k in state if not isinstance(k, str)]
    if bad:
        raise TypeError(f"state keys must be strings, got {bad!r}")
    with atomic_file(path) as f:
        f.write(bytes(HEADER_SIZE))  # placeholder until the payload's length and hash are known
        writer = _HashingWriter(f)
        torch.save(dict(state), writer)  # type: ignore[arg-type]  # torch.save takes any object with write() and flush() (its docs); its annotation says IO[bytes]
        f.seek(0)
        f.write(_HEADER.pack(MAGIC, FORMAT_VERSION, writer.length, writer.sha256.digest()))
    return Path(path)


def _check_header(path: Path, f: BinaryIO) -> int:
    """Check the header and the payload's length and SHA-256 (read in chunks); return the payload
    length. Raises CheckpointError saying what is wrong."""
    head = f.read(HEADER_SIZE)
    if head[: len(MAGIC)] != MAGIC[: len(head)]:
        raise CheckpointError(
            path, "wrong format: not a nonstop checkpoint (no NSCKPT header; a bare torch.save file?)"
        )
    if len(head) < HEADER_SIZE:
        raise CheckpointError(path, f"truncated: {len(head)} bytes, shorter than the {HEADER_SIZE}-byte header")
    _, version, length, digest = _HEADER.unpack(head)
    if version != FORMAT_VERSION:
        raise CheckpointError(path, f"wrong format: version {version}, this nonstop reads version {FORMAT_VERSION}")
    size = os.fstat(f.fileno()).st_size - HEADER_SIZE
    if size < length:
        raise CheckpointError(path, f"truncated: {size} of {length} payload bytes (the write was cut short)")
    if size > length:
        raise CheckpointError(path, f"corrupt: {size} payload bytes, the header declares {length}")
    sha256 = hashlib.sha256()
    while chunk := f.read(1 << 20):
        sha256.update(chunk)
    if sha256.digest() != digest:
        raise CheckpointError(path, "corrupt: the SHA-256 of the payload does not match the header")
    return length


def load_checkpoint(path: str | os.PathLike, *, map_location: Any = "cpu", weights_only: bool = True) -> dict[str, Any]:
    """Load a checkpoint written by `save_checkpoint`, after verifying it is whole.

    ``weights_only=True`` (the default) unpickles only tensors and plain containers/numbers/strings,
    which covers model and optimizer state dicts and ``torch``/``random`` RNG states; pass ``False``
    for states holding other objects, from files you trust. Raises `CheckpointError` naming the file
    and saying whether it is missing, truncated, corrupt, or of the wrong format.
    """
    import torch

    path = Path(path)
    try:
        with open(path, "rb") as f:
            _check_header(path, f)
            try:
                payload = _PayloadView(f, HEADER_SIZE)
                state = torch.load(payload, map_location=map_location, weights_only=weights_only)  # type: ignore[arg-type]  # torch.load reads any seekable file-like (its docs); its annotation says IO[bytes]
            except Exception as exc:  # the hash matched, so this is about content, not bytes
                raise CheckpointError(path, f"wrong format: verified bytes but torch.load failed: {exc}") from exc
    except FileNotFoundError:
        raise CheckpointError(path, "no such file") from None
    except IsADirectoryError:
        raise CheckpointError(path, "is a directory, not a checkpoint file") from None
    if not isinstance(state, dict):
        raise CheckpointError(path, f"wrong format: holds a {type(state).__name__}, not a state dict")
    return state


# ----------------------------------------------------------------------------- a run's checkpoints


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(updates, path)`` of every ``ckpt-*.pt`` in ``RUN/checkpoints``, oldest first (temp files ignored)."""
    directory = Path(run_dir) / CHECKPOINT_DIR
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
    return sorted(found)


def latest_checkpoint(
    run_dir: str | os.PathLike,
    *,
    map_location: Any = "cpu",
    weights_only: bool = True,
    warn: Callable[[str], None] | None = None,
) -> Checkpoint | None:
    """The newest checkpoint of ``run_dir`` that loads, or ``None`` if the run has none yet.

    Newer files that do not load (truncated by a crash, corrupted on disk) are skipped: each is
    reported through ``warn`` (default: a `CheckpointWarning`) and listed in ``Checkpoint.skipped``.
    If checkpoints exist but none loads, `CheckpointError` lists them all: resuming from scratch
    silently would throw away a run.
    """
    report = warn if warn is not None else (lambda message: warnings.warn(message, CheckpointWarning, stacklevel=3))
    skipped: list[tuple[Path, str]] = []
    for updates, path in reversed(list_checkpoints(run_dir)):
        try:
            state = load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        except CheckpointError as exc:
            skipped.append((path, exc.problem))
            report(f"skipping {exc}; trying an older checkpoint")
            continue
        return Checkpoint(path=path, updates=updates, state=state, skipped=skipped)
    if skipped:
        listing = "\n".join(f"  {p.name}: {problem}" for p, problem in skipped)
        raise CheckpointError(
            Path(run_dir) / CHECKPOINT_DIR, f"none of the {len(skipped)} checkpoints loads:\n{listing}"
        )
    return None


#: Checkpoints already verified whole, by (path, size, mtime): each is hashed once, not at every save.
_VERIFIED: set[tuple[str, int, int]] = set()


def _is_whole(path: Path) -> bool:
    """Whether ``path`` passes `load_checkpoint`'s byte checks (header, length, SHA-256)."""
    try:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key in _VERIFIED:
            return True
        with open(path, "rb") as f:
            _check_header(path, f)
    except (OSError, CheckpointError):
        return False
    _VERIFIED.add(key)
    return True


def keep_last(run_dir: str | os.PathLike, n: int) -> list[Path]:
    """Keep the ``n`` newest checkpoints that are whole; delete every older one and leftover temp files.

    A corrupt or truncated file never counts as kept: retention walks from the newest, verifying
    each file (once: its hash is remembered), until ``n`` whole ones are found, so a run always keeps
    ``n`` checkpoints it can resume from when it has written that many. Temp files are left by a
    writer that was killed (SIGKILL) mid-write; there is one writer per run, so any left when this
    runs are orphans. Returns the removed paths.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"keep_last needs n >= 1 checkpoints to keep, got {n!r}")
    found = list_checkpoints(run_dir)
    whole, cut = 0, 0
    for i in range(len(found) - 1, -1, -1):
        whole += _is_whole(found[i][1])
        if whole == n:
            cut = i
            break
    removed = [path for _, path in found[:cut]]
    directory = Path(run_dir) / CHECKPOINT_DIR
    if directory.is_dir():
        removed += [p for p in directory.iterdir() if p.name.startswith(".ckpt-") and p.name.endswith(TMP_SUFFIX)]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


# ----------------------------------------------------------------------------- resume guard


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted keys; values are normalised through JSON so that a tuple in the new
    config equals the list it became in the saved ``config.json``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = json.loads(json.dumps(value, default=str))
    return out


def check_compatible(
    saved_config: Mapping[str, Any],
    new_config: Mapping[str, Any],
    may_differ: Iterable[str] = DEFAULT_MAY_DIFFER,
    *,
    where: str = "",
) -> None:
    """Raise `IncompatibleConfigError` listing every key (with both values) in which the configs differ.

    Keys matching a pattern in ``may_differ`` (``fnmatch`` globs on the dotted key, e.g. ``"log_*"``)
    are allowed to differ. ``where`` (e.g. the run dir) goes into the message.

    >>> check_compatible({"env": "Pong", "lr": 1e-4, "ticks": 10}, {"env": "Pong", "lr": 1e-4, "ticks": 99})
    >>> check_compatible({"env": "Pong", "lr": 1e-4}, {"env": "Boxing", "lr": 1e-4, "k": 7}, ())
    Traceback (most recent call last):
    ...
    nonstop.learning.checkpoint.IncompatibleConfigError: cannot resume: the config differs from the saved one in 2 keys that must stay the same:
      env: saved "Pong", now "Boxing"
      k: saved <absent>, now 7
    start a new run with a different --out, or change these back (keys allowed to differ: none)
    """
    for name, config in (("saved_config", saved_config), ("new_config", new_config)):
        if not isinstance(config, Mapping):
            raise TypeError(f"{name} must be a dict, got {type(config).__name__}")
    patterns = tuple(may_differ)
    saved, new = _flatten(saved_config), _flatten(new_config)
    differences = {
        key: (saved.get(key, _ABSENT), new.get(key, _ABSENT))
        for key in sorted(saved.keys() | new.keys())
        if saved.get(key, _ABSENT) != new.get(key, _ABSENT) and not any(fnmatch.fnmatchcase(key, p) for p in patterns)
    }
    if differences:
        raise IncompatibleConfigError(differences, patterns, where)
