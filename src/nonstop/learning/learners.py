"""N_L asynchronous learners (docs/design.md §3).

Every learner loops::

    θ_v   <- newest published weights (a complete version v)      # SharedWeights
    batch <- replay.sample(B)
    g     <- ∇ the algorithm's loss at θ_v                         # takes τ_L (`Algorithm.backward`)
    apply g to the master parameters, the target rule,             # how: the mode
    then publish θ_{v'}

Learners know no algorithm: an `nonstop.learning.algos.Algorithm` builds their networks and writes
the gradient; how the gradient is applied (Adam, the target rule, a block held back) is its data
(`Algorithm.update_rule`, applied by `nonstop.learning.optim`).

Modes:

* ``round_robin`` — Langford, Smola & Zinkevich, *Slow learners are fast*:
  learners apply their gradients in a fixed cyclic order 0, 1, …, N_L−1, 0, …
  (a shared ``turn`` counter). Gradient computation overlaps; updates never
  overwrite each other and each gradient is at most N_L − 1 versions stale.
* ``hogwild`` — Recht et al.: each learner applies as soon as it is done, with
  no ordering and no lock on the master parameters (the update count is an
  atomic fetch-add, so it loses nothing).
* ``parallel`` — a synchronous large batch: all N_L learners compute on the
  same version, learner 0 averages the N_L gradients and applies one update.

`VirtualLearners` runs them as timed processes on the virtual clock (an update
*takes* its declared ``tau_l``); `LearnerProcesses` runs them as processes on
the wall clock (real τ_L), with a supervisor that restarts a dead learner from
the shared weights and keeps the turn moving past it. `nonstop.distributed.ray_learners`
runs the same modes with the learners as Ray actors on any node. All of them apply Adam on the host's
shared master parameters; `nonstop.learning.devicelearner` is one learner that keeps θ, the moments and
the target on its device instead (``--learner-backend device``).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np

from nonstop.learning.algos import AlgoConfig, algorithm_of
from nonstop.learning.optim import UpdateRule, apply_gradient, flat_gradient
from nonstop.learning.replay import ReplayBuffer
from nonstop.learning.weights import _HDR, SharedWeights, TrainingState, _Segment, load_flat
from nonstop.realtime.clock import WallClock
from nonstop.realtime.deaths import Death, exit_cause, in_this_process, tell
from nonstop.realtime.lifeline import PartFailed, RestartBudget, hold_lifeline, reap

__all__ = ["LEARNER_MODES", "LearnerSettings", "Segments", "Learner", "VirtualLearners", "LearnerProcesses"]

LEARNER_MODES: Final = ("round_robin", "hogwild", "parallel")
DEAD: Final = -1  # a parallel-mode gradient slot whose learner died and will not come back
#: the longest a wall-clock learner sleeps waiting (for transitions, its turn, a round, another learner's
#: gradient) before it looks again: the event it waits for wakes it at once (a futex on the word that
#: changes), and so does a stop; this bounds a missed wake-up
IDLE_WAIT: Final = 0.05
#: the longest a learner waits for a target copy being written to end before it learns on with the target
#: it has (a writer killed mid-copy leaves the copy unfinished until the next writer)
TARGET_WAIT: Final = 0.01


def check_mode(mode: str, n_learners: int) -> None:
    if mode not in LEARNER_MODES:
        raise ValueError(f"unknown learner mode {mode!r}; choose one of {', '.join(LEARNER_MODES)}")
    if not isinstance(n_learners, int) or isinstance(n_learners, bool) or n_learners < 1:
        raise ValueError(f"n_learners must be an integer >= 1, got {n_learners!r}")


@dataclass(frozen=True)
class LearnerSettings:
    """What every learner of a run is built from, built once by the run and checked here.

    ``obs_shape`` and ``action_space`` are the world's (an int ``n``: ``Discrete(n)``); ``cfg`` is the
    algorithm's config (or the `nonstop.learning.algos.Algorithm` itself), which names the algorithm.
    ``seed`` is the run's (each learner derives its own stream from it); ``tau_l`` is the time an update
    takes on the virtual clock (``None``: τ_M); ``num_cpus`` is what each Ray learner actor reserves.

    >>> LearnerSettings((4,), 2, None, n_learners=2).mode
    'round_robin'
    >>> LearnerSettings((4,), 2, None, torch_threads=0)
    Traceback (most recent call last):
    ...
    ValueError: LearnerSettings.torch_threads must be an integer >= 1, got 0
    """

    obs_shape: tuple[int, ...]
    action_space: Any
    cfg: AlgoConfig
    n_learners: int = 1
    mode: str = "round_robin"
    seed: int | None = None
    device: str = "cpu"
    torch_threads: int = 1
    tau_l: float | None = None
    num_cpus: float = 1.0

    def __post_init__(self) -> None:
        check_mode(self.mode, self.n_learners)
        shape = tuple(self.obs_shape)
        if not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
            raise ValueError(f"LearnerSettings.obs_shape must be positive integers, got {self.obs_shape!r}")
        object.__setattr__(self, "obs_shape", tuple(int(d) for d in shape))
        if not isinstance(self.torch_threads, int) or isinstance(self.torch_threads, bool) or self.torch_threads < 1:
            raise ValueError(f"LearnerSettings.torch_threads must be an integer >= 1, got {self.torch_threads!r}")
        if self.tau_l is not None and not (self.tau_l >= 0 and np.isfinite(self.tau_l)):
            raise ValueError(f"LearnerSettings.tau_l must be a finite number of seconds >= 0, got {self.tau_l!r}")
        if not (self.num_cpus >= 0):
            raise ValueError(f"LearnerSettings.num_cpus must be >= 0, got {self.num_cpus!r}")
        if self.seed is not None and (not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool)):
            raise ValueError(f"LearnerSettings.seed must be an integer or None, got {self.seed!r}")


class Segments(NamedTuple):
    """The shared segments learners read and write: the training state, the master weights, the replay."""

    state: TrainingState
    weights: SharedWeights
    replay: ReplayBuffer


def ready_to_learn(replay: ReplayBuffer, cfg: AlgoConfig) -> bool:
    """Whether the replay holds enough transitions (``learning_starts``, at least 2) to learn from."""
    return replay.transitions_written >= max(cfg.learning_starts, 2)


def updates_ahead(state: TrainingState, replay: ReplayBuffer, cfg: AlgoConfig, in_flight: int = 0) -> bool:
    """More updates (applied, plus ``in_flight`` gradients that will be) than ``updates_per_transition``
    allows for the transitions so far: learners then pause (on the wall clock leaving the cores to the
    world and to inference; on the virtual clock keeping the updates-per-transition ratio exact)."""
    ratio = cfg.updates_per_transition
    fresh = replay.transitions_written - cfg.learning_starts
    done = state.updates - state.update_base + in_flight
    return ratio > 0 and done >= ratio * max(fresh, 0) + 1


class GradientSlots(_Segment):
    """Per-learner gradient vectors for the ``parallel`` mode (N_L × n_params), one header word a
    learner: the round whose gradient its slot holds (counted from 1), or `DEAD`.

    It owns that layout: learners `hand_in` their gradient for a round, learner 0 waits while
    `missing` and averages the ones `handed_in`; the supervisor marks a learner that will not
    come back `mark_dead`. A hand-in is a release store after the copy, and the reads are acquire
    loads before the average, so the average never mixes in a half-written gradient.

    >>> g = GradientSlots.create(2 * 3)
    >>> g.hand_in(0, 0, np.ones(3, np.float32)); g.missing(0, 2), g.handed_in(0, 2)
    (True, [0])
    >>> g.mark_dead(1); g.missing(0, 2), g.average([0], 3).tolist()
    (False, [1.0, 1.0, 1.0])
    >>> g.unlink()
    """

    _kind = "grads"
    _vectors = ("flat",)
    flat: np.ndarray  # learner i's gradient at [i * n_params, (i + 1) * n_params)
    #: one header word a learner: the parallel mode's largest N_L
    MAX_LEARNERS: Final = _HDR

    def slot(self, i: int, n_params: int) -> np.ndarray:
        return self.flat[i * n_params : (i + 1) * n_params]

    def hand_in(self, learner: int, round_: int, grad: np.ndarray) -> None:
        """Learner ``learner``'s gradient for round ``round_`` (rounds finished before it): copied
        into its slot, then marked in place (a release store) and learner 0 woken if it waits for it."""
        self.slot(learner, grad.size)[:] = grad
        self._hdr.store(learner, round_ + 1)
        self._wake_word(learner)

    def missing(self, round_: int, n_learners: int) -> bool:
        """Whether a live learner has not yet handed in its gradient for round ``round_``."""
        return any(self._hdr.load(i) not in (round_ + 1, DEAD) for i in range(n_learners))

    def wait_for_hand_in(self, round_: int, n_learners: int, timeout: float) -> None:
        """Sleep until the first live learner still missing from round ``round_`` hands in or is marked dead
        (its word changes, and its writer wakes this one), or ``timeout`` seconds; at once if none is
        missing. It may return early: callers re-check `missing`."""
        for i in range(n_learners):
            word = self._hdr.load(i)
            if word not in (round_ + 1, DEAD):
                self._wait_word(i, word, timeout)
                return

    def wake_waiters(self) -> None:
        """Wake a learner waiting in `wait_for_hand_in` (stopping: it re-checks and sees the stop)."""
        for i in range(self.MAX_LEARNERS):
            self._wake_word(i)

    def handed_in(self, round_: int, n_learners: int) -> list[int]:
        """The learners whose gradient for round ``round_`` is in place."""
        return [i for i in range(n_learners) if self._hdr.load(i) == round_ + 1]

    def average(self, learners: list[int], n_params: int) -> np.ndarray:
        """The mean of those learners' gradients (a new vector)."""
        return self.flat.reshape(-1, n_params)[learners].mean(0)

    def mark_dead(self, learner: int) -> None:
        """Learner ``learner`` will not come back: rounds stop waiting for it."""
        self._hdr.store(learner, DEAD)
        self._wake_word(learner)


