"""Inference staggering schedulers: pure logic, timings in, waits out (DESIGN §2).

Every inference worker runs the same loop (Riemer et al. 2025, Algorithms 1-2)::

    sleep(scheduler.start_delay(i))                  # once: the initial stagger
    while alive:
        sleep(scheduler.take_delay(i))                # delay accumulated by other workers
        obs = read_latest(); a, tau = infer(obs)      # tau: measured inference time
        sleep(scheduler.after_inference(i, tau))      # Alg 1 pads to the max; Alg 2 waits 0
        submit(a)

A scheduler only does arithmetic on the timings it is given: it reads no clock
and never sleeps, so the same object runs under the wall clock, the virtual
clock and the tiny event loop `simulate` below. Its methods may be called from
several worker threads; one lock guards its state.

Workers form a cycle 0, 1, ..., N-1, 0, ... and ``dist(x, y) = (x - y) mod N``
is how far worker ``x`` is behind worker ``y`` (the worker right after ``y``
has distance 1). With N workers and inference time τ, staggering spaces the
actions τ/N apart instead of firing all N at once:

>>> timeline = simulate(make_scheduler("max_time", 4), lambda worker, k: 1.0, 12)
>>> [round(t, 2) for t, _ in timeline]      # first round together, then τ/N apart
[1.0, 1.0, 1.0, 1.0, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75]
>>> [round(t, 2) for t, _ in simulate(make_scheduler("unstaggered", 4), lambda w, k: 1.0, 8)]
[1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import numbers
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from statistics import NormalDist
from typing import Any, ClassVar, NamedTuple

import numpy as np

__all__ = [
    "SCHEDULER_NAMES",
    "Scheduler",
    "SequentialScheduler",
    "UnstaggeredScheduler",
    "MaxTimeScheduler",
    "ExpectedTimeScheduler",
    "QuantileHoldScheduler",
    "AutoScheduler",
    "make_scheduler",
    "Iteration",
    "simulate",
    "simulate_iterations",
]


#: grid gaps `QuantileHoldScheduler` remembers for copies (a bound on memory, far above any hold)
_MAX_GAPS = 1 << 16

# --------------------------------------------------------------------------- validation


def _check_count(what: str, value: Any) -> int:
    """A positive int (bools and floats refused, numpy ints accepted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value!r}")
    return int(value)


def _check_seconds(what: str, value: Any, *, positive: bool = False) -> float:
    """A finite, non-negative (or strictly positive) number of seconds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__} {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0.0 or (positive and seconds == 0.0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{what} must be a finite number of seconds {bound}, got {value!r}")
    return seconds


def _check_time(what: str, value: Any) -> float:
    """A finite time in seconds on the caller's clock (any sign)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a time in seconds, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite time in seconds, got {value!r}")
    return float(value)


def _check_initial_estimate(value: Any) -> float:
    return 0.0 if value is None else _check_seconds("initial_estimate", value)


# --------------------------------------------------------------------------- interface


class Scheduler(ABC):
    """When each of ``n_workers`` inference workers waits (see the module docstring).

    All times are seconds. Every wait a scheduler returns is >= 0. Worker
    indices are ``0 .. n_workers - 1``; anything else raises a TypeError or
    ValueError naming it, as does a NaN, infinite or negative ``tau_theta``.
    """

    name: ClassVar[str]
    #: True when ``after_inference``'s wait holds the *action*, not the worker: the worker loop
    #: hands the action to a timer and starts its next inference at once.
    frees_workers: ClassVar[bool] = False

    def __init__(self, n_workers: int) -> None:
        self._n = _check_count("n_workers", n_workers)
        self._lock = threading.Lock()

    @property
    def n_workers(self) -> int:
        """Number of workers N_I in the cycle."""
        return self._n

    @property
    def pending_delays(self) -> tuple[float, ...]:
        """Snapshot of the delays accumulated for each worker and not yet taken."""
        return (0.0,) * self._n

    @abstractmethod
    def start_delay(self, worker: int) -> float:
        """Wait before ``worker``'s first inference (the initial stagger)."""

    @abstractmethod
    def take_delay(self, worker: int, now: float | None = None) -> float:
        """Delay accumulated for ``worker`` by other workers; resets it to 0.

        Called at the top of each loop (Alg 1/2: ``sleep(delay[processnum]);
        delay[processnum] <- 0``). ``now`` is the worker's time, for schedulers that place
        starts on a grid (`QuantileHoldScheduler`); the paper's algorithms ignore it.
        """

    @abstractmethod
    def after_inference(self, worker: int, tau_theta: float) -> float:
        """``worker`` finished an inference that took ``tau_theta`` seconds.

        Updates the shared state and returns how long ``worker`` waits before
        submitting its action.
        """

    def _check_worker(self, worker: Any) -> int:
        if isinstance(worker, bool) or not isinstance(worker, numbers.Integral):
            raise TypeError(f"worker must be an int, got {type(worker).__name__} {worker!r}")
        index = int(worker)
        if not 0 <= index < self._n:
            raise ValueError(f"worker {worker!r} out of range: valid workers are 0..{self._n - 1}")
        return index

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_workers={self._n})"


# --------------------------------------------------------------------------- no staggering


class _NoWaitScheduler(Scheduler):
    """Never waits: workers act as soon as their inference is done."""

    def start_delay(self, worker: int) -> float:
        self._check_worker(worker)
        return 0.0

    def take_delay(self, worker: int, now: float | None = None) -> float:
        self._check_worker(worker)
        return 0.0

    def after_inference(self, worker: int, tau_theta: float) -> float:
        self._check_worker(worker)
        _check_seconds("tau_theta", tau_theta)
        return 0.0


