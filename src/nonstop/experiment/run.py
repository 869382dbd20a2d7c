"""One training run, composed of parts: a world, the drivers of its seats, learners, a cluster.

`Run` asks the registry (`nonstop.experiment.registry`) for the parts its config names — the
seating (who sits where), each seat's driver, the policy and learner backends, the cluster — and
then treats every part alike (`Part`, below): it starts them, lets the world run
in slices between which each part may act (a snapshot, ε's anneal), stops them, and saves or
restores each through its own ``state_dict`` / ``load_state_dict``. Nothing here depends on which
parts they are.

Model latency is declared with a `LatencyPolicy` (``latency="5t"``: five ticks), so a small network
can stand in for a large one honestly: its actions arrive as late as the large model's would. On the
virtual clock an update *takes* ``tau_l`` seconds (default τ_M); on the wall clock it takes what it takes.

>>> from nonstop.experiment.config import TrainConfig
>>> run = Run(TrainConfig(env="CartPole", seconds=1.0, algo_settings={"learning_starts": 20, "replay_capacity": 10_000}))
>>> run.n_inference, run.tau_m
(1, 0.02)
>>> try:
...     _ = run.build().start()
...     run.advance(1.0)
... finally:
...     run.teardown()
>>> len(run.world.tick_log), run.final_updates > 0, [p.name for p in run.parts]
(50, True, ['cluster', 'learning', 'pool', 'learners'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from nonstop.experiment.config import TrainConfig
from nonstop.experiment.ending import RunEnd
from nonstop.experiment.registry import lookup
from nonstop.learning.algos import Algorithm
from nonstop.realtime.deaths import Death
from nonstop.realtime.lifeline import RestartBudget

__all__ = ["Run", "Part", "Recorder", "CHECKPOINT_FORMAT", "SLICE_TICKS"]

#: the most ticks `Run.advance` lets the world run before every part may act again
SLICE_TICKS = 50

#: the checkpoint format a run writes and reads (unchanged since the first training runs)
CHECKPOINT_FORMAT: Final = "nonstop.train/1"


# ----------------------------------------------------------------------------- what a part offers
# What every part of a run offers the run: a start, a stop, its state, and a few hooks.
#
# A run (`nonstop.experiment.run.Run`) holds a list of parts and calls the same methods on each,
# in order, so nothing in it depends on which parts they are: a seat's inference pool, the learners,
# a self-play snapshot pool, a cluster connection. A part overrides what concerns it; the defaults
# do nothing.
#
# Order of calls: ``start`` (in list order, after the world started), then between slices of world
# time ``before_slice`` and ``ticks_to_next``, and at the end ``stop`` (quiesce, reverse order) and
# ``close`` (release, reverse order). ``state_dict`` / ``load_state_dict`` carry what a checkpoint keeps;
# ``deaths`` lists what died on the way, for ``summary.json``.


class Part:
    """A part of a run. Subclasses set ``name`` and override what they need."""

    name: str = "part"
    #: a `PartFailed` once the part died more often than its restart budget allows, else None
    failure: BaseException | None = None

    def start(self, run: Run) -> None:
        """Start threads, processes or actors; the world is already ticking."""

    def stop(self) -> None:
        """Stop acting or learning (idempotent), so a checkpoint is exact."""

    def close(self) -> None:
        """Release what the part holds (processes, shared memory, connections); idempotent."""

    def before_slice(self, run: Run) -> None:
        """Called between slices of world time (e.g. take a snapshot, anneal ε)."""

    def ticks_to_next(self, env_ticks: int) -> int | None:
        """Ticks until the part needs `before_slice` again (None: no deadline of its own)."""
        return None

    def state_dict(self, *, include_replay: bool) -> dict[str, Any]:
        """What a checkpoint keeps of this part (tensors, arrays and plain values)."""
        return {}

    def load_state_dict(self, snap: dict[str, Any]) -> None:
        """Take this part's state back from a whole checkpoint (before `start`)."""

    def records(self, episodes: list[dict[str, Any]], run: Run) -> dict[str, list[dict[str, Any]]]:
        """Rows the part derives from newly finished episodes, by kind (``{"matches": [...]}``)."""
        return {}

    def summary(self, run: Run, tick_log: Any) -> dict[str, Any]:
        """The part's figures for ``summary.json``."""
        return {}

    def processes(self) -> int:
        """Processes of this machine the part keeps busy (for the machine-limit diagnosis)."""
        return 0

    def deaths(self) -> list[Death]:
        """Every death of the part's workers or learners in this run (each said on stderr as it happened)."""
        return []

    def notes(self, run: Run) -> list[str]:
        """What the measurements say of this part in this run, for the user before it starts."""
        return []