class Learner:
    """One learner's own networks and random stream (lives in the learner's process).

    ``settings``: the run's (`LearnerSettings`: the world's shapes, the algorithm, the device);
    ``segments``: the shared ones it learns from and publishes to; ``seed``: its own sampling stream's."""

    def __init__(self, index: int, settings: LearnerSettings, segments: Segments, seed: int | None = None) -> None:
        from nonstop.inference.device import resolve_device
        from nonstop.policies.placement import enter_device

        self.algo = algorithm_of(settings.cfg, settings.obs_shape, settings.action_space)
        self.index, self.cfg = index, self.algo.cfg
        #: how this learner's gradients are applied (`nonstop.learning.optim.UpdateRule`)
        self.rule = self.algo.update_rule()
        self.state, self.weights, self.replay = segments
        #: where the update runs: its online and target networks live there, batches go there from host replay
        self.device = resolve_device(settings.device)
        enter_device(self.device)  # cuda:N: this learner's process (or thread) makes its CUDA calls on N
        self.online = self.algo.build_model().to(self.device).train()
        self.target = self.algo.build_model().to(self.device).eval()
        self._flat = np.empty(self.weights.n_params, np.float32)
        self._target_version = -1
        self.rng = np.random.default_rng(seed)
        self.version = 0
        self.gradients = 0

    @property
    def ready(self) -> bool:
        return ready_to_learn(self.replay, self.cfg)

    @property
    def ahead(self) -> bool:
        return updates_ahead(self.state, self.replay, self.cfg)

    def gradient(self) -> tuple[np.ndarray, float] | None:
        """The gradient of one fresh batch at the newest complete weights (``None``: no batch yet)."""
        batch = self.algo.sample(self.replay, self.cfg.batch_size, self.rng)
        if batch is None:
            return None
        if self.weights.version != self.version or self.gradients == 0:  # to the device once per version
            self.version = self.weights.read_into(self._flat)
            load_flat(self.online, self._flat)
        self._sync_target()
        self.gradients += 1
        loss = self.algo.backward(self.online, self.target, batch)
        return flat_gradient(self.online), float(loss)

    def _sync_target(self) -> None:
        """Load the newest complete target network. A copy being written is waited for (its writer's end
        wakes this learner), at most `TARGET_WAIT` in all; then the learner goes on with the target it has."""
        give_up = time.monotonic() + TARGET_WAIT
        while self.state.target_version != self._target_version:
            v = self.state.read_target_into(self._flat)  # a seqlock read: None if a sync overlapped it
            if v is not None:
                load_flat(self.target, self._flat)
                self._target_version = v
                return
            left = give_up - time.monotonic()
            if left <= 0:
                return
            self.state.wait_for_target(left)