class SequentialScheduler(_NoWaitScheduler):
    """One worker, no waits: the sequential interaction baseline (τ_I = τ_θ).

    >>> s = make_scheduler("sequential", 1)
    >>> s.start_delay(0), s.take_delay(0), s.after_inference(0, 0.3)
    (0.0, 0.0, 0.0)
    >>> make_scheduler("sequential", 2)
    Traceback (most recent call last):
    ...
    ValueError: the sequential scheduler runs exactly 1 worker, got n_workers=2
    """

    name = "sequential"

    def __init__(self, n_workers: int = 1) -> None:
        super().__init__(n_workers)
        if self._n != 1:
            raise ValueError(f"the sequential scheduler runs exactly 1 worker, got n_workers={self._n}")


class UnstaggeredScheduler(_NoWaitScheduler):
    """N workers, no waits, no offsets: all N act at once, every τ_θ.

    It shows why staggering matters: N workers buy no more than one action per
    τ_θ once the env applies the newest action per tick.

    >>> s = make_scheduler("unstaggered", 3)
    >>> [round(t, 2) for t, _ in simulate(s, lambda worker, k: 0.5, 6)]
    [0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
    """

    name = "unstaggered"


# --------------------------------------------------------------------------- staggering


class _StaggeredScheduler(Scheduler):
    """Shared state of Algorithms 1 and 2: ``delay[num]`` per worker and the initial stagger."""

    def __init__(self, n_workers: int, *, initial_estimate: float | None = None) -> None:
        super().__init__(n_workers)
        self._initial_estimate = _check_initial_estimate(initial_estimate)
        self._delays = [0.0] * self._n
        # Optional initial stagger i·τ̂/N; with no estimate all start together and the
        # algorithm staggers them after the first round.
        self._start_delays = [i * self._initial_estimate / self._n for i in range(self._n)]

    @property
    def pending_delays(self) -> tuple[float, ...]:
        with self._lock:
            return tuple(self._delays)

    def start_delay(self, worker: int) -> float:
        with self._lock:
            return self._start_delays[self._check_worker(worker)]

    def take_delay(self, worker: int, now: float | None = None) -> float:
        with self._lock:
            worker = self._check_worker(worker)
            delay, self._delays[worker] = self._delays[worker], 0.0
            return delay

    def _delay_behind(self, worker: int, delta: float) -> None:
        """delay[num] += dist(num, worker)·δ/N for every num ≠ worker: widen the spacing."""
        n = self._n
        for d in range(1, n):  # num = worker + d, so dist(num, worker) = d
            self._delays[(worker + d) % n] += d * delta / n


class MaxTimeScheduler(_StaggeredScheduler):
    """Algorithm 1, Maximum Time Inference Staggering.

    Every cycle lasts the running maximum τ̂max: a worker whose inference took
    less pads to τ̂max before submitting. When an inference sets a new maximum
    (τ_θ >= τ̂max), δ = τ_θ − τ̂max and every other worker is delayed by
    dist(num, i)·δ/N, which widens the spacing from τ̂max/N to τ_θ/N. Once τ̂max
    stops changing every worker acts every τ̂max, the workers τ̂max/N apart, so
    τ_I <= τ_θmax/N (Appendix B, "Interaction Time of Algorithm 1").

    Caveat, found in simulation: the rule re-spaces exactly only the workers that are
    still inferring when the new max arrives. A worker already padding to the old
    max keeps its shorter cycle, gets only dist·δ/N, and ends up off its ideal phase.
    Nothing pulls it back, so with random latencies the gaps after τ̂max settles can
    be unequal. The pattern is still rigid (N actions every τ̂max, so the average
    τ_I is exactly τ̂max/N), and with constant latency the spacing is exact.

    ``initial_estimate`` seeds τ̂max (paper: 0) and staggers the first inferences
    by i·initial_estimate/N.

    >>> s = make_scheduler("max_time", 4)
    >>> s.after_inference(0, 0.8), s.pending_delays       # new max: others spread out
    (0.0, (0.0, 0.2, 0.4, 0.6000000000000001))
    >>> s.after_inference(1, 0.5), s.tau_max_estimate     # faster: pad to the max
    (0.30000000000000004, 0.8)
    """

    name = "max_time"

    def __init__(self, n_workers: int, *, initial_estimate: float | None = None) -> None:
        super().__init__(n_workers, initial_estimate=initial_estimate)
        self._tau_max = self._initial_estimate

    @property
    def tau_max_estimate(self) -> float:
        """τ̂max: the largest inference time seen (or the initial estimate, if larger)."""
        with self._lock:
            return self._tau_max

    def after_inference(self, worker: int, tau_theta: float) -> float:
        tau = _check_seconds("tau_theta", tau_theta)
        with self._lock:
            worker = self._check_worker(worker)
            if tau >= self._tau_max:  # Alg 1: new global maximum
                self._delay_behind(worker, tau - self._tau_max)
                self._tau_max = tau
                return 0.0
            return self._tau_max - tau  # Alg 1: sleep(τ̂max − τ_θ)

    def __repr__(self) -> str:
        return f"MaxTimeScheduler(n_workers={self._n}, tau_max_estimate={self._tau_max!r})"