class Recorder:
    """What records a run as it goes (a run directory, a tracker): hooks `Run.execute` calls in order.

    ``open`` (before the run is built; may return the directory the tick log streams to), ``restore``
    (built, not started: take back a checkpoint), ``started``, ``slice`` (after each slice of world
    time), ``failing`` (the run is ending early: say why), ``stopped`` (quiesced: the last rows, a
    final checkpoint), ``finish`` (torn down: the summary; must not raise)."""

    def open(self, run: Run) -> Any:
        return None

    def restore(self, run: Run) -> None:
        """Take back what a resumed run had (before it starts)."""

    def started(self, run: Run) -> None:
        """Every part has started."""

    def slice(self, run: Run, done: float) -> None:
        """``done`` world seconds of this segment have run."""

    def failing(self, run: Run, end: Any) -> None:
        """The run stops before its end (``end``: a `RunEnd` that says why)."""

    def stopped(self, run: Run) -> None:
        """Inference and learning are stopped; the world's state is whole."""

    def finish(self, run: Run, end: Any) -> None:
        """Every part is released; say how the run ended. Never raises."""


class Run:
    """The parts of one run, built, started, saved, restored and torn down together."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.seating = lookup("seating", cfg.seating)(cfg)
        #: the world probed once (tick rate, spaces, seats) and the learner's settings resolved for it
        self.spec = self.seating.describe()
        #: what learns (`nonstop.learning.algos.Algorithm`: its model, update, actor) and its settings
        self.algorithm: Algorithm = self.spec.algorithm
        self.settings: Any = self.spec.settings
        # saved resolved: a resumed run keeps the family's values it ran with
        cfg.algo_settings = self.settings
        self.latency = self.spec.latency
        self.n_inference: int | str = self.spec.n_inference
        self.cluster: Any = lookup("cluster", cfg.cluster)(self)
        self.learning: Any = None
        self.world: Any = None
        #: every part, in start order (the cluster first; torn down in reverse)
        self.parts: list[Part] = [self.cluster]
        self.final_updates = 0
        self.final_episodes = 0  # episodes_total when torn down (earlier segments included)
        self.tick_offset = 0  # env ticks of earlier segments of this run (after a resume)
        self.episode_offset = 0
        #: world seconds the run was advanced, earlier segments included (start-up and stopping ticks apart)
        self.seconds_run = 0.0
        self._closed = False

    # ------------------------------------------------------------------ what the run is made of
    @property
    def tau_m(self) -> float:
        return self.spec.tau_m

    @property
    def tick_hz(self) -> float:
        return self.spec.tick_hz

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self.spec.obs_shape

    @property
    def obs_space(self) -> Any:
        return self.spec.obs_space

    @property
    def action_space(self) -> Any:
        return self.spec.action_space

    @property
    def seats(self) -> list[str] | None:
        return self.spec.seats

    @property
    def replay(self) -> Any:
        return self.learning.replay

    @property
    def state(self) -> Any:
        return None if self.learning is None else self.learning.state

    @property
    def weights(self) -> Any:
        return self.learning.weights

    @property
    def recorder(self) -> Any:
        return self.learning.recorder

    @property
    def replay_restored(self) -> bool:
        return bool(self.learning.replay_restored)

    def part(self, name: str) -> Any:
        """The part called ``name`` (None if the run has none)."""
        return next((p for p in self.parts if p.name == name), None)

    @property
    def pool(self) -> Any:
        """The learner's inference pool (staggered runs), else None."""
        part = self.part("pool")
        return None if part is None else part.pool

    @property
    def learners(self) -> Any:
        """The learners (staggered runs), else None."""
        part = self.part("learners")
        return None if part is None else part.learners

    def restart_budget(self) -> RestartBudget:
        """A fresh restart budget for one part (each part counts its own deaths)."""
        return RestartBudget(self.cfg.max_restarts, self.cfg.restart_window)

    # ------------------------------------------------------------------ building
    def connect(self) -> None:
        """Check what the config cannot (Ray installed, the cluster answers and has room) before
        anything is built or written; idempotent. A run on this machine alone: nothing to do."""
        self.cluster.connect()

    def build(self, log_dir: Any = None) -> "Run":
        """Create the shared memory, the model and the world; ``log_dir``: stream the tick log there."""
        self.learning = lookup("learning", self.cfg.learning)(self)
        self.parts.append(self.learning)
        self.world = self.seating.world(self, log_dir)
        self.parts += self.seating.parts(self)
        return self

    def start(self) -> "Run":
        """Start every part in order; a part that fails to start is torn down with the rest by `teardown`."""
        self.connect()
        for part in self.parts:
            part.start(self)
        return self

    # ------------------------------------------------------------------ running
    def advance(self, seconds: float) -> None:
        """Let the world run ``seconds`` more, in slices between which every part may act. Raises
        `PartFailed` once a part has died more often than its restart budget allows."""
        end = self.world.now() + seconds
        step = min(seconds, SLICE_TICKS * self.tau_m)
        self.seconds_run += seconds
        while self.world.now() < end - 1e-12:
            until = min(end, self.world.now() + step)
            for part in self.parts:
                part.before_slice(self)
                gap = part.ticks_to_next(self.env_ticks)
                if gap is not None:  # stop there, so the part's own interval is kept
                    until = min(until, self.world.now() + max(1, gap) * self.tau_m)
            self.world.run_until(until)
            self.check_parts()
        for part in self.parts:
            part.before_slice(self)

    def run_for(
        self, seconds: float, *, every: float, on_slice: Callable[[float], None], episodes: int | None = None
    ) -> float:
        """The one training loop: advance by ``seconds`` world seconds in slices of ``every`` (the last
        one shorter), calling ``on_slice(done)`` after each; stop early once the run has ``episodes``
        finished episodes in all (earlier segments included). Returns the world seconds run."""
        done = 0.0
        while done < seconds - 1e-9 and not (episodes is not None and self.episodes_total >= episodes):
            chunk = min(every, seconds - done)
            self.advance(chunk)
            done += chunk
            on_slice(done)
        return done

    def execute(
        self, recorders: Sequence[Recorder], *, seconds: float, every: float, episodes: int | None = None
    ) -> RunEnd:
        """Run to ``seconds`` world seconds in all (earlier segments included), recorded by ``recorders``,
        and end it the one way every end takes — Ctrl-C, SIGTERM, a part that kept dying, a dead world
        or the last tick: quiesce, the recorders' last rows and checkpoint (Ctrl-C again skips it),
        teardown (signals held until it is done), the recorders' summary. Returns how it ended. A
        cluster that refuses the run raises before any recorder opened, so nothing is written."""
        end = RunEnd()
        self.connect()
        try:
            opened = [r.open(self) for r in recorders]
        except BaseException:
            self.teardown()  # the cluster connection, if any
            raise
        try:
            self.build(log_dir=next((d for d in opened if d is not None), None))
            for r in recorders:
                r.restore(self)
            self.start()
            for r in recorders:
                r.started(self)

            def on_slice(done: float) -> None:
                for r in recorders:
                    r.slice(self, done)

            self.run_for(seconds - self.seconds_run, every=every, on_slice=on_slice, episodes=episodes)
        except BaseException as exc:  # every end reaches the same path
            end.failed(exc)
            for r in recorders:
                r.failing(self, end)
        with end.second_signal_skips():
            if end.world_alive(self) and self.state is not None:
                self.quiesce()
                for r in recorders:
                    r.stopped(self)
        with end.signals_held():  # nothing may stop the teardown: reap and unlink everything, then say what happened
            try:
                self.teardown()
            except Exception as exc:  # the run's own end is the news; the teardown's is a note
                end.note(f"teardown: {type(exc).__name__}: {exc}")
            for r in recorders:
                r.finish(self, end)
        return end

    def check_parts(self) -> None:
        """Raise the `PartFailed` of a part that kept dying (the newest part first: learners before workers)."""
        for part in reversed(self.parts):
            if part.failure is not None:
                raise part.failure

    @property
    def updates(self) -> int:
        return int(self.state.updates)

    @property
    def episodes_total(self) -> int:
        """Episodes finished in this run, earlier segments of a resumed run included."""
        return self.episode_offset + int(self.replay.episodes_finished)

    @property
    def env_ticks(self) -> int:
        return self.tick_offset + int(self.world.slot.read().tick)

    def records(self, episodes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """What the parts derive from newly finished episodes (self-play: a match row each)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for part in self.parts:
            for kind, rows in part.records(episodes, self).items():
                out.setdefault(kind, []).extend(rows)
        return out

    def summary(self, tick_log: Any) -> dict[str, Any]:
        """The parts' figures for ``summary.json``."""
        out: dict[str, Any] = {}
        for part in self.parts:
            out.update(part.summary(self, tick_log))
        return out

    def deaths(self) -> list[dict[str, Any]]:
        """Every death of a part's worker or learner in this segment, in the order they happened (each was
        said on stderr when its supervisor saw it), as ``summary.json`` lists them."""
        found = [death for part in self.parts for death in part.deaths()]
        return [death.as_dict() for death in sorted(found, key=lambda d: d.time)]

    def processes(self) -> int:
        """Processes of this machine the parts keep busy."""
        return sum(part.processes() for part in self.parts)

    def quiesce(self) -> None:
        """Stop inference and learning (the world keeps its state) so a snapshot is exact."""
        for part in reversed(self.parts):
            part.stop()

    # ------------------------------------------------------------------ saving and resuming
    def snapshot(self, *, include_replay: bool = True) -> dict[str, Any]:
        """Everything `restore` needs to continue: each part's state, the config and the run's
        counters. Tensors and plain values only."""
        snap: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "config": self.cfg.to_dict(),
            "env_ticks": self.env_ticks,
            "episodes": self.episodes_total,
            "seconds_run": self.seconds_run,
        }
        for part in self.parts:
            snap.update(part.state_dict(include_replay=include_replay))
        return snap

    def restore(self, snap: dict[str, Any]) -> None:
        """Load a `snapshot` into a built (not yet started) run, part by part."""
        if snap.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"not a nonstop training checkpoint (format {snap.get('format')!r})")
        for part in self.parts:
            part.load_state_dict(snap)
        self.tick_offset = int(snap["env_ticks"])
        self.episode_offset = int(snap["episodes"])
        self.seconds_run = self.seconds_in(snap, self.tau_m)

    @staticmethod
    def seconds_in(snap: dict[str, Any], tau_m: float) -> float:
        """The world seconds a checkpoint's run had been advanced (a checkpoint older than that count:
        its ticks, start-up included)."""
        return float(snap.get("seconds_run", int(snap["env_ticks"]) * tau_m))

    def teardown(self) -> None:
        """Stop and release every part, newest first, then the world; nothing is left behind even if
        one part fails to close (the first error is raised after the rest are released). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.state is not None and not self.state.closed:
            self.final_updates = int(self.state.updates)
        if self.learning is not None:
            self.final_episodes = self.episodes_total
        closers = [part.close for part in self.parts]
        if self.world is not None:  # the world stops after what drives it, before the memory it writes
            closers.insert(self.parts.index(self.learning) + 1, self.world.stop)
        errors = []
        while closers:
            try:
                closers.pop()()
            except Exception as exc:  # keep tearing down: nothing may be left behind
                errors.append(exc)
        if errors:
            raise errors[0]