def apply(state: TrainingState, weights: SharedWeights, grad: np.ndarray, loss: float, rule: Any) -> int:
    """Record ``loss`` and apply ``grad`` by ``rule`` (an `UpdateRule`, or an algorithm's config)."""
    state.loss = loss
    return apply_gradient(state, weights, grad, UpdateRule.of(rule))


# ----------------------------------------------------------------------------- virtual clock


class VirtualLearners:
    """N_L learners as timed processes on a `VirtualClock`: each update takes
    ``tau_l`` seconds of virtual time (0: as fast as the env ticks, one update per
    learner per tick). Learner i starts ``i·tau_l/N_L`` late, so updates interleave.
    ``settings`` gives N_L, the mode, the algorithm and ``tau_l`` (``None``: τ_M)."""

    def __init__(
        self,
        clock: Any,
        tau_m: float,
        settings: LearnerSettings,
        *,
        learners: list[Learner],
        segments: Segments,
        restart_budget: RestartBudget | None = None,
        say: Callable[[str], None] = tell,
    ) -> None:
        n_learners, tau_l = settings.n_learners, settings.tau_l if settings.tau_l is not None else tau_m
        self.clock, self.tau_m, self.n, self.mode = clock, tau_m, n_learners, settings.mode
        self.period = tau_l if tau_l > 0 else tau_m
        self.learners, self.state, self.weights, self.cfg = learners, segments.state, segments.weights, settings.cfg
        self.losses: list[float] = []
        self.applied_by: list[int] = []  # which learner applied each update, in order
        self._stop = False
        #: a learner that dies (its update raised) is restarted on the shared weights while this allows
        self.budget = restart_budget if restart_budget is not None else RestartBudget()
        self.restarts = [0] * n_learners
        self.events: list[tuple[float, int, str]] = []
        #: set when a learner kept dying past the budget: the run must end (`PartFailed`)
        self.failure: PartFailed | None = None
        #: every learner death, each said at once on stderr (``say``)
        self.deaths: list[Death] = []
        self._say = say
        self._handles: list[Any] = []
        self._killed: set[int] = set()

    def start(self) -> "VirtualLearners":
        if self.mode == "parallel":
            self._handles = [self._spawn(0, first=True)]
        else:
            self._handles = [self._spawn(learner.index, first=True) for learner in self.learners]
        self.clock.spawn(self._supervise(), name="learner-supervisor", priority=3)
        return self

    def _spawn(self, i: int, *, first: bool) -> Any:
        # isolated: a learner's error is its death (restarted below), not the end of the world
        if self.mode == "parallel":
            return self.clock.spawn(self._parallel(), name="learners", priority=3, isolate=True)
        return self.clock.spawn(
            self._loop(self.learners[i], first=first), name=f"learner-{i}", priority=3, isolate=True
        )

    def _supervise(self) -> Iterator[float]:
        while not self._stop and self.failure is None:
            yield self.clock.now() + self.tau_m
            for i, handle in enumerate(self._handles):
                if handle is None or handle.alive or self._stop:
                    continue
                why = "".join(traceback.format_exception_only(handle.error)).strip() if handle.error else "exited"
                now = self.clock.now()
                self.events.append((now, i, f"died ({why})"))
                why_not = ""
                if self.budget.spend(now):
                    self.restarts[i] += 1
                    self._killed.discard(i)
                    self._handles[i] = self._spawn(i, first=False)
                    self.events.append((now, i, "restarted"))
                else:
                    self._handles[i] = None
                    spent = f"{sum(self.restarts) + 1} deaths, more than {self.budget.describe()}"
                    self.failure = PartFailed(f"learner {i} kept dying: {spent} (last: {why})")
                    why_not = f"{spent}: the run stops"
                    self.events.append((now, i, "gave up"))
                death = Death.under(self.budget, f"learner {i}", in_this_process(), why, why_not=why_not, now=now)
                self.deaths.append(death)
                self._say(death.line())

    def kill(self, i: int) -> None:
        """Kill learner ``i`` as a crash would (tests and drills): it dies at its next wake-up."""
        if not 0 <= i < len(self._handles):
            raise ValueError(f"no learner {i}; learners are 0..{len(self._handles) - 1}")
        self._killed.add(i)

    def _check_killed(self, i: int) -> None:
        if i in self._killed:
            raise RuntimeError(f"learner {i} killed")

    def report(self) -> dict[str, Any]:
        return {
            "n_learners": self.n,
            "mode": self.mode,
            "restarts": list(self.restarts),
            "events": [(round(t, 6), i, what) for t, i, what in self.events],
        }

    def stop(self) -> None:
        self._stop = True

    def _loop(self, learner: Learner, first: bool = True) -> Iterator[float]:
        t = self.clock.now() + (learner.index * self.period / self.n if first else 0.0)
        yield t
        while not self._stop:
            self._check_killed(learner.index)
            # the cap counts transitions on this clock too: an update every 4 transitions is the
            # paper's Atari cadence however long each transition (a sequential agent's action) takes
            out = learner.gradient() if learner.ready and not learner.ahead else None
            t += self.period
            yield t
            if out is None:
                continue
            if self.mode == "round_robin":
                while self.state.turn % self.n != learner.index:
                    t += self.tau_m / 8  # not our turn yet: the update waits, the gradient ages
                    yield t
            self.losses.append(out[1])
            self.applied_by.append(learner.index)
            apply(self.state, self.weights, out[0], out[1], learner.rule)
            self.state.advance_turn()

    def _parallel(self) -> Iterator[float]:
        t = self.clock.now()
        while not self._stop:
            self._check_killed(0)
            outs = [
                o
                for o in (learner.gradient() for learner in self.learners if learner.ready and not learner.ahead)
                if o is not None
            ]
            t += self.period
            yield t
            if outs:
                grad = np.mean([g for g, _ in outs], axis=0).astype(np.float32)
                loss = float(np.mean([part for _, part in outs]))
                self.losses.append(loss)
                apply(self.state, self.weights, grad, loss, self.learners[0].rule)


