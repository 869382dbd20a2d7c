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

import heapq
import itertools
import math
import numbers
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

__all__ = [
    "SCHEDULER_NAMES",
    "Scheduler",
    "SequentialScheduler",
    "UnstaggeredScheduler",
    "MaxTimeScheduler",
    "ExpectedTimeScheduler",
    "AutoScheduler",
    "make_scheduler",
    "Iteration",
    "simulate",
    "simulate_iterations",
]


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
    def take_delay(self, worker: int) -> float:
        """Delay accumulated for ``worker`` by other workers; resets it to 0.

        Called at the top of each loop (Alg 1/2: ``sleep(delay[processnum]);
        delay[processnum] <- 0``).
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
        if not 0 <= worker < self._n:
            raise ValueError(f"worker {worker!r} out of range: valid workers are 0..{self._n - 1}")
        return int(worker)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_workers={self._n})"


# --------------------------------------------------------------------------- no staggering


class _NoWaitScheduler(Scheduler):
    """Never waits: workers act as soon as their inference is done."""

    def start_delay(self, worker: int) -> float:
        self._check_worker(worker)
        return 0.0

    def take_delay(self, worker: int) -> float:
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

    def take_delay(self, worker: int) -> float:
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


class AutoScheduler(ExpectedTimeScheduler):
    """Algorithm 2 spacing plus an online recommendation of N_I (beyond the paper).

    Holding τ_I = τ̄_θ/N_I <= τ_M needs N_I >= τ̄_θ/τ_M, so the recommendation is
    ``target_workers(tau_m) = ceil(τ̄_θ / τ_M)`` clamped to [min_workers,
    max_workers] (the paper's N_I* for Algorithm 2). Ratios within 1e-9 relative
    of an integer count as that integer.

    Hysteresis, so the count does not flap when τ̄_θ/τ_M hovers near an integer:
    the recommendation grows at once when more workers are needed (too few
    workers means inaction), but shrinks only to ``ceil(τ̄_θ / (τ_M·(1 −
    hysteresis)))``, i.e. only while the smaller count keeps a relative margin of
    ``hysteresis`` below τ_M. After a change at ratio r the recommendation then
    stays put for every ratio in [r·(1 − hysteresis), r] (after growing) or
    [r, r/(1 − hysteresis)] (after shrinking).

    ``resize(n)`` changes the cycle from N to M workers. It keeps Algorithm 2's
    assumption that workers sit in cycle order at their ideal phases (worker j
    at j·τ̄/N) and adds non-negative delays that move them to j·τ̄/M:

    - shrink (M < N): workers M..N-1 retire; worker j < M waits j·τ̄·(1/M − 1/N).
      A retired worker may still finish the inference it is running: its calls
      return 0 and change nothing. The worker loop must stop it at its next
      ``take_delay`` (an index >= n_workers).
    - grow (M > N): worker j < N waits (N−1−j)·τ̄·(1/N − 1/M), and new worker m
      gets ``start_delay(m) = pending delay of the anchor + (m − anchor)·τ̄/M``.
      The anchor is the worker that just submitted: ``anchor`` if given, else
      the last worker to finish an inference. So call ``resize`` right after a
      worker submits, and start the new workers at once: a scheduler has no
      clock, it knows where "now" sits in the cycle only through that worker.
      Without an anchor (no inference yet since the last shrink), new workers
      get the plain stagger (m − N + 1)·τ̄/M.

    >>> s = make_scheduler("auto", 2, min_workers=1, max_workers=8)
    >>> s.after_inference(0, 0.1), s.target_workers(tau_m=1 / 60)   # 0.1 s / (1/60 s) = 6
    (0.0, 6)
    >>> s.resize(6, anchor=0)                                       # worker 0 just submitted
    >>> [round(s.start_delay(m), 3) for m in range(2, 6)]           # new workers, τ̄/6 apart
    [0.067, 0.083, 0.1, 0.117]
    """

    name = "auto"

    def __init__(
        self,
        n_workers: int,
        *,
        min_workers: int = 1,
        max_workers: int | None = None,
        hysteresis: float = 0.1,
        initial_estimate: float | None = None,
    ) -> None:
        super().__init__(n_workers, initial_estimate=initial_estimate)
        self._min = _check_count("min_workers", min_workers)
        self._max = None if max_workers is None else _check_count("max_workers", max_workers)
        if self._max is not None and self._max < self._min:
            raise ValueError(f"max_workers={self._max} is below min_workers={self._min}")
        self._check_in_bounds(self._n)
        if isinstance(hysteresis, bool) or not isinstance(hysteresis, numbers.Real):
            raise TypeError(f"hysteresis must be a number in [0, 1), got {type(hysteresis).__name__}")
        if not 0.0 <= float(hysteresis) < 1.0:  # NaN fails this too
            raise ValueError(f"hysteresis must be in [0, 1), got {hysteresis!r}")
        self._hysteresis = float(hysteresis)
        self._recommended = self._n
        self._high_water = self._n  # indices in [n, high_water) are retired, not invalid
        self._last_done: int | None = None

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
            and self._n <= worker < self._high_water
        )

    def start_delay(self, worker: int) -> float:
        with self._lock:
            if self._retired(worker):
                return 0.0
            return self._start_delays[self._check_worker(worker)]

    def take_delay(self, worker: int) -> float:
        with self._lock:
            if self._retired(worker):
                return 0.0
            worker = self._check_worker(worker)
            delay, self._delays[worker] = self._delays[worker], 0.0
            return delay

    def after_inference(self, worker: int, tau_theta: float) -> float:
        tau = _check_seconds("tau_theta", tau_theta)
        with self._lock:
            if self._retired(worker):
                return 0.0  # a retired worker's last inference: ignored
            worker = self._check_worker(worker)
            self._record(worker, tau)
            self._last_done = worker
            return 0.0

    def target_workers(self, tau_m: float) -> int:
        """Recommended N_I to hold τ_I <= τ_M = ``tau_m``: ceil(τ̄_θ/τ_M), with hysteresis.

        Before any inference time (and without an initial estimate) there is
        nothing to go on and the recommendation is the current count.
        """
        tau_m = _check_seconds("tau_m", tau_m, positive=True)
        with self._lock:
            mean = self._mean()
            if mean == 0.0:
                return self._recommended
            ratio = mean / tau_m
            slack = 1.0 - 1e-9
            need = self._clamp(math.ceil(ratio * slack))
            if need > self._recommended:
                self._recommended = need
            else:
                keep = self._clamp(math.ceil(ratio / (1.0 - self._hysteresis) * slack))
                self._recommended = min(self._recommended, keep)
            return self._recommended

    def resize(self, n_workers: int, *, anchor: int | None = None) -> None:
        """Change the cycle to ``n_workers`` workers and re-space them (see the class docstring)."""
        new = _check_count("n_workers", n_workers)
        self._check_in_bounds(new)
        with self._lock:
            if anchor is not None:
                anchor = self._check_worker(anchor)
            old, mean = self._n, self._mean()
            if new > old:
                step = mean * (1.0 / old - 1.0 / new)
                for j in range(old):
                    self._delays[j] += (old - 1 - j) * step
                s = anchor if anchor is not None else self._last_done
                self._delays.extend([0.0] * (new - old))
                del self._start_delays[old:]
                for m in range(old, new):
                    if s is not None and s < old:
                        self._start_delays.append(self._delays[s] + (m - s) * mean / new)
                    else:
                        self._start_delays.append((m - old + 1) * mean / new)
            elif new < old:
                step = mean * (1.0 / new - 1.0 / old)
                self._delays = [self._delays[j] + j * step for j in range(new)]
                del self._start_delays[new:]
                if self._last_done is not None and self._last_done >= new:
                    self._last_done = None
            self._n = new
            self._high_water = max(self._high_water, old)
            self._recommended = new

    def __repr__(self) -> str:
        return (
            f"AutoScheduler(n_workers={self._n}, tau_mean_estimate={self._mean()!r}, "
            f"min_workers={self._min}, max_workers={self._max})"
        )


# --------------------------------------------------------------------------- factory

_REGISTRY: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (
        SequentialScheduler, UnstaggeredScheduler, MaxTimeScheduler, ExpectedTimeScheduler, AutoScheduler
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
    ValueError: unknown scheduler 'fastest': valid names are sequential, unstaggered, max_time, exp_time, auto
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
    index: int  # the worker's k-th loop (0-based)
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
    they were scheduled (first round: worker order). ``on_fire(scheduler,
    time, worker)`` runs after each submission and may ``resize`` an
    `AutoScheduler`: new workers start at that instant, retired ones stop at
    their next loop top. Returns the iterations in submission order.
    """
    if isinstance(n_actions, bool) or not isinstance(n_actions, numbers.Integral) or n_actions < 0:
        raise ValueError(f"n_actions must be an int >= 0, got {n_actions!r}")
    heap: list[tuple[float, int, int, int]] = []
    order = itertools.count()
    running: set[int] = set()
    loops: dict[int, int] = {}
    current: dict[int, tuple[int, float, float, float, float]] = {}
    out: list[Iteration] = []

    def spawn(now: float) -> None:
        for worker in range(scheduler.n_workers):
            if worker not in running:
                running.add(worker)
                heapq.heappush(heap, (now + scheduler.start_delay(worker), next(order), _TOP, worker))

    spawn(0.0)
    while heap and len(out) < n_actions:
        now, _, kind, worker = heapq.heappop(heap)
        if kind == _TOP:
            if worker >= scheduler.n_workers:
                running.discard(worker)
                continue
            delay = scheduler.take_delay(worker)
            k = loops.get(worker, 0)
            tau = float(latencies(worker, k))
            current[worker] = (k, now, delay, tau, 0.0)
            heapq.heappush(heap, (now + delay + tau, next(order), _DONE, worker))
        elif kind == _DONE:
            k, start, delay, tau, _ = current[worker]
            wait = scheduler.after_inference(worker, tau)
            current[worker] = (k, start, delay, tau, wait)
            heapq.heappush(heap, (now + wait, next(order), _FIRE, worker))
        else:
            k, start, delay, tau, wait = current.pop(worker)
            out.append(Iteration(worker, k, start, delay, tau, wait, now))
            loops[worker] = k + 1
            if len(out) == n_actions:
                break
            if on_fire is not None:
                on_fire(scheduler, now, worker)
                spawn(now)
            heapq.heappush(heap, (now, next(order), _TOP, worker))
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
