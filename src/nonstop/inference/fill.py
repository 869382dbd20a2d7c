"""`FillScheduler`, beyond the paper: each finished action is held to the first tick no other action
holds, unless it would be too stale there; how workers start and the staleness cap are chosen to
maximise the predicted return for this N_I, τ_θ distribution and cost of delay (docs/design.md §2).
Pure like the paper's rules (`nonstop.inference.rules`): timings and observed rewards in, waits
out, no clock read, no thread.

The prediction is `predict_fill_returns`, a small event loop of the same rule over τ_θ drawn from
the scheduler's own window (common random numbers for every cap), valued with Equation 4's
host-timed law: an action applied ``d`` ticks after its observation is worth ``p**(d − 1)`` of a
fresh one and β's tick nothing (`nonstop.envs.theory.delay_regret_per_step`). ``p`` (the paper's
p_minimax, the per-tick chance that a decision stays right) is given, or fitted to the rewards the
scheduler is shown (`fit_stay_probability`).

>>> taus = [4.0] * 50                                   # constant τ_θ = 4 ticks, 4 workers
>>> [round(r, 3) for r in predict_fill_returns(taus, 4, [4, 8], 0.9, ticks=400)]   # a cap of 4 keeps delay at 4
[0.729, 0.729]
>>> batches = {3: [0.80, 0.82, 0.81, 0.81] * 25, 4: [0.72, 0.74, 0.73, 0.73] * 25}   # r(d) ≈ 0.9**(d − 1)
>>> round(fit_stay_probability(batches), 2)
0.9
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nonstop.inference.checks import check_count, check_initial_estimate, check_seconds, check_time
from nonstop.inference.rules import TickGridScheduler

__all__ = ["FillScheduler", "predict_fill_returns", "fit_stay_probability", "candidate_caps"]

#: staleness caps tried, as multiples of the mean τ_θ (plus the window's largest τ_θ and one tick)
CAP_MULTIPLES = (0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0)
#: how a free worker starts (`FillScheduler`): at once on the newest observation, on the next tick's, or
#: on the first tick no other start has taken
STARTS = ("now", "tick", "grid")
#: the ways of starting and holding the scheduler chooses among: (starts, fixed hold)
PLANS = (("grid", True), ("grid", False), ("now", False), ("tick", False))
#: predicted returns this close count as a tie, won by the earlier plan of `PLANS` and the smaller cap
#: (less delay: the safer side where p is not known exactly)
TIE = 0.001
#: p before any reward says otherwise: a tick of delay costs 1 % of an action's worth
PRIOR_STAY = 0.99
#: the prior's spread on ln p: a tick of delay costing 0–4 % is plausible before any reward is seen
PRIOR_SD = 0.03
#: rewards per batch of one delay, and batches before that delay counts in the fit
BATCH = 32
MIN_BATCHES = 4
#: batches kept per delay: the evidence is the last 32 768 rewards at that delay (memory stays bounded)
MAX_BATCHES = 1024
#: β ticks before β's mean reward is the baseline (else 0)
MIN_BETA = 20
_EPS = 1e-9


def candidate_caps(taus_ticks: Sequence[float]) -> list[int]:
    """The staleness caps (whole ticks) `FillScheduler` predicts: `CAP_MULTIPLES` × the mean τ_θ and the
    largest τ_θ plus one tick, each rounded up, at least 1.

    >>> candidate_caps([4.0, 4.0])
    [3, 4, 5, 6, 7, 8, 10, 12, 16, 24]
    """
    taus = np.asarray(taus_ticks, dtype=np.float64)
    if not taus.size:
        raise ValueError("candidate_caps needs at least one τ_θ")
    mean = float(taus.mean())
    caps = {max(1, math.ceil(m * mean - _EPS)) for m in CAP_MULTIPLES}
    caps.add(max(1, math.ceil(float(taus.max()) - _EPS) + 1))
    return sorted(caps)


def predict_fill_returns(
    taus_ticks: Sequence[float],
    n_workers: int,
    caps: Sequence[float],
    p_minimax: float,
    *,
    ticks: int = 2000,
    seed: int = 0,
    starts: str = "now",
    fixed: bool = False,
) -> list[float]:
    """Predicted reward per tick of `FillScheduler`'s rule at each staleness cap in ``caps`` (ticks),
    relative to β (β's tick is worth 0, an action applied ``d`` ticks after its observation
    ``p_minimax**(d − 1)``).

    ``n_workers`` workers, first spread evenly over one mean τ_θ, each restarting at once on the newest
    observation (the next tick's if it just used this one), with τ_θ drawn from ``taus_ticks`` (ticks)
    by a generator seeded with ``seed``: the same draws for every cap. Finished actions are handled in
    the order they finish, as the pool does: the first tick at or after it that no held action owns,
    if at most ``cap`` ticks after its observation; else released at once (it keeps that tick only if
    no held action comes for it). The first ``3·max τ_θ + 10`` ticks are left out, then ``ticks``
    are counted.
    """
    taus = np.asarray(taus_ticks, dtype=np.float64)
    if not taus.size or not np.all(np.isfinite(taus)) or np.any(taus < 0):
        raise ValueError("taus_ticks must be a non-empty sequence of finite τ_θ >= 0 (ticks)")
    if starts not in STARTS:
        raise ValueError(f"starts must be one of {', '.join(STARTS)}, got {starts!r}")
    n = check_count("n_workers", n_workers)
    ticks = check_count("ticks", ticks)
    p = _check_stay(p_minimax)
    mean = float(taus.mean())
    warm = 3 * math.ceil(float(taus.max()) - _EPS) + 10
    total = warm + ticks
    # a worker starts at most once a tick, so total + 2 draws each are enough
    draws = np.random.default_rng(seed).choice(taus, size=(n, total + 2)).tolist()
    values = [p**d for d in range(total + 2)]  # worth of an action d + 1 ticks after its observation
    out = []
    for cap in caps:
        held, loose = _fill_ticks(cap, draws, mean, total, starts, fixed)
        got = 0.0
        for tick in range(warm + 1, total + 1):
            owner = held.get(tick, loose.get(tick))
            if owner is not None:
                got += values[tick - owner - 1]
        out.append(got / ticks)
    return out


def _fill_ticks(
    cap: float, draws: list[list[float]], mean: float, total: int, starts: str, fixed: bool
) -> tuple[dict[float, int], dict[float, int]]:
    """One cap's run of `predict_fill_returns`' workers (one row of ``draws`` each) to tick ``total``:
    the observation tick of the action held for each tick, and of the one released at once."""
    n = len(draws)
    held: dict[float, int] = {}  # tick -> observation tick of the action held for it (a fixed cap's may be fractional)
    loose: dict[float, int] = {}  # the same for actions released at once (a held one supersedes)
    events = []
    next_slot = 0
    for w in range(n):
        start = w * mean / n
        k = math.floor(start + _EPS)
        if starts == "grid":
            k = next_slot = max(next_slot, math.ceil(start - _EPS))
            start, next_slot = float(k), k + 1
        events.append((start + draws[w][0], w, 0, k))
    heapq.heapify(events)
    while events:
        done, w, i, k = heapq.heappop(events)
        first = math.ceil(done - _EPS)
        tick = max(first, k + cap) if fixed else first
        while tick in held:
            tick += 1
        if tick - k <= cap:
            held[tick] = k
        elif first not in held:
            loose[first] = k  # released at once: the later one wins the tick
        if starts == "grid":  # the first tick no other start has taken
            nxt = max(next_slot, math.ceil(done - _EPS))
            start, next_slot = float(nxt), nxt + 1
        elif starts == "tick":  # the next tick's observation, fresh
            nxt = math.ceil(done - _EPS)
            start = float(nxt)
        else:
            start, nxt = done, math.floor(done + _EPS)
        if nxt == k:  # this worker just used that observation: the next tick's
            nxt += 1
            start = float(nxt)
        if start < total:
            heapq.heappush(events, (start + draws[w][i + 1], w, i + 1, nxt))
    return held, loose


def fit_stay_probability(
    batches: Mapping[int, Sequence[float]],
    beta_mean: float = 0.0,
    *,
    prior: float = PRIOR_STAY,
    prior_sd: float = PRIOR_SD,
) -> float:
    """p such that an agent action applied ``d`` ticks after its observation earns ``β + A·p**(d − 1)``
    on average, from ``batches[d]``: the means of consecutive batches of `BATCH` rewards of actions
    applied at delay ``d``, in the order they came.

    ``ln p`` is the slope of ``ln(mean − β)`` against ``d``, fitted by weighted least squares, each delay
    weighted by the inverse variance of its log mean *estimated from the spread of its batch means*:
    neighbouring ticks' rewards are correlated (a state that moves makes every action in flight wrong
    at once), so the spread of single rewards would overstate what a few hundred ticks know. The slope
    is then combined with a normal prior on ``ln p`` (mean ``ln prior``, sd ``prior_sd``): a narrow range
    of delays, or few batches, leaves p near the prior. Delays with fewer than `MIN_BATCHES` batches, or
    a mean at or below β, are left out. Clamped to [0, 1] (later never costs less than sooner).

    >>> round(fit_stay_probability({}), 4)                                  # nothing seen: the prior
    0.99
    >>> flat = [1.0, 1.0, 1.0, 1.0, 1.0]                                     # every action right, whatever its delay
    >>> round(fit_stay_probability({5: flat, 9: flat}), 4)
    1.0
    """
    beta = float(beta_mean)
    xs, ys, ws = [], [], []
    for d, means in batches.items():
        m = np.asarray(means, dtype=np.float64)
        if m.size < MIN_BATCHES:
            continue
        gain = float(m.mean()) - beta
        if gain <= 0:
            continue
        var = max(float(m.var(ddof=1)) / m.size, (1e-3 * gain) ** 2)  # of the mean
        xs.append(float(d))
        ys.append(math.log(gain))
        ws.append(gain * gain / var)  # 1 / variance of the log mean
    prior_mean, prior_w = math.log(prior), 1.0 / prior_sd**2
    slope = prior_mean
    if len(set(xs)) >= 2:
        x, y, w = np.array(xs), np.array(ys), np.array(ws)
        xm = float(np.average(x, weights=w))
        sxx = float(np.sum(w * (x - xm) ** 2))
        fitted = float(np.sum(w * (x - xm) * (y - np.average(y, weights=w)))) / sxx
        slope = (prior_mean * prior_w + fitted * sxx) / (prior_w + sxx)  # 1/sxx: the slope's variance
    return min(1.0, max(0.0, math.exp(slope)))


def _check_stay(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"p_minimax must be a probability in [0, 1], got {p!r}")
    return float(p)


class FillScheduler(TickGridScheduler):
    """Workers that never wait; each finished action held to the first tick it can fill (beyond the paper).

    Why. Algorithm 2 frees its workers but submits each action the moment it is ready, so with
    variable τ_θ two actions land in one tick (the older is superseded) and the next tick gets none:
    at N_I = ⌈τ̄_θ/τ_M⌉ (lognormal σ = 0.5) a third of the ticks go to β. `QuantileHoldScheduler`
    removes that inaction by holding *every* action to the 99.9 % point of τ_θ, a delay of about
    4 × τ̄_θ, which a world that drifts pays for on every tick (Equation 4). Here neither:

    1. *Starts*, one of three ways (the plan, below): ``now`` — a worker that finishes starts again at
       once on the newest observation (the next tick's if it has just used this one), as Algorithm 2's
       do once its waits vanish: no worker idles, and two may work on one observation (the faster
       answer wins a tick); ``tick`` — it waits for the next tick's fresh observation; ``grid`` — it
       takes the first tick no other start has taken, as quantile_hold does (one start per tick).
    2. *Releases.* A finished action computed on the observation of tick ``k`` goes to the first tick
       ``T`` at or after it is ready that no other held action owns, and is held until then — if
       ``T − k`` is at most the cap ``D``. Otherwise it is released at once, where it keeps its tick
       only if no held action comes for it (the host applies the newest action submitted per tick).
       So an action that arrives in a crowded tick fills the next empty one instead of being lost,
       and no action is held more than ``D`` ticks after its observation. With a *fixed* hold every
       action is held to ``k + D`` itself: with ``grid`` starts that is quantile_hold with the hold
       chosen for return instead of at the 99.9 % point of τ_θ.
    3. *The plan and the cap.* ``D`` trades the two costs of Theorem 1: a larger one fills more ticks
       (less inaction) with older actions (more delay). Every so often (after 32, 128, 512, …
       inferences, then once per ``window``) the scheduler predicts the return of each plan of
       `PLANS` at each candidate cap (`candidate_caps`) with `predict_fill_returns`, for its N_I and
       the τ_θ in its window, and keeps the best (within `TIE` of it, the plan that comes earlier in
       `PLANS` — a fixed hold before a queue whose depth depends on its past — and the smaller cap). The cost of delay
       is ``p_minimax`` (given: a world's ``nonstop tolerance`` p̂), or else fitted
       (`fit_stay_probability`) to the rewards it is shown through `observe_reward` (slow: rewards of
       neighbouring ticks are correlated, so at p = 0.97 it takes some 10⁴ ticks to learn p to ±0.01);
       before either, `PRIOR_STAY`. ``plan`` and ``cap`` fix either instead.

    What it costs and where it helps is measured by ``nonstop bench return`` (the numbers are in
    docs/concepts.md, "Which scheduler", stated once there): on ``theory/delay-cycle`` at every N_I from
    ⌈τ̄_θ/τ_M⌉ to twice that its return is at or above both Algorithm 2's and quantile_hold's, most where
    N_I is tight; with a narrow spread (σ = 0.05) it ties quantile_hold once N_I exceeds the bound,
    choosing ``grid+fixed``. The bench holds it, without p, to the best *tuned* rival too (quantile_hold
    at its best quantile, Algorithm 2 with a fixed hold: plan ``now+fixed``, which `PLANS` does not tune). With constant τ_θ every action reaches a tick of its
    own ⌈τ_θ/τ_M⌉ after its observation, as with Algorithm 2.

    The scheduler reads no clock: ``take_delay(worker, now)`` is told the worker's time (and returns
    the wait to its start: 0 for ``now``), ``after_inference`` the τ_θ, and `InferencePool` binds
    ``period`` (τ_M) and ``origin`` (the tick grid). The prediction runs inside ``after_inference``
    (0.1–0.3 s for 4 plans × 12 caps at τ̄_θ = 20 ticks and 40 workers, rarely).

    >>> s = FillScheduler(2, period=1.0, origin=0.0, p_minimax=0.9, cap=6, plan="now")
    >>> s.take_delay(0, now=0.0), s.take_delay(1, now=0.0)   # both start on tick 0's observation
    (0.0, 0.0)
    >>> s.after_inference(0, 2.5), round(s.after_inference(1, 2.7), 9)   # ticks 3 and 4: the second waits a tick more
    (0.5, 1.3)
    >>> s.take_delay(0, now=2.5), s.after_inference(0, 9.0)   # observation 2, ready at 11.5: 10 ticks late
    (0.0, 0.0)
    >>> s.held, s.unheld
    (2, 1)
    """

    name = "fill"
    frees_workers = True
    learns_from_rewards = True

    def __init__(
        self,
        n_workers: int,
        *,
        period: float | None = None,
        origin: float | None = None,
        p_minimax: float | None = None,
        cap: int | None = None,
        plan: str | None = None,
        window: int = 4096,
        model_ticks: int = 2000,
        initial_estimate: float | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(n_workers)
        self._period = None if period is None else check_seconds("period", period, positive=True)
        self._origin = None if origin is None else check_time("origin", origin)
        self._stay_given = None if p_minimax is None else _check_stay(p_minimax)
        self._fixed_cap = None if cap is None else check_count("cap", cap)
        # "now+fixed" is not tuned among PLANS: it is Algorithm 2's starts with a fixed hold, a rival to measure
        plans = {f"{st}{'+fixed' if fx else ''}": (st, fx) for st, fx in (*PLANS, ("now", True))}
        if plan is not None and plan not in plans:
            raise ValueError(f"plan must be one of {', '.join(plans)}, got {plan!r}")
        self._plans = [plans[plan]] if plan is not None else list(PLANS)
        self._window = check_count("window", window)
        self._model_ticks = check_count("model_ticks", model_ticks)
        self._initial_estimate = check_initial_estimate(initial_estimate)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
        self._seed: int = int(seed)
        self._started: list[tuple[float, int] | None] = [None] * self._n  # (start, observation tick)
        self._free_at: list[float | None] = [None] * self._n
        self._held: set[int] = set()  # ticks an action is held for (none before the last release's first tick)
        self._floor: int = -(1 << 62)
        self._recent: deque[float] = deque(maxlen=self._window)  # τ_θ in periods
        self._seen: int = 0
        self._next_tune: int = 32
        self._cap: int | None = self._fixed_cap
        self._starts: str = self._plans[0][0] if plan is not None else "now"  # or "tick", "grid": tuned
        self._fixed: bool = self._plans[0][1] if plan is not None else False  # every action held to the cap
        self._next_slot: int = 0  # "grid": the first tick no start has taken
        self._batches: dict[int, deque[float]] = {}  # delay -> means of its last full batches of agent rewards
        self._partial: dict[int, list[float]] = {}  # delay -> [count, sum] of its batch being filled
        self._beta: list[float] = [0.0, 0.0]  # β ticks: count, reward sum
        self._stay_fitted: float | None = None
        self.held: int = 0  # actions held to a tick of their own
        self.unheld: int = 0  # actions released at once, past the cap
        self.tunes: int = 0
        self.choices: dict[str, int] = {}

    # ---- binding and read-outs
    @property
    def cap(self) -> int | None:
        """D: the most ticks after its observation an action is held to (None before the first tuning)."""
        with self._lock:
            return self._cap

    @property
    def plan(self) -> str:
        """How workers start (``now``, ``tick`` or ``grid``), ``+fixed`` where every action is held to the cap."""
        with self._lock:
            return f"{self._starts}{'+fixed' if self._fixed else ''}"

    @property
    def p_minimax(self) -> float:
        """The cost of delay in use: given, else fitted to the rewards shown, else `PRIOR_STAY`."""
        with self._lock:
            return self._stay()

    def report(self) -> dict[str, Any]:
        """The cost of delay in use, the plan and the cap (what the pool's report keeps)."""
        return {"p_minimax": self.p_minimax, "plan": self.plan, "cap": self.cap}

    def _stay(self) -> float:
        if self._stay_given is not None:
            return self._stay_given
        return PRIOR_STAY if self._stay_fitted is None else self._stay_fitted

    # ---- rewards
    def observe_reward(self, reward: float, delay_ticks: int | None) -> None:
        """One tick's reward: ``delay_ticks`` is the applied action's delay (ticks after its
        observation), None for a β tick. Used only to fit p when ``p_minimax`` was not given."""
        if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward!r}")
        r = float(reward)
        with self._lock:
            if delay_ticks is None:
                self._beta[0] += 1
                self._beta[1] += r
                return
            if isinstance(delay_ticks, bool) or not isinstance(delay_ticks, numbers.Integral) or delay_ticks < 1:
                raise ValueError(f"delay_ticks must be an int >= 1 (or None for β), got {delay_ticks!r}")
            d = int(delay_ticks)
            b = self._partial.setdefault(d, [0.0, 0.0])
            b[0] += 1
            b[1] += r
            if b[0] >= BATCH:
                self._batches.setdefault(d, deque(maxlen=MAX_BATCHES)).append(b[1] / b[0])
                b[0] = b[1] = 0.0

    def _fit(self) -> None:
        if self._stay_given is not None:
            return
        beta = self._beta[1] / self._beta[0] if self._beta[0] >= MIN_BETA else 0.0
        self._stay_fitted = fit_stay_probability(self._batches, beta)

    # ---- the rule
    def start_delay(self, worker: int) -> float:
        """Spread the first starts over one τ_θ (``initial_estimate``), else one tick apart."""
        with self._lock:
            w = self._check_worker(worker)
            spread = self._initial_estimate or self._require_period() * self._n
            return w * spread / self._n

    def take_delay(self, worker: int, now: float | None = None) -> float:
        with self._lock:
            w = self._check_worker(worker)
            period = self._require_period()
            free = self._free_at[w]
            at = check_time("now", now) if now is not None else (free if free is not None else (self._origin or 0.0))
            if self._origin is None:
                self._origin = at
            if self._starts != "now":
                tick = math.ceil((at - self._origin) / period - _EPS)
                if self._starts == "grid":
                    tick = max(tick, self._next_slot)
                    self._next_slot = tick + 1
                start = self._origin + tick * period
                self._started[w] = (start, tick)
                return max(0.0, start - at)
            self._started[w] = (at, math.floor((at - self._origin) / period + _EPS))
            return 0.0

    def after_inference(self, worker: int, tau_theta: float) -> float:
        tau = check_seconds("tau_theta", tau_theta)
        with self._lock:
            w = self._check_worker(worker)
            period = self._require_period()
            self._recent.append(tau / period)
            self._seen += 1
            due = (self._fixed_cap is None or len(self._plans) > 1) and self._seen >= self._next_tune
            inputs = self._tuning_inputs() if due else None
        # simulated off the lock: other workers' waits are not held up by it
        choice = self._choose(*inputs) if inputs is not None else None
        with self._lock:
            if choice is not None:
                self._apply(choice)
            started = self._started[w]
            if started is None:  # no start was recorded for this inference: release it at once
                return 0.0
            start, k = started
            origin = self._origin or 0.0
            done = start + tau
            self._started[w], self._free_at[w] = None, done
            first = math.ceil((done - origin) / period - _EPS)
            if first > self._floor:  # calls come in the order inferences end: ticks before are past
                self._floor = first
                if len(self._held) > 4 * self._n + 64:
                    self._held = {t for t in self._held if t >= first}
            cap = self._cap
            tick = max(first, k + cap) if self._fixed and cap is not None else first
            while tick in self._held:
                tick += 1
            if cap is None or tick - k <= cap:
                self._held.add(tick)
                self.held += 1
                return max(0.0, origin + tick * period - done)
            self.unheld += 1
            return 0.0

    def _tuning_inputs(self) -> tuple[list[float], list[int], float, int, list[tuple[str, bool]]]:
        """What one tuning simulates (taken under the lock); the next tuning is scheduled now, so no
        other worker starts the same one meanwhile."""
        self._fit()
        taus = list(self._recent)
        caps = candidate_caps(taus) if self._fixed_cap is None else [self._fixed_cap]
        self._next_tune = self._seen + min(3 * self._seen, self._window)
        seed = self._seed + self.tunes
        self.tunes += 1
        return taus, caps, self._stay(), seed, list(self._plans)

    def _choose(
        self, taus: list[float], caps: list[int], stay: float, seed: int, plans: list[tuple[str, bool]]
    ) -> tuple[str, bool, int]:
        """The start plan and cap with the best predicted return (pure: it reads no state of the scheduler)."""
        options: list[tuple[float, str, bool, int]] = []
        for starts, fixed in plans:
            predicted = predict_fill_returns(
                taus, self._n, caps, stay, ticks=self._model_ticks, seed=seed, starts=starts, fixed=fixed
            )
            best = max(predicted)
            i = next(j for j, v in enumerate(predicted) if v >= best - TIE)  # within TIE: the smaller cap
            options.append((best, starts, fixed, caps[i]))
        top = max(o[0] for o in options)
        # the first plan within TIE of the best: a fixed hold before a queue whose depth depends on its past
        _, starts, fixed, cap = next(o for o in options if o[0] >= top - TIE)
        return starts, fixed, cap

    def _apply(self, choice: tuple[str, bool, int]) -> None:
        self._starts, self._fixed, self._cap = choice
        plan = f"{self._starts}{'+fixed' if self._fixed else ''}"
        self.choices[plan] = self.choices.get(plan, 0) + 1  # how often each plan was chosen

    def __repr__(self) -> str:
        return (
            f"FillScheduler(n_workers={self._n}, period={self._period!r}, cap={self._cap!r}, "
            f"p_minimax={self._stay()!r})"
        )