# ----------------------------------------------------------------------------- wall clock


def _learner_main(
    index: int, settings: LearnerSettings, segments: Segments, grads: GradientSlots | None, seed: int | None
) -> None:
    hold_lifeline()  # a learner never outlives its trainer (it would pin every shared segment)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer decides when learners stop
    import torch

    torch.set_num_threads(settings.torch_threads)
    n, mode = settings.n_learners, settings.mode
    state, weights, replay = segments
    learner = Learner(index, settings, segments, seed)
    try:
        while not state.stop_requested:
            seen = replay.transitions_written  # before the checks: a transition after them ends the wait
            if not learner.ready or learner.ahead:
                replay.wait_for_transitions(seen, IDLE_WAIT)  # too few transitions, or updates at the cap
                continue
            if mode == "parallel":
                assert grads is not None, "the parallel mode's learners are given gradient slots"
                _parallel_step(learner, index, n, state, weights, grads)
                continue
            out = learner.gradient()
            if out is None:  # no batch to draw (its frames recycled meanwhile): a new transition may bring one
                replay.wait_for_transitions(seen, IDLE_WAIT)
                continue
            if mode == "round_robin":
                while (t := state.turn) % n != index and not state.stop_requested:
                    state.wait_turn(t, IDLE_WAIT)  # whoever passes the turn on wakes this learner
                if state.stop_requested:
                    break
                apply(state, weights, out[0], out[1], learner.rule)
                state.pass_turn(t)  # a release: the next learner sees this update
            else:  # hogwild: no order, no lock on the master; the publish takes the weights' own lock
                apply(state, weights, out[0], out[1], learner.rule)
    finally:
        for seg in (state, weights, replay, grads):
            if seg is not None:
                seg.close()
    # asked to stop, segments closed: leave now. A spawned child's ordinary exit frees every module,
    # torch's included (0.5 s and more), and the trainer reaps its learners before its final checkpoint
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)


