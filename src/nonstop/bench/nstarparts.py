"""Latency and start arithmetic of ``nonstop bench nstar`` (pure: numbers in, numbers out): the
ε-greedy inference time of Figure 7, the in-flight count quantile_hold aims at, and how Algorithms 1
and 2 start (`parse_starts`, `initial_estimate`: the authors' declared maximum or a cold start)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, TypedDict

import numpy as np

__all__ = [
    "make_latency",
    "egreedy_latency",
    "in_flight_workers",
    "workers_for_inaction",
    "parse_starts",
    "parse_epsilons",
    "parse_jitters",
    "initial_estimate",
    "start_label",
    "STARTED",
    "InFlight",
]

#: an ε-greedy policy's random action, as a fraction of its forward pass (Figure 7: "sampling random actions is very fast")
RANDOM_ACTION_FRACTION = 0.01
#: the log-spread of a forward pass's time (ε = 0: "the variance in T_θ is very small")
FORWARD_JITTER = 0.01
#: workers a quantile_hold start may find busy, at this level (the AutoScheduler's default)
WORKER_QUANTILE = 0.999


def make_latency(kind: str, mean_s: float, sigma: float, empirical: Any = None, *, jitter: float = 0.01) -> Any:
    """The `Latency` of ``kind`` with mean ``mean_s`` seconds and spread ``sigma`` (``jitter``: an
    ε-greedy forward pass's log-spread)."""
    from nonstop.policies import Constant, Empirical, LogNormal, Normal

    if kind == "constant":
        return Constant(mean_s)
    if kind == "normal":
        return Normal(mean_s, sigma * mean_s)
    if kind == "lognormal":
        return LogNormal(mean_s / math.exp(sigma**2 / 2), sigma)
    if kind == "egreedy":
        return egreedy_latency(mean_s, sigma, jitter=jitter)
    scale = mean_s / empirical.mean  # the measured shape, at the requested mean
    return Empirical([x * scale for x in empirical.samples], source=empirical.source)


def egreedy_latency(
    mean_s: float, epsilon: float, *, draws: int = 20_000, seed: int = 0, jitter: float = FORWARD_JITTER
) -> Any:
    """An ε-greedy policy's inference time, as the paper's Figure 7 has it: w.p. ``epsilon`` a random
    action (`RANDOM_ACTION_FRACTION` of a forward pass), else the forward pass (``jitter``: its lognormal
    log-spread, default `FORWARD_JITTER`; at ε = 0 "the variance in T_θ is very small"); scaled so that the
    mean is ``mean_s``.

    >>> d = egreedy_latency(0.1, 0.5)
    >>> round(d.mean, 6), round(min(d.samples) / max(d.samples), 3) < 0.02
    (0.1, True)
    """
    from nonstop.policies import Empirical

    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"--sigma is ε for --latency egreedy: numbers in [0, 1), got {epsilon!r}")
    rng = np.random.default_rng(seed)
    if not (0.0 <= jitter < 1.0 and math.isfinite(jitter)):
        raise ValueError(f"--jitter is the forward pass's log-spread: numbers in [0, 1), got {jitter!r}")
    forward = np.exp(rng.normal(0.0, jitter, draws))
    draws_ = np.where(rng.random(draws) < epsilon, RANDOM_ACTION_FRACTION * forward, forward)
    return Empirical((draws_ * (mean_s / draws_.mean())).tolist(), source=f"egreedy eps={epsilon:g} jitter={jitter:g}")


#: the schedulers a start (``--tau-theta-max``) applies to: Algorithms 1 and 2
STARTED = ("max_time", "exp_time")


def parse_starts(text: str) -> list[str | float]:
    """``--tau-theta-max``: each of ``declared``, ``cold`` or a number of ticks (>= 0).

    >>> parse_starts("declared,cold,7.5")
    ['declared', 'cold', 7.5]
    """
    out: list[str | float] = []
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        if part in ("declared", "cold"):
            out.append(part)
            continue
        try:
            ticks = float(part)
        except ValueError:
            ticks = math.nan
        if not (ticks >= 0 and math.isfinite(ticks)):
            raise ValueError(f"--tau-theta-max takes declared, cold or ticks >= 0, comma-separated, got {text!r}")
        out.append(ticks)
    if not out:
        raise ValueError(f"--tau-theta-max takes declared, cold or ticks >= 0, comma-separated, got {text!r}")
    return out