class ExpectedTimeScheduler(_StaggeredScheduler):
    """Algorithm 2, Expected Time Inference Staggering (Appendix A).

    Tracks the running mean τ̄ = τ_tot / a_tot of inference times and never pads:
    each worker acts as soon as its inference is done. When the mean moves by
    δ, the workers are re-spaced from old τ̄/N to new τ̄/N: if δ >= 0 the workers
    further behind wait more (dist(num, i)·|δ|/N); if δ < 0 the workers closer
    ahead wait more ((N − dist(num, i))·|δ|/N). As the mean converges δ → 0 and
    the waiting vanishes, so τ_I → τ̄_θ/N (Appendix B, "Interaction Time of
    Algorithm 2").

    ``initial_estimate`` is the estimate before any sample (paper: 0); it
    staggers the first inferences by i·initial_estimate/N, and the first sample
    then re-spaces from it. It is not counted in the mean.

    >>> s = make_scheduler("exp_time", 2)
    >>> s.after_inference(0, 1.0), s.pending_delays       # mean 0 -> 1: widen
    (0.0, (0.0, 0.5))
    >>> s.after_inference(1, 0.5), s.tau_mean_estimate    # mean 1 -> 0.75: shrink
    (0.0, 0.75)
    """

    name = "exp_time"

    def __init__(self, n_workers: int, *, initial_estimate: float | None = None) -> None:
        super().__init__(n_workers, initial_estimate=initial_estimate)
        self._tau_tot = 0.0
        self._a_tot = 0

    def _mean(self) -> float:
        return self._tau_tot / self._a_tot if self._a_tot else self._initial_estimate

    @property
    def tau_mean_estimate(self) -> float:
        """τ̄: the mean of all inference times seen (the initial estimate before any)."""
        with self._lock:
            return self._mean()

    @property
    def n_samples(self) -> int:
        """a_tot: the number of inference times averaged."""
        with self._lock:
            return self._a_tot

    def after_inference(self, worker: int, tau_theta: float) -> float:
        tau = _check_seconds("tau_theta", tau_theta)
        with self._lock:
            worker = self._check_worker(worker)
            self._record(worker, tau)
            return 0.0

    def _record(self, worker: int, tau: float) -> None:
        old_mean = self._mean()
        self._a_tot += 1
        self._tau_tot += tau
        delta = self._mean() - old_mean
        if delta >= 0:  # Alg 2: wait more further from the current worker
            self._delay_behind(worker, delta)
        else:
            # Alg 2: wait more closer to the current worker. The extracted paper text
            # reads "(N_I − 1) dist(num, processnum)"; we read it as (N − dist): shifting
            # worker num by −dist·|δ|/N (shrinking the spacing) is impossible with
            # non-negative sleeps, so every worker is shifted by the same +|δ| on top,
            # which leaves (N − dist)·|δ|/N. That common shift must include the current
            # worker itself (dist 0, so |δ|); the paper's loop skips num = processnum,
            # which would leave it |δ| ahead of the re-spaced others forever (the
            # constant-latency tests catch that).
            n = self._n
            for d in range(n):
                self._delays[(worker + d) % n] += (n - d) * -delta / n

    def __repr__(self) -> str:
        return f"ExpectedTimeScheduler(n_workers={self._n}, tau_mean_estimate={self._mean()!r})"


# --------------------------------------------------------------------------- beyond the paper: hold the action, free the worker