def _parallel_step(
    learner: Learner,
    index: int,
    n: int,
    state: TrainingState,
    weights: SharedWeights,
    grads: GradientSlots,
) -> None:
    """All learners compute at the same version; learner 0 averages and applies."""
    round_ = state.turn  # counts finished rounds
    seen = learner.replay.transitions_written
    out = learner.gradient()
    if out is None:  # no batch to draw: a new transition may bring one
        learner.replay.wait_for_transitions(seen, IDLE_WAIT)
        return
    grads.hand_in(index, round_, out[0])
    if index == 0:
        # wait for every learner still alive (the supervisor marks a dead one DEAD); a hand-in wakes it
        while not state.stop_requested and grads.missing(round_, n):
            grads.wait_for_hand_in(round_, n, IDLE_WAIT)
        if state.stop_requested:
            return  # never apply an average that mixes rounds
        grad = grads.average(grads.handed_in(round_, n), weights.n_params)
        apply(state, weights, grad, out[1], learner.rule)
        state.finish_round(round_)
    else:
        while not state.stop_requested and state.turn == round_:
            state.wait_turn(round_, IDLE_WAIT)  # learner 0's `finish_round` wakes this one


class LearnerProcesses:
    """N_L learner processes on the wall clock, supervised.

    A learner that dies is restarted (it reloads the shared weights; nothing it
    held is needed); in ``round_robin`` mode a dead learner's turn is skipped so
    the others never wait on it.
    """

    def __init__(
        self,
        settings: LearnerSettings,
        segments: Segments,
        *,
        restart: bool = True,
        restart_budget: RestartBudget | None = None,
        clock: Any = None,
        say: Callable[[str], None] = tell,
    ) -> None:
        n_learners, mode = settings.n_learners, settings.mode
        self.settings, self.segments = settings, segments
        self.device = settings.device  # each learner process's device (cpu, cuda, cuda:N, auto)
        if mode == "parallel" and n_learners > GradientSlots.MAX_LEARNERS:
            raise ValueError(f"parallel mode supports at most {GradientSlots.MAX_LEARNERS} learners, got {n_learners}")
        self.n, self.mode = n_learners, mode
        self.obs_shape, self.n_actions, self.cfg = settings.obs_shape, settings.action_space, settings.cfg
        self.state, self.weights, self.replay = segments
        self.seed, self.torch_threads, self.restart = settings.seed, settings.torch_threads, restart
        self.grads = GradientSlots.create(n_learners * self.weights.n_params) if mode == "parallel" else None
        self._ctx = mp.get_context("spawn")
        self.processes: list[Any] = [None] * n_learners
        self.restarts = [0] * n_learners
        self.events: list[tuple[float, int, str]] = []
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        #: restarts allowed (within a window of ``clock`` time); past it the run must end (`failure`)
        self.budget = restart_budget if restart_budget is not None else RestartBudget()
        self._clock = clock if clock is not None else WallClock(spin=0.0)
        self.failure: PartFailed | None = None
        #: every learner death, each said at once on stderr (``say``) as the supervisor saw it
        self.deaths: list[Death] = []
        self._say = say

    @property
    def local_processes(self) -> int:
        """Processes of this machine the learners keep busy (the machine-limit diagnosis counts them)."""
        return self.n

    def _spawn(self, i: int) -> None:
        seed = None if self.seed is None else self.seed * 1000 + i + 7919 * self.restarts[i]
        target = functools.partial(_learner_main, i, self.settings, self.segments, self.grads, seed)
        p = self._ctx.Process(target=target, name=f"nonstop-learner-{i}", daemon=True)
        p.start()
        self.processes[i] = p

    def start(self) -> "LearnerProcesses":
        for i in range(self.n):
            self._spawn(i)
        self._monitor = threading.Thread(target=self._supervise, name="nonstop-learner-supervisor", daemon=True)
        self._monitor.start()
        return self

    def _supervise(self) -> None:
        while not self._stop.wait(0.05):
            for i, p in enumerate(self.processes):
                if self._stop.is_set():
                    return
                if p is None:  # dead for good: its round-robin turns are skipped from now on
                    if self.mode == "round_robin" and (t := self.state.turn) % self.n == i:
                        self.state.pass_turn(t)
                    continue
                if p.is_alive():
                    continue
                self.events.append((time.monotonic(), i, f"died (exit code {p.exitcode})"))
                p.join()
                cause, now = exit_cause(p.exitcode), self._clock.now()
                if self.mode == "round_robin" and (t := self.state.turn) % self.n == i:
                    self.state.pass_turn(t)  # skip its turn
                why_not = ""
                if self.restart and self.budget.spend(now):
                    self.restarts[i] += 1
                    self._spawn(i)
                    self.events.append((time.monotonic(), i, "restarted"))
                else:
                    self.processes[i] = None
                    if self.grads is not None:
                        self.grads.mark_dead(i)
                    why_not = "restarts are off"
                    if self.restart:  # restarts are on, but spent: the run must end
                        deaths = sum(self.restarts) + 1
                        spent = f"{deaths} deaths, more than {self.budget.describe()}"
                        why_not = f"{spent}: the run stops"
                        if self.failure is None:
                            self.failure = PartFailed(f"learner {i} kept dying: {spent} (last: {cause})")
                            self.events.append((time.monotonic(), i, "gave up"))
                self._tell(
                    Death(
                        f"learner {i}",
                        f"pid {p.pid}",
                        cause,
                        restarted=not why_not,
                        budget_left=self.budget.left(now) if self.restart else None,
                        budget=self.budget.describe(),
                        why_not=why_not,
                        time=now,
                    )
                )

    def _tell(self, death: Death) -> None:
        """Keep ``death`` for the run's summary and say it at once."""
        self.deaths.append(death)
        self._say(death.line())

    def kill(self, i: int) -> None:
        """Kill learner ``i`` as a crash would (tests and drills)."""
        if not 0 <= i < self.n:
            raise ValueError(f"no learner {i}; learners are 0..{self.n - 1}")
        self.processes[i].kill()

    @property
    def loss(self) -> float:
        return self.state.loss

    def stop(self, timeout: float = 2.0) -> None:
        """Ask every learner to stop and reap it: a running learner sees the request within
        milliseconds; one still starting (importing torch) is terminated after ``timeout``."""
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=2)
        self.state.request_stop()  # it wakes the learners waiting for their turn or a round
        self.replay.wake_waiters()  # learners waiting for transitions see the stop now
        if self.grads is not None:
            self.grads.wake_waiters()  # and learner 0 waiting for the others' gradients
        for p in self.processes:
            if p is None:
                continue
            reap(p, timeout=timeout)
        if self.grads is not None:
            self.grads.unlink()

    def report(self) -> dict[str, Any]:
        return {
            "n_learners": self.n,
            "mode": self.mode,
            "restarts": list(self.restarts),
            "events": [(round(t, 3), i, what) for t, i, what in self.events],
        }