def initial_estimate(name: str, start: str | float | None, latency: Any, tau_m: float) -> float | None:
    """The estimate Algorithm 1 or 2 starts from (seconds; it staggers the first inferences by
    i·estimate/N), for ``start`` (`parse_starts`). The authors' start (``declared``, their scripts'
    ``t_theta_max``): Algorithm 1 from the latency's declared maximum, Algorithm 2 from its declared
    mean. ``cold``: None, from 0 with no stagger. Other schedulers take none.

    >>> from nonstop.policies import Empirical
    >>> lat = Empirical([0.1, 0.3])
    >>> initial_estimate("max_time", "declared", lat, 0.1), initial_estimate("exp_time", "declared", lat, 0.1)
    (0.3, 0.2)
    >>> initial_estimate("max_time", "cold", lat, 0.1), initial_estimate("max_time", 5.0, lat, 0.1)
    (None, 0.5)
    """
    if name not in STARTED or start is None or start == "cold":
        return None
    if start == "declared":
        return float(latency.max_hint if name == "max_time" else latency.mean)
    return float(start) * tau_m if float(start) > 0 else None


def start_label(name: str, start: str | float | None) -> str | None:
    """A row's start, as the table shows it."""
    if name not in STARTED or start is None:
        return None
    if start == "declared":
        return "authors (declared)"
    return "cold (0)" if start == "cold" or float(start) == 0 else f"{float(start):g} ticks"


class InFlight(TypedDict):
    """`in_flight_workers`' answer."""

    mean: float  # E[B]
    sd: float  # sd[B]
    target: int  # ⌈E[B] + z·sd[B]⌉ workers


def parse_jitters(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0.0 <= v < 1.0 for v in values):
        raise ValueError(f"--jitter is the forward pass's log-spread: comma-separated numbers in [0, 1), got {text!r}")
    return values


def parse_epsilons(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0.0 <= v < 1.0 for v in values):
        raise ValueError(f"--sigma is ε for --latency egreedy: comma-separated numbers in [0, 1), got {text!r}")
    return values


def in_flight_workers(latency: Any, tau_m: float, *, draws: int = 200_000, seed: int = 0) -> InFlight:
    """E[B], sd[B] and ⌈E[B] + z·sd[B]⌉ for B = Σ_j 1[τ_j > j·τ_M], the inferences in flight at a
    start when one starts per tick (see `nonstop.inference.schedulers.AutoScheduler`)."""
    rng = np.random.default_rng(seed)
    p = _still_running(np.array([latency.sample(rng) for _ in range(draws)]), tau_m)
    mean, sd = float(p.sum()), float(np.sqrt((p * (1 - p)).sum()))
    z = NormalDist().inv_cdf(WORKER_QUANTILE)
    return {"mean": mean, "sd": sd, "target": max(1, math.ceil(mean + z * sd - 1e-9))}


def _still_running(taus_s: np.ndarray, tau_m: float) -> np.ndarray:
    """``p[j]`` = P(τ > j·τ_M), j = 0, 1, …: the chance that the inference started j ticks before a
    start is still running at it (j = 0: that start's own), for τ drawn from ``taus_s``."""
    taus = np.sort(np.asarray(taus_s, dtype=float))
    edges = np.arange(math.ceil(taus[-1] / tau_m - 1e-9) + 1) * tau_m * (1.0 + 1e-9)
    return (taus.size - np.searchsorted(taus, edges, side="right")) / taus.size


def workers_for_inaction(taus_s: Any, tau_m: float, max_inaction: float) -> int:
    """The fewest workers N for which a start finds every worker busy at most ``max_inaction`` of
    the time, with one start per tick and each τ drawn from ``taus_s`` (seconds): N with
    P(B > N) ≤ ``max_inaction``, B = Σ_j 1[τ_j > j·τ_M] the inferences in flight at a start, computed
    exactly (B is a sum of independent Bernoullis). A start that finds all N busy is a tick without
    an action, so this is N_I* at the bench's own inaction threshold, for the τ_θ its workers took.

    >>> tau_m = 1 / 60
    >>> workers_for_inaction([70.5 * tau_m] * 99, tau_m, 0.005)  # always 71 in flight
    71
    >>> taus = [70.5 * tau_m] * 99 + [71.5 * tau_m]  # 1 % of them past 71 ticks
    >>> workers_for_inaction(taus, tau_m, 0.005), workers_for_inaction(taus, tau_m, 0.02)
    (72, 71)
    """
    if not 0.0 <= max_inaction < 1.0:
        raise ValueError(f"max_inaction must be in [0, 1), got {max_inaction!r}")
    dist = np.array([1.0])  # P(B = n), built one Bernoulli at a time
    for p in _still_running(np.asarray(taus_s, dtype=float), tau_m):
        dist = np.convolve(dist, [1.0 - p, p])
    above = 1.0 - np.cumsum(dist)  # above[n] = P(B > n)
    return max(1, int(np.argmax(above <= max_inaction + 1e-12)))
