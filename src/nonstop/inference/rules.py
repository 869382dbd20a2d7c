"""The pure scheduler rules of the paper (Riemer et al. 2025): the `Scheduler` interface, the
two baselines and Algorithms 1 and 2 (docs/design.md §2). Timings in, waits out.

Every inference worker runs the same loop::

    sleep(scheduler.start_delay(i))                  # once: the initial stagger
    while alive:
        sleep(scheduler.take_delay(i))                # delay accumulated by other workers
        obs = read_latest(); a, tau = infer(obs)      # tau: measured inference time
        sleep(scheduler.after_inference(i, tau))      # Alg 1 pads to the max; Alg 2 waits 0
        submit(a)

A scheduler only does arithmetic on the timings it is given: it reads no clock and never sleeps,
so the same object runs under the wall clock, the virtual clock and the event loop
`nonstop.inference.simulate`. Its methods may be called from several worker threads; one lock
guards its state. This module imports only its argument checks and starts nothing: it is the
rules alone (`nonstop.inference.schedulers` has the factory `make_scheduler`, and every scheduler
beyond the paper).

Workers form a cycle 0, 1, ..., N-1, 0, ... and ``dist(x, y) = (x - y) mod N`` is how far worker
``x`` is behind worker ``y`` (the worker right after ``y`` has distance 1).

>>> s = MaxTimeScheduler(3)
>>> s.after_inference(0, 0.9), s.pending_delays   # a new max: the others spread out, τ̂/N apart
(0.0, (0.0, 0.3, 0.6))
"""

from __future__ import annotations

import numbers
import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

from nonstop.inference.checks import check_count, check_initial_estimate, check_seconds, check_time

__all__ = [
    "Scheduler",
    "SequentialScheduler",
    "UnstaggeredScheduler",
    "MaxTimeScheduler",
    "ExpectedTimeScheduler",
    "TickRule",
]

#: how a rule's estimate reads in whole ticks, where starts align to ticks (`nonstop.inference.phases`):
#: the largest cycle seen (Algorithm 1) or the mean one (Algorithm 2)
TickRule = Literal["max", "mean"]


# --------------------------------------------------------------------------- interface


class Scheduler(ABC):
    """When each of ``n_workers`` inference workers waits (see the module docstring).

    All times are seconds. Every wait a scheduler returns is >= 0. Worker
    indices are ``0 .. n_workers - 1``; anything else raises a TypeError or
    ValueError naming it, as does a NaN, infinite or negative ``tau_theta``.

    The pool (`nonstop.inference.workers.InferencePool`) asks every scheduler the same things; what
    a rule does not need has a default here, so the pool never asks which rule it holds:

    * ``bind(period, origin)``: the env's tick period and grid (rules on the tick grid keep them);
    * ``frees_workers``: the wait holds the action, not the worker (a timer releases it);
    * ``early_release(worker, episode)``: a copy of the action released early (None: none);
    * ``resizable``, ``target_workers(τ_M)``, ``resize(n, anchor=)``: N_I sized online;
    * ``tick_rule``: the estimate in whole ticks where starts align to ticks;
    * ``learns_from_rewards``, ``observe_reward(reward, delay)``: a rule fitted to the world's rewards;
    * ``report()``: what the rule chose, for the run's record.
    """

    name: ClassVar[str]
    #: True when ``after_inference``'s wait holds the *action*, not the worker: the worker loop
    #: hands the action to a timer and starts its next inference at once.
    frees_workers: ClassVar[bool] = False
    #: Algorithms 1 and 2: their estimate in whole ticks, by which the pool spaces workers where
    #: starts align to ticks (`nonstop.inference.phases`); None: the rule's own waits everywhere
    tick_rule: ClassVar[TickRule | None] = None
    #: True when the rule sizes N_I online: the pool asks `target_workers` after each submit and `resize`s
    resizable: ClassVar[bool] = False
    #: True when the rule wants each tick's reward and delay (`observe_reward`)
    learns_from_rewards: ClassVar[bool] = False

    def __init__(self, n_workers: int) -> None:
        self._n = check_count("n_workers", n_workers)
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

    # ---- what a rule may do beyond the three waits (the defaults: nothing)
    def bind(self, *, period: float, origin: float) -> None:
        """The env's tick ``period`` and the grid's ``origin`` (a rule off the grid ignores them)."""
        return None

    def early_release(self, worker: int, episode: int) -> float | None:
        """Seconds after ``worker``'s inference ended at which a copy of its action is released early
        (an episode's catch-up), or None for no copy (the default)."""
        return None

    def target_workers(self, tau_m: float | None = None) -> int:
        """The N_I the rule recommends now (a rule of fixed N_I: its N_I)."""
        return self.n_workers

    def resize(self, n_workers: int, *, anchor: int | None = None) -> None:
        """Change N_I to ``n_workers``; only a `resizable` rule can."""
        raise ValueError(f"the {self.name} scheduler runs a fixed N_I = {self._n}: it cannot resize to {n_workers}")

    def observe_reward(self, reward: float, delay_ticks: int | None) -> None:
        """One tick's reward and its applied action's delay (None: a β tick); a rule that does not
        `learns_from_rewards` ignores it."""
        return None

    def report(self) -> dict[str, Any]:
        """What the rule chose as it ran, for the run's record (default: nothing)."""
        return {}

    def _check_worker(self, worker: Any) -> int:
        if isinstance(worker, bool) or not isinstance(worker, numbers.Integral):
            raise TypeError(f"worker must be an int, got {type(worker).__name__} {worker!r}")
        index = int(worker)
        if not 0 <= index < self._n:
            raise ValueError(f"worker {worker!r} out of range: valid workers are 0..{self._n - 1}")
        return index

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_workers={self._n})"


