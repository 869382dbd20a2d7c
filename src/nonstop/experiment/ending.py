"""How a run ends, and its checkpoints on the way.

`RunEnd`: every end of a run (complete, Ctrl-C, SIGTERM, a part that kept dying, a dead world)
takes one path — a final checkpoint while the world still runs, the teardown, the tick log, and
``summary.json`` with ``complete`` and ``reason`` — and this object says which end it was and the
exit status. `Checkpointer` writes checkpoints and keeps the newest whole ones; a full disk stops
checkpointing, never the run.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["RunEnd", "Checkpointer", "load_replay"]


class RunEnd:
    """How a training run ended, and what the trainer does about a signal while it stops.

    Every end takes one path (final checkpoint when the world still runs, teardown, tick log,
    ``summary.json`` with ``complete`` and ``reason``); this object says which end it was and the
    exit status: 0 complete, 130 Ctrl-C, 143 SIGTERM, the error re-raised (non-zero) otherwise.

    >>> end = RunEnd()
    >>> end.failed(KeyboardInterrupt()); (end.complete, end.exit_code, end.reason)
    (False, 130, 'interrupted (Ctrl-C)')
    """

    def __init__(self) -> None:
        self.complete = True
        self.reason: str | None = None
        self.exit_code = 0
        self.error: BaseException | None = None
        self.notes: list[str] = []

    def failed(self, exc: BaseException) -> None:
        from nonstop.realtime.host import HostError

        self.complete = False
        if isinstance(exc, KeyboardInterrupt):
            self.reason, self.exit_code = "interrupted (Ctrl-C)", 130
        elif isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else 1
            self.reason, self.exit_code = ("terminated (SIGTERM)" if code == 143 else f"exit requested ({code})"), code
        else:
            from nonstop.realtime.lifeline import PartFailed

            first = str(exc).splitlines()[0] if str(exc) else ""
            name = "the world's host died" if isinstance(exc, HostError) else type(exc).__name__
            if isinstance(exc, PartFailed):  # its message names the part and the cause
                name, first = first, ""
            self.reason, self.exit_code, self.error = f"{name}: {first}" if first else name, 1, exc

    def note(self, text: str) -> None:
        self.notes.append(text)

    @staticmethod
    def world_alive(run: Any) -> bool:
        world = getattr(run, "world", None)
        return world is not None and world.running

    def as_dict(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "interrupted": self.exit_code in (130, 143),
            "reason": self.reason,
            **({"notes": self.notes} if self.notes else {}),
        }

    @contextlib.contextmanager
    def second_signal_skips(self) -> Iterator[None]:
        """While the final checkpoint is written: Ctrl-C or SIGTERM again abandons it (the file is
        written atomically, so the older checkpoints stay whole) and the run goes on to its teardown."""
        try:
            yield
        except (KeyboardInterrupt, SystemExit) as exc:
            self.note(
                "final checkpoint skipped: "
                + ("Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "SIGTERM")
                + " again"
            )
            if self.complete:
                self.failed(exc)
        except Exception as exc:  # the teardown must still run; the failure is reported
            self.note(f"final checkpoint failed: {type(exc).__name__}: {exc}")
            if self.complete:
                self.failed(exc)

    @contextlib.contextmanager
    def signals_held(self) -> Iterator[None]:
        """Defer SIGINT and SIGTERM until the block ends (teardown must finish: it reaps children and
        unlinks shared memory); a signal that came meanwhile is noted, not lost."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        came: list[int] = []
        previous = {s: signal.signal(s, lambda signum, _: came.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if came:
                self.note("a signal during the teardown was held until it finished")
                if self.complete:
                    self.complete, self.exit_code = False, 128 + came[0]
                    self.reason = "interrupted (Ctrl-C)" if came[0] == signal.SIGINT else "terminated (SIGTERM)"


class Checkpointer:
    """Saves checkpoints and keeps the newest ``keep`` whole ones. A full disk (or any other failure
    to write) warns once and stops checkpointing; the world keeps ticking, the older checkpoints
    stay as they were (each file is written atomically)."""

    def __init__(self, out: Path, keep: int, *, warn: Callable[[str], None]) -> None:
        self.out, self.keep, self.warn = out, keep, warn
        self.disabled: str | None = None

    def save(
        self, snapshot: Callable[[], dict[str, Any]], updates: int, replay: Callable[[], dict[str, Any]] | None = None
    ) -> Path | None:
        """Write ``snapshot()`` as the checkpoint of ``updates``; with ``replay``, the replay's arrays go
        beside it into ``replay-<updates>.npz`` (compressed, written first), which the checkpoint names
        under ``replay_file``. Keeps the newest whole checkpoints and the replays they name."""
        from nonstop.learning.checkpoint import checkpoint_path, keep_last, save_checkpoint

        if self.disabled is not None:
            return None
        path = checkpoint_path(self.out, updates)
        try:
            state = snapshot()
            if replay is not None:
                state["replay_file"] = _save_replay(path.parent / f"replay-{updates:09d}.npz", replay())
            save_checkpoint(path, state)
            keep_last(self.out, self.keep)
            _prune_replays(path.parent)
        except OSError as exc:
            self.disabled = exc.strerror or str(exc)
            why = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"{exc.strerror or exc}"
            self.warn(
                f"warning: cannot write checkpoint {path.name} ({why}); checkpointing stops, the run goes on "
                "(the older checkpoints are intact; free space and resume from them)"
            )
            return None
        return path


def _save_replay(path: Path, arrays: dict[str, Any]) -> str:
    """The replay's arrays, compressed, written atomically; returns the file's name."""
    import numpy as np

    from nonstop._io import atomic_file

    named: dict[str, Any] = {name: np.asarray(a) for name, a in arrays.items()}
    with atomic_file(path) as f:
        np.savez_compressed(f, **named)
    return path.name


def _prune_replays(directory: Path) -> None:
    """Delete the replay files no remaining checkpoint names (their checkpoint was pruned)."""
    kept = {p.name.removeprefix("ckpt-").removesuffix(".pt") for p in directory.glob("ckpt-*.pt")}
    for replay in directory.glob("replay-*.npz"):
        if replay.name.removeprefix("replay-").removesuffix(".npz") not in kept:
            replay.unlink(missing_ok=True)


def load_replay(directory: Path, name: str) -> dict[str, Any]:
    """The replay arrays a checkpoint names (``replay_file``), as tensors, as an embedded replay was."""
    import numpy as np
    import torch

    with np.load(directory / name) as data:
        return {key: torch.from_numpy(np.array(data[key])) for key in data.files}
