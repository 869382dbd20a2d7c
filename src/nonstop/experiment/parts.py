"""What every part of a run offers the run: a start, a stop, its state, and a few hooks.

A run (`nonstop.experiment.run.Run`) holds a list of parts and calls the same methods on each,
in order, so nothing in it depends on which parts they are: a seat's inference pool, the learners,
a self-play snapshot pool, a cluster connection. A part overrides what concerns it; the defaults
do nothing.

Order of calls: ``start`` (in list order, after the world started), then between slices of world
time ``before_slice`` and ``ticks_to_next``, and at the end ``stop`` (quiesce, reverse order) and
``close`` (release, reverse order). ``state_dict`` / ``load_state_dict`` carry what a checkpoint keeps;
``deaths`` lists what died on the way, for ``summary.json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nonstop.experiment.run import Run
    from nonstop.realtime.deaths import Death

__all__ = ["Part", "Recorder"]


class Part:
    """A part of a run. Subclasses set ``name`` and override what they need."""

    name: str = "part"
    #: a `PartFailed` once the part died more often than its restart budget allows, else None
    failure: BaseException | None = None

    def start(self, run: "Run") -> None:
        """Start threads, processes or actors; the world is already ticking."""

    def stop(self) -> None:
        """Stop acting or learning (idempotent), so a checkpoint is exact."""

    def close(self) -> None:
        """Release what the part holds (processes, shared memory, connections); idempotent."""

    def before_slice(self, run: "Run") -> None:
        """Called between slices of world time (e.g. take a snapshot, anneal ε)."""

    def ticks_to_next(self, env_ticks: int) -> int | None:
        """Ticks until the part needs `before_slice` again (None: no deadline of its own)."""
        return None

    def state_dict(self, *, include_replay: bool) -> dict[str, Any]:
        """What a checkpoint keeps of this part (tensors, arrays and plain values)."""
        return {}

    def load_state_dict(self, snap: dict[str, Any]) -> None:
        """Take this part's state back from a whole checkpoint (before `start`)."""

    def records(self, episodes: list[dict[str, Any]], run: "Run") -> dict[str, list[dict[str, Any]]]:
        """Rows the part derives from newly finished episodes, by kind (``{"matches": [...]}``)."""
        return {}

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        """The part's figures for ``summary.json``."""
        return {}

    def processes(self) -> int:
        """Processes of this machine the part keeps busy (for the machine-limit diagnosis)."""
        return 0

    def deaths(self) -> list["Death"]:
        """Every death of the part's workers or learners in this run (each said on stderr as it happened)."""
        return []

    def notes(self, run: "Run") -> list[str]:
        """What the measurements say of this part in this run, for the user before it starts."""
        return []


class Recorder:
    """What records a run as it goes (a run directory, a tracker): hooks `Run.execute` calls in order.

    ``open`` (before the run is built; may return the directory the tick log streams to), ``restore``
    (built, not started: take back a checkpoint), ``started``, ``slice`` (after each slice of world
    time), ``failing`` (the run is ending early: say why), ``stopped`` (quiesced: the last rows, a
    final checkpoint), ``finish`` (torn down: the summary; must not raise)."""

    def open(self, run: "Run") -> Any:
        return None

    def restore(self, run: "Run") -> None:
        """Take back what a resumed run had (before it starts)."""

    def started(self, run: "Run") -> None:
        """Every part has started."""

    def slice(self, run: "Run", done: float) -> None:
        """``done`` world seconds of this segment have run."""

    def failing(self, run: "Run", end: Any) -> None:
        """The run stops before its end (``end``: a `RunEnd` that says why)."""

    def stopped(self, run: "Run") -> None:
        """Inference and learning are stopped; the world's state is whole."""

    def finish(self, run: "Run", end: Any) -> None:
        """Every part is released; say how the run ended. Never raises."""