def _check_fraction(what: str, value: Any, *, closed_low: bool = True) -> float:
    """A number in [0, 1) (or (0, 1) with ``closed_low=False``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number in {'[' if closed_low else '('}0, 1), got {type(value).__name__}")
    v = float(value)
    if not ((0.0 <= v if closed_low else 0.0 < v) and v < 1.0):  # NaN fails this too
        raise ValueError(f"{what} must be in {'[' if closed_low else '('}0, 1), got {value!r}")
    return v


class QuantileHoldScheduler(Scheduler):
    """One inference started per period; each finished *action* held to a quantile of τ_θ (beyond the paper).

    Why. Algorithm 1 holds each *worker* until the running maximum τ̂max has passed, so every
    worker is busy for τ̂max per action and N_I* = ⌈τ_θmax/τ_M⌉, which grows without bound with a
    heavy tail. Algorithm 2 frees workers at once but lets actions arrive whenever their inference
    ends, so with variable τ_θ some ticks get two actions and others none. Here the two roles
    are split:

    1. *Starts* sit on a grid, one per ``period`` (τ_M: one per tick). A worker that finishes
       takes the next grid slot no other worker has taken and waits for it; it never pads.
    2. Each finished *action* is held until ``start + Q·period``, its release slot, where ``Q =
       ⌈q̂/period⌉`` and q̂ is the running ``quantile`` (default 99.9 %) of τ_θ over the last
       ``window`` inferences. Then one action is released per period, in start order, and every
       tick gets one unless that inference ran past q̂ (then it is released at once, late).

    Costs. A worker is busy only for its τ_θ, so the workers needed at a start are the
    inferences still in flight, ``Σ_j 1[τ_j > j·period]``: on average E⌈τ_θ/period⌉ ≈ τ̄_θ/τ_M +
    ½ (Little's law), the lower bound ⌈τ̄_θ/τ_M⌉ of any scheduler up to a few standard deviations of
    that count. Delay becomes the constant Q·period (a high quantile of τ_θ) instead of τ_θ
    itself: the trade is delay for workers. With constant τ_θ it needs ⌈τ_θ/τ_M⌉ workers and its
    delay is τ_θ rounded up to the grid, as for Algorithm 2.

    The same trade shows at every episode reset: the actions in flight were computed in the old
    episode and are dropped as stale, and the new episode's first actions are held to their grid
    release Q periods after their start, so the first Q ticks of each episode would go to β. With a
    heavy tail Q is long — lognormal σ = 1 at τ̄_θ = 70 ticks puts the 99.9 % point near 900 ticks
    — and these resets were the main source of inaction in a window that contains one (measured
    with ``auto`` before the catch-up below: 2.2 % at τ̄_θ = 20, 23 % at 70 over 4,000 ticks).
    Releasing the new actions early and then re-gridding cannot help by itself: with one start per
    period, an action released early leaves its own grid tick empty later, so the gap only moves.

    *Episode catch-up* (``early_release``, on by default). An action computed on the newest
    episode that finishes before that episode's grid catches up — before the release of its first
    slot — is also released early, as a *copy*, in a queue of its own: one copy per period, each at
    the first free period at or after its inference ended (`early_release`). The original keeps its
    grid release, so the grid is untouched; the copies fill the ticks that would go to β, and stop
    where the grid takes over. The cost of a reset falls from Q ticks to about τ̄_θ/τ_M (the copies
    arrive at rate P(τ_θ ≤ j) j ticks after the reset, as for Algorithm 2). A copy applies the same
    decision twice (early, with a short delay, and at its grid slot), which is right for control
    (the ``latest`` queue); the pool sends copies only to a ``latest`` queue, never to a ``fifo``
    command stream, where a command must not run twice.

    The same copies fill the ticks a growing Q leaves empty (a pipeline cannot lengthen without a
    gap): the releases jump by the growth and those periods are remembered; a finished action whose
    own release lies beyond one sends a copy there. A *skipped* slot is never filled: a copy there
    would repeat a decision for want of a worker and hide that N_I is too small (N_I* would fall
    below the bound ⌈τ̄_θ/τ_M⌉ that no scheduler can beat with one decision per tick).
    Lognormal σ = 1 at τ̄_θ = 20 ticks, Q growing from 215 to 300 ticks cost 85 empty ticks (2.2 %
    of a 4,000-tick window) without them.

    Rules that keep it honest. Q grows at once when q̂ does (one tick then goes without an action:
    a pipeline cannot lengthen without a gap) and shrinks only when q̂·(1 + ``hold_hysteresis``) fits
    a smaller Q (two actions then share a tick; none is lost). A slot no worker was free for is
    skipped and counted (`skipped_slots`): that tick goes to β. Before any sample the hold is
    ``initial_estimate`` (default 0: release at once). Each action's release slot is fixed when its
    start slot is taken, so releases follow start order.

    q̂ is not the raw 99.9 % order statistic (from a few thousand samples it rests on four of them
    and jumps, and every jump up costs empty ticks) but an exponential tail fitted to the top 5 %
    (peaks over threshold), which moves smoothly and is cautious while samples are few.

    The scheduler reads no clock: the grid starts at ``origin`` (or the first time it is told),
    and ``take_delay(worker, now)`` is given the worker's time (without it, the worker's own
    time from the scheduler's record: its last start plus τ_θ). `InferencePool` binds ``period``
    to τ_M and ``origin`` to the tick grid when they are not given. ``after_inference`` returns
    the hold, which the pool spends holding the action while the worker goes on (``frees_workers``).

    >>> s = make_scheduler("quantile_hold", 3, period=1.0, initial_estimate=2.0)
    >>> [s.take_delay(w, now=0.0) for w in range(3)]   # one start per period, each released at start + Q = 2
    [0.0, 1.0, 2.0]
    >>> s.after_inference(0, 2.5), s.hold_periods       # late: released at once, and Q grows to 3
    (0.0, 3)
    >>> s.take_delay(0, now=2.5)                         # worker 0 is free: the next free slot is 3
    0.5
    >>> round(s.after_inference(2, 1.2), 9)              # slot 2 done at 3.2, held to its release at 2 + 2
    0.8
    """

    name = "quantile_hold"
    frees_workers = True

    def __init__(
        self,
        n_workers: int,
        *,
        period: float | None = None,
        quantile: float = 0.999,
        window: int = 4096,
        hold_hysteresis: float = 0.5,
        initial_estimate: float | None = None,
        origin: float | None = None,
        early_release: bool = True,
    ) -> None:
        super().__init__(n_workers)
        if not isinstance(early_release, bool):
            raise TypeError(f"early_release must be a bool, got {type(early_release).__name__} {early_release!r}")
        self._early = early_release
        self._period = None if period is None else _check_seconds("period", period, positive=True)
        self._quantile = _check_fraction("quantile", quantile, closed_low=False)
        self._window = _check_count("window", window)
        self._hold_hysteresis = _check_fraction("hold_hysteresis", hold_hysteresis)
        self._initial_estimate = _check_initial_estimate(initial_estimate)
        self._origin = None if origin is None else _check_time("origin", origin)
        self._next_slot = 0
        # (start, release) of each worker's inference in flight
        self._slot: list[tuple[float, float] | None] = [None] * self._n
        self._free_at: list[float | None] = [None] * self._n  # when its last inference ended
        self._recent: deque[float] = deque()  # the window, oldest first
        self._sorted: list[float] = []  # the same values, sorted
        self._hold: int | None = None  # Q, in periods; None until a period is known
        self._skipped = 0
        # episode catch-up: each worker's last finished (start, release, done); the newest episode
        # seen, where its grid takes over (its earliest known slot's release) and its copies' next period
        self._finished: list[tuple[float, float, float] | None] = [None] * self._n
        self._episode: int | None = None
        self._catch_up = math.inf
        self._next_copy = -math.inf
        self._copies = 0
        self._last_release: float | None = None  # the latest grid release handed out
        self._last_hold: int | None = None  # Q at the last claim
        self._gaps: list[int] = []  # grid periods (indices from origin) no release will fill, sorted

    # ---- binding and read-outs
    def bind(self, *, period: float, origin: float) -> None:
        """Fill in ``period`` and the grid ``origin`` where the constructor left them out
        (`InferencePool` passes τ_M and its tick grid); values already set are kept."""
        period = _check_seconds("period", period, positive=True)
        origin = _check_time("origin", origin)
        with self._lock:
            if self._period is None:
                self._period = period
            if self._origin is None:
                self._origin = origin

    def _require_period(self) -> float:
        if self._period is None:
            raise RuntimeError(
                f"the {self.name} scheduler has no period: pass period=τ_M (seconds between starts) "
                f"or run it in an InferencePool, which binds the env's tick period"
            )
        return self._period

    @property
    def period(self) -> float | None:
        """Seconds between inference starts (τ_M once bound)."""
        return self._period

    @property
    def hold_periods(self) -> int:
        """Q: an action is released Q periods after its inference started."""
        with self._lock:
            return self._current_hold()

    @property
    def release_quantile(self) -> float:
        """q̂: the running ``quantile`` of τ_θ over the window (the initial estimate before any sample)."""
        with self._lock:
            return self._quantile_estimate()

    @property
    def n_samples(self) -> int:
        """Inference times in the window."""
        with self._lock:
            return len(self._recent)

    @property
    def skipped_slots(self) -> int:
        """Start slots that passed with no worker free (each leaves one tick to β)."""
        with self._lock:
            return self._skipped

    @property
    def early_copies(self) -> int:
        """Copies handed out by `early_release` (episode catch-up)."""
        with self._lock:
            return self._copies

    # ---- the estimate
    def _quantile_estimate(self) -> float:
        """q̂ at level ``quantile``, with an exponential tail fitted above the k-th largest sample
        (peaks over threshold): a 99.9 % point from a few thousand samples rests on 4 of them
        and jumps about; the fitted tail uses the top 5 % (at least 10), moves smoothly and is
        cautious (high) while samples are few. Constant τ_θ gives exactly τ_θ."""
        xs, n = self._sorted, len(self._sorted)
        if not n:
            return self._initial_estimate
        beyond = n * (1.0 - self._quantile)  # samples expected above the quantile
        k = min(n, max(10, math.ceil(0.05 * n)))
        if k <= beyond:  # enough data above it: the plain order statistic
            return xs[min(n - 1, max(0, math.ceil(self._quantile * n) - 1))]
        threshold = xs[n - k]
        mean_excess = math.fsum(xs[n - k :]) / k - threshold
        return threshold + mean_excess * math.log(k / beyond)

    def _periods(self, seconds: float) -> int:
        return max(0, math.ceil(seconds / self._require_period() - 1e-9))

    def _current_hold(self) -> int:
        if self._hold is None:
            self._hold = self._periods(self._headroom(0.5))
        return self._hold

    def _record(self, tau: float) -> None:
        self._recent.append(tau)
        bisect.insort(self._sorted, tau)
        if len(self._recent) > self._window:
            old = self._recent.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        # Growing Q by Δ costs Δ empty ticks at once, a late action one tick: so Q grows only
        # when the window holds clearly more late inferences than the quantile allows (a
        # 3-sigma excess, at least one), and then with headroom, to q̂ + (h/2)·(q̂ − median). It
        # shrinks, to the same point, only once q̂ + h·(q̂ − median) fits a smaller Q: a shrink
        # must not invite the next growth. Constant τ_θ has no spread and no headroom.
        hold = self._current_hold()
        n = len(self._sorted)
        late = n - bisect.bisect_right(self._sorted, hold * self._require_period() * (1.0 + 1e-9))
        allowed = (1.0 - self._quantile) * n
        if late >= max(1.0, allowed + 3.0 * math.sqrt(allowed)) or self._periods(self._headroom(1.0)) < hold:
            self._hold = self._periods(self._headroom(0.5))

    def _headroom(self, fraction: float) -> float:
        """q̂ + fraction·h·(q̂ − median): the hold band's edges (1) and middle (½)."""
        q = self._quantile_estimate()
        if not self._sorted:
            return q
        median = self._sorted[(len(self._sorted) - 1) // 2]
        return q + fraction * self._hold_hysteresis * max(0.0, q - median)

    # ---- the worker loop
    def _retired(self, worker: Any) -> bool:
        return False

    def start_delay(self, worker: int) -> float:
        with self._lock:
            if not self._retired(worker):
                self._check_worker(worker)
            return 0.0  # the stagger comes from the grid: take_delay hands out one slot per period

    def take_delay(self, worker: int, now: float | None = None) -> float:
        with self._lock:
            if self._retired(worker):
                return 0.0
            w = self._check_worker(worker)
            period = self._require_period()
            if now is None:  # the worker's own time, as far as this scheduler knows it
                claimed = self._slot[w]
                now = self._free_at[w] if self._free_at[w] is not None else (claimed and claimed[0])
                now = (self._origin or 0.0) if now is None else now
            else:
                now = _check_time("now", now)
            if self._origin is None:
                self._origin = now
            first_ahead = math.ceil((now - self._origin) / period - 1e-9)  # first slot at or after now
            if first_ahead > self._next_slot:
                self._skipped += first_ahead - self._next_slot
            slot = max(self._next_slot, first_ahead)
            self._next_slot = slot + 1
            start = self._origin + slot * period
            # the release slot is fixed now, at the claim: releases then follow claim order, so a
            # growing Q leaves exactly its growth in empty ticks (fixing it when each inference
            # ends instead would reshuffle the actions in flight and collide many of them)
            hold = self._current_hold()
            release = start + hold * period
            self._slot[w], self._free_at[w] = (start, release), None
            self._note_gaps(release, hold, period)
            return max(0.0, start - now)

    def _note_gaps(self, release: float, hold: int, period: float) -> None:
        """Releases one period apart leave no tick empty; when Q grows by Δ (a pipeline cannot
        lengthen without a gap) the Δ periods before this release go to β unless copies fill them
        (`early_release`). A skipped slot's period is *not* noted: filling it would repeat a
        decision for want of a worker, and hide that N_I is too small."""
        last_hold, self._last_hold = self._last_hold, hold
        last = self._last_release
        self._last_release = release if last is None else max(last, release)
        if last is None or last_hold is None or not self._early:
            return
        origin = self._origin or 0.0
        index = round((release - origin) / period)  # periods are kept as grid indices
        if release <= last:  # Q shrank: this release may land in a gap noted earlier, which it fills
            at = bisect.bisect_left(self._gaps, index)
            if at < len(self._gaps) and self._gaps[at] == index:
                del self._gaps[at]
            return
        grown = min(hold - last_hold, index - round((last - origin) / period) - 1, _MAX_GAPS - len(self._gaps))
        self._gaps.extend(range(index - max(0, grown), index))

    def after_inference(self, worker: int, tau_theta: float) -> float:
        tau = _check_seconds("tau_theta", tau_theta)
        with self._lock:
            w = worker if self._retired(worker) else self._check_worker(worker)
            self._require_period()  # a clear error before anything is recorded
            self._record(tau)
            claimed = self._slot[w]
            if claimed is None:  # no slot was taken for this inference: nothing to align to
                return 0.0
            start, release = claimed
            done = start + tau
            self._slot[w], self._free_at[w] = None, done
            if isinstance(w, int) and w < len(self._finished):
                self._finished[w] = (start, release, done)
            return max(0.0, release - done)

    def early_release(self, worker: int, episode: int) -> float | None:
        """Episode catch-up (class docstring): seconds after its inference ended at which a *copy* of
        ``worker``'s last action, computed on an observation of ``episode``, should be released, or
        None for no copy. Call it after `after_inference` for the same inference.

        >>> s = make_scheduler("quantile_hold", 4, period=1.0, initial_estimate=10.0)
        >>> [s.take_delay(w, now=0.0) for w in range(4)]      # slots 0..3, released at 10..13
        [0.0, 1.0, 2.0, 3.0]
        >>> s.after_inference(1, 2.0), s.early_release(1, episode=5)   # done at 3: a copy at once
        (8.0, 0.0)
        >>> s.after_inference(0, 3.5), s.early_release(0, episode=5)   # done at 3.5: the next free period, 4
        (6.5, 0.5)
        >>> s.after_inference(2, 9.5), s.early_release(2, episode=5)   # done at 11.5: the grid has taken over
        (0.5, None)
        >>> s.early_release(3, episode=4) is None                      # an older episode: stale anyway
        True
        """
        if isinstance(episode, bool) or not isinstance(episode, numbers.Integral):
            raise TypeError(f"episode must be an int, got {type(episode).__name__} {episode!r}")
        with self._lock:
            w = worker if self._retired(worker) else self._check_worker(worker)
            finished = self._finished[w] if w < len(self._finished) else None
            if not self._early or finished is None:
                return None
            self._finished[w] = None  # one copy at most per inference
            start, release, done = finished
            if self._episode is None or episode > self._episode:  # a new episode: a fresh catch-up
                self._episode, self._catch_up, self._next_copy = int(episode), release, -math.inf
            elif episode < self._episode:
                return None
            self._catch_up = min(self._catch_up, release)  # its earliest slot's release, as reports arrive
            period, origin = self._require_period(), self._origin or 0.0
            first = origin + math.ceil((done - origin) / period - 1e-9) * period  # first period at or after done
            at = max(first, self._next_copy)
            if at < self._catch_up - 1e-9 * period:
                self._next_copy = at + period
                self._copies += 1
                return max(0.0, at - done)
            # past the catch-up: a gap the grid leaves (Q grew, a slot was skipped) takes the copy
            passed = bisect.bisect_left(self._gaps, round((first - origin) / period))
            del self._gaps[:passed]  # passed unfilled: nothing had finished in time
            if self._gaps and release > origin + self._gaps[0] * period + 1e-9 * period:
                gap = origin + self._gaps.pop(0) * period  # only a gap before this action's own release
                self._copies += 1
                return max(0.0, gap - done)
            return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_workers={self._n}, period={self._period!r}, "
            f"quantile={self._quantile!r}, hold_periods={self._hold!r})"
        )


class AutoScheduler(QuantileHoldScheduler):
    """`QuantileHoldScheduler` that also sizes N_I online (beyond the paper).

    The workers a start needs are the inferences still in flight, ``B = Σ_j 1[τ_j > j·period]``
    (j = 0 is the one starting). From the τ_θ window the scheduler knows each ``p_j = P(τ_θ >
    j·period)``, so ``E[B] = Σ p_j`` (= E⌈τ_θ/period⌉) and ``Var[B] = Σ p_j(1 − p_j)`` for
    independent τ_θ; the recommendation is ``target_workers() = ⌈E[B] + z·sd[B]⌉`` with z the
    normal ``worker_quantile`` point (default 99.9 %), clamped to [min_workers, max_workers].
    Constant τ_θ gives sd 0 and exactly ⌈τ_θ/τ_M⌉.

    Hysteresis, so the count does not flap: it grows at once (too few workers means skipped
    slots) and shrinks only to ``⌈(E[B] + z·sd[B]) / (1 − hysteresis)⌉``.

    ``resize(n)`` is simple because workers have no phases here: a new worker takes the next
    free slot when it starts; a retired worker (index >= n) stops at its next loop top, and an
    inference it still has in flight keeps its release slot (its ``after_inference`` still
    answers). ``anchor`` is accepted for the pool's sake and only checked.

    >>> s = make_scheduler("auto", 1, period=1 / 60, max_workers=64)
    >>> s.take_delay(0, now=0.0), s.after_inference(0, 0.1)     # 6 ticks
    (0.0, 0.0)
    >>> s.target_workers()                                       # one sample: ⌈6⌉, sd 0
    6
    >>> s.resize(6)
    >>> [round(s.take_delay(m, now=0.1) * 60, 6) for m in range(1, 6)]   # new workers: one slot each
    [0.0, 1.0, 2.0, 3.0, 4.0]
    """

    name = "auto"

    def __init__(
        self,
        n_workers: int,
        *,
        min_workers: int = 1,
        max_workers: int | None = None,
        hysteresis: float = 0.1,
        worker_quantile: float = 0.999,
        period: float | None = None,
        quantile: float = 0.999,
        window: int = 4096,
        hold_hysteresis: float = 0.5,
        initial_estimate: float | None = None,
        origin: float | None = None,
        early_release: bool = True,
    ) -> None:
        super().__init__(
            n_workers, period=period, quantile=quantile, window=window, hold_hysteresis=hold_hysteresis,
            initial_estimate=initial_estimate, origin=origin, early_release=early_release,
        )  # fmt: skip
        self._hysteresis = _check_fraction("hysteresis", hysteresis)
        self._min = _check_count("min_workers", min_workers)
        self._max = None if max_workers is None else _check_count("max_workers", max_workers)
        if self._max is not None and self._max < self._min:
            raise ValueError(f"max_workers={self._max} is below min_workers={self._min}")
        self._check_in_bounds(self._n)
        self._z = NormalDist().inv_cdf(_check_fraction("worker_quantile", worker_quantile, closed_low=False))
        self._recommended = self._n
        self._high_water = self._n  # indices in [n, high_water) are retired, not invalid
        self._busy: tuple[int, float, float] | None = None  # (samples seen, E[B], sd[B]) cache
        self._seen = 0

    @property
    def min_workers(self) -> int:
        return self._min

    @property
    def max_workers(self) -> int | None:
        return self._max

    def _check_in_bounds(self, n: int) -> None:
        if n < self._min or (self._max is not None and n > self._max):
            hi = "inf" if self._max is None else self._max
            raise ValueError(f"n_workers={n} is outside [min_workers, max_workers] = [{self._min}, {hi}]")

    def _clamp(self, n: int) -> int:
        n = max(n, self._min)
        return n if self._max is None else min(n, self._max)

    def _retired(self, worker: Any) -> bool:
        return (
            isinstance(worker, numbers.Integral)
            and not isinstance(worker, bool)
            and self._n <= int(worker) < self._high_water
        )

    def _record(self, tau: float) -> None:
        super()._record(tau)
        self._seen += 1

    def busy_workers(self) -> tuple[float, float]:
        """(E[B], sd[B]): mean and spread of the workers in flight at a start (class docstring)."""
        with self._lock:
            return self._busy_stats()

    def _busy_stats(self) -> tuple[float, float]:
        period = self._require_period()
        n = len(self._sorted)
        if not n:
            return float(self._periods(self._initial_estimate)), 0.0
        # recomputed every 16 samples: O(window) numpy work, not per call
        if self._busy is None or self._seen - self._busy[0] >= 16 or n < 64:
            taus = np.asarray(self._sorted)
            edges = np.arange(self._periods(taus[-1]) + 1) * period * (1.0 + 1e-9)
            p = (n - np.searchsorted(taus, edges, side="right")) / n  # P(τ_θ > j·period)
            self._busy = (self._seen, float(p.sum()), float(np.sqrt((p * (1.0 - p)).sum())))
        return self._busy[1], self._busy[2]

    def target_workers(self, tau_m: float | None = None) -> int:
        """Recommended N_I: ⌈E[B] + z·sd[B]⌉ with hysteresis (class docstring).

        ``tau_m`` binds the period if none is set yet (and is otherwise only checked). Before any
        inference time (and without an initial estimate) the recommendation is the current count.
        """
        if tau_m is not None:
            tau_m = _check_seconds("tau_m", tau_m, positive=True)
        with self._lock:
            if self._period is None and tau_m is not None:
                self._period = tau_m
            if not self._sorted and self._initial_estimate == 0.0:
                return self._recommended
            mean, sd = self._busy_stats()
            load = mean + self._z * sd
            need = self._clamp(max(1, math.ceil(load - 1e-9)))
            if need > self._recommended:
                self._recommended = need
            else:
                keep = self._clamp(max(1, math.ceil(load / (1.0 - self._hysteresis) - 1e-9)))
                self._recommended = min(self._recommended, keep)
            return self._recommended

    def resize(self, n_workers: int, *, anchor: int | None = None) -> None:
        """Change N_I to ``n_workers`` (see the class docstring)."""
        new = _check_count("n_workers", n_workers)
        self._check_in_bounds(new)
        with self._lock:
            if anchor is not None:
                self._check_worker(anchor)
            old = self._n
            if new > len(self._slot):
                grow = new - len(self._slot)
                self._slot.extend([None] * grow)
                self._free_at.extend([None] * grow)
                self._finished.extend([None] * grow)
            for m in range(old, new):  # a revived index starts afresh
                self._slot[m] = self._free_at[m] = self._finished[m] = None
            self._n = new
            self._high_water = max(self._high_water, old)
            self._recommended = new

    def __repr__(self) -> str:
        return (
            f"AutoScheduler(n_workers={self._n}, period={self._period!r}, hold_periods={self._hold!r}, "
            f"min_workers={self._min}, max_workers={self._max})"
        )


# --------------------------------------------------------------------------- factory

_REGISTRY: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (
        SequentialScheduler, UnstaggeredScheduler, MaxTimeScheduler, ExpectedTimeScheduler, QuantileHoldScheduler,
        AutoScheduler,
    )
}
#: Valid names for `make_scheduler`.
SCHEDULER_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def make_scheduler(name: str, n_workers: int, **kwargs: Any) -> Scheduler:
    """Build a scheduler by name: one of `SCHEDULER_NAMES`.

    >>> make_scheduler("max_time", 4, initial_estimate=0.1)
    MaxTimeScheduler(n_workers=4, tau_max_estimate=0.1)
    >>> make_scheduler("fastest", 4)
    Traceback (most recent call last):
    ...
    ValueError: unknown scheduler 'fastest': valid names are sequential, unstaggered, max_time, exp_time, quantile_hold, auto
    """
    if not isinstance(name, str):
        raise TypeError(f"scheduler name must be a str, got {type(name).__name__} {name!r}")
    try:
        cls = _REGISTRY[name]
    except KeyError:
        valid = ", ".join(SCHEDULER_NAMES)
        raise ValueError(f"unknown scheduler {name!r}: valid names are {valid}") from None
    try:
        return cls(n_workers, **kwargs)
    except TypeError as err:
        if "unexpected keyword argument" in str(err):
            raise TypeError(f"scheduler {name!r} got an unexpected option: {err}") from None
        raise