class TickGridScheduler(Scheduler):
    """A scheduler that places actions on the env's tick grid (quantile hold, fill): it needs the
    tick period and the grid's origin, given to the constructor or bound by the pool."""

    _period: float | None = None
    _origin: float | None = None

    def bind(self, *, period: float, origin: float) -> None:
        """Fill in ``period`` and the grid ``origin`` where the constructor left them out
        (`InferencePool` passes τ_M and its tick grid); values already set are kept."""
        period = check_seconds("period", period, positive=True)
        origin = check_time("origin", origin)
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
        check_seconds("tau_theta", tau_theta)
        return 0.0


class SequentialScheduler(_NoWaitScheduler):
    """One worker, no waits: the sequential interaction baseline (τ_I = τ_θ).

    >>> s = SequentialScheduler(1)
    >>> s.start_delay(0), s.take_delay(0), s.after_inference(0, 0.3)
    (0.0, 0.0, 0.0)
    >>> SequentialScheduler(2)
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

    >>> from nonstop.inference.simulate import simulate
    >>> s = UnstaggeredScheduler(3)
    >>> [round(t, 2) for t, _ in simulate(s, lambda worker, k: 0.5, 6)]
    [0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
    """

    name = "unstaggered"


# --------------------------------------------------------------------------- staggering


class _StaggeredScheduler(Scheduler):
    """Shared state of Algorithms 1 and 2: ``delay[num]`` per worker and the initial stagger."""

    def __init__(self, n_workers: int, *, initial_estimate: float | None = None) -> None:
        super().__init__(n_workers)
        self._initial_estimate = check_initial_estimate(initial_estimate)
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

    >>> s = MaxTimeScheduler(4)
    >>> s.after_inference(0, 0.8), s.pending_delays       # new max: others spread out
    (0.0, (0.0, 0.2, 0.4, 0.6000000000000001))
    >>> s.after_inference(1, 0.5), s.tau_max_estimate     # faster: pad to the max
    (0.30000000000000004, 0.8)
    """

    name = "max_time"
    tick_rule = "max"

    def __init__(self, n_workers: int, *, initial_estimate: float | None = None) -> None:
        super().__init__(n_workers, initial_estimate=initial_estimate)
        self._tau_max = self._initial_estimate

    @property
    def tau_max_estimate(self) -> float:
        """τ̂max: the largest inference time seen (or the initial estimate, if larger)."""
        with self._lock:
            return self._tau_max

    def after_inference(self, worker: int, tau_theta: float) -> float:
        tau = check_seconds("tau_theta", tau_theta)
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

    >>> s = ExpectedTimeScheduler(2)
    >>> s.after_inference(0, 1.0), s.pending_delays       # mean 0 -> 1: widen
    (0.0, (0.0, 0.5))
    >>> s.after_inference(1, 0.5), s.tau_mean_estimate    # mean 1 -> 0.75: shrink
    (0.0, 0.75)
    """

    name = "exp_time"
    tick_rule = "mean"

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
        tau = check_seconds("tau_theta", tau_theta)
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
