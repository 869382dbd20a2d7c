"""`QuantileHoldScheduler`, beyond the paper: one inference started per tick, each finished
*action* held to a quantile of τ_θ, so a worker is busy only for its τ_θ (the class docstring says
why and what it costs). Pure like the paper's rules (`nonstop.inference.rules`): timings in, waits
out, no clock read.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections import deque
from typing import Any

from nonstop.inference.checks import check_count, check_fraction, check_initial_estimate, check_seconds, check_time
from nonstop.inference.rules import TickGridScheduler

__all__ = ["QuantileHoldScheduler"]

#: grid gaps `QuantileHoldScheduler` remembers for copies (a bound on memory, far above any hold)
_MAX_GAPS = 1 << 16


class QuantileHoldScheduler(TickGridScheduler):
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

    >>> s = QuantileHoldScheduler(3, period=1.0, initial_estimate=2.0)
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
        self._period = None if period is None else check_seconds("period", period, positive=True)
        self._quantile = check_fraction("quantile", quantile, closed_low=False)
        self._window = check_count("window", window)
        self._hold_hysteresis = check_fraction("hold_hysteresis", hold_hysteresis)
        self._initial_estimate = check_initial_estimate(initial_estimate)
        self._origin = None if origin is None else check_time("origin", origin)
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
                now = check_time("now", now)
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
        tau = check_seconds("tau_theta", tau_theta)
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

        >>> s = QuantileHoldScheduler(4, period=1.0, initial_estimate=10.0)
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