# --------------------------------------------------------------------------- simulator


class Iteration(NamedTuple):
    """One pass of one worker through the loop, as `simulate_iterations` saw it."""

    worker: int
    index: int  # type: ignore[assignment]  # the worker's k-th loop (0-based); a public field name that shadows tuple.index
    start: float  # top of the loop, before take_delay
    delay: float  # take_delay(worker)
    tau_theta: float
    wait: float  # after_inference(worker, tau_theta)
    fire_time: float  # submit

    @property
    def obs_time(self) -> float:
        """When the observation was read and inference began."""
        return self.start + self.delay

    @property
    def done_time(self) -> float:
        """When inference finished (after_inference was called)."""
        return self.start + self.delay + self.tau_theta


_TOP, _DONE, _FIRE = 0, 1, 2


def simulate_iterations(
    scheduler: Scheduler,
    latencies: Callable[[int, int], float],
    n_actions: int,
    *,
    on_fire: Callable[[Scheduler, float, int], None] | None = None,
) -> list[Iteration]:
    """Run the worker loop on a discrete-event timeline until ``n_actions`` submissions.

    ``latencies(worker, k)`` is the inference time of ``worker``'s k-th loop.
    All workers begin at t = 0. Events at the same instant run in the order
    they were scheduled (first round: worker order). ``take_delay`` is told the
    worker's time. With a scheduler that ``frees_workers``, the worker starts its
    next loop as soon as its inference ends and its action fires ``wait`` later on
    its own. ``on_fire(scheduler, time, worker)`` runs after each submission and may
    ``resize`` an `AutoScheduler`: new workers start at that instant, retired ones
    stop at their next loop top. Returns the iterations in submission order.
    """
    if isinstance(n_actions, bool) or not isinstance(n_actions, numbers.Integral) or n_actions < 0:
        raise ValueError(f"n_actions must be an int >= 0, got {n_actions!r}")
    frees = scheduler.frees_workers
    heap: list[tuple[float, int, int, int, int]] = []
    order = itertools.count()
    running: set[int] = set()
    loops: dict[int, int] = {}
    inflight: dict[int, tuple[int, int, float, float, float, float]] = {}  # action id -> its loop so far
    out: list[Iteration] = []

    def push(time: float, kind: int, worker: int, action: int = -1) -> None:
        heapq.heappush(heap, (time, next(order), kind, worker, action))

    def spawn(now: float) -> None:
        for worker in range(scheduler.n_workers):
            if worker not in running:
                running.add(worker)
                push(now + scheduler.start_delay(worker), _TOP, worker)

    spawn(0.0)
    while heap and len(out) < n_actions:
        now, action, kind, worker, aid = heapq.heappop(heap)
        if kind == _TOP:
            if worker >= scheduler.n_workers:
                running.discard(worker)
                continue
            delay = scheduler.take_delay(worker, now=now)
            k = loops.get(worker, 0)
            loops[worker] = k + 1
            tau = float(latencies(worker, k))
            inflight[action] = (worker, k, now, delay, tau, 0.0)
            push(now + delay + tau, _DONE, worker, action)
        elif kind == _DONE:
            w, k, start, delay, tau, _ = inflight[aid]
            wait = scheduler.after_inference(worker, tau)
            inflight[aid] = (w, k, start, delay, tau, wait)
            push(now + wait, _FIRE, worker, aid)
            if frees:
                push(now, _TOP, worker)
        else:
            w, k, start, delay, tau, wait = inflight.pop(aid)
            out.append(Iteration(worker, k, start, delay, tau, wait, now))
            if len(out) == n_actions:
                break
            if on_fire is not None:
                on_fire(scheduler, now, worker)
                spawn(now)
            if not frees:
                push(now, _TOP, worker)
    return out


def simulate(
    scheduler: Scheduler,
    latencies: Callable[[int, int], float],
    n_actions: int,
    *,
    on_fire: Callable[[Scheduler, float, int], None] | None = None,
) -> list[tuple[float, int]]:
    """``(fire_time, worker)`` of the first ``n_actions`` submissions (see `simulate_iterations`).

    >>> s = make_scheduler("exp_time", 2)
    >>> [(round(t, 2), w) for t, w in simulate(s, lambda worker, k: 1.0, 6)]
    [(1.0, 0), (1.0, 1), (2.0, 0), (2.5, 1), (3.0, 0), (3.5, 1)]
    """
    its = simulate_iterations(scheduler, latencies, n_actions, on_fire=on_fire)
    return [(it.fire_time, it.worker) for it in its]
