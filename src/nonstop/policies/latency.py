"""Latency policies: any policy plus a sampled inference time ``τ_θ``.

A `LatencyPolicy` returns its base policy's action with a *declared* latency
drawn from a `Latency` distribution; the inference worker then sleeps it (wall
clock) or jumps over it (virtual clock). Neither costs CPU, so a 2-core machine
can study a 1B-parameter model's ~10 s inference honestly, and an `Empirical`
distribution replays times measured on real hardware (``nonstop bench models --save``).

Every distribution has ``sample(rng)`` (seconds), ``mean`` (``τ̄_θ``, used by
Algorithm 2) and ``max_hint`` (a bound for ``τ_θmax``, used by Algorithm 1:
the maximum for constant and empirical latencies, the 99.9% quantile otherwise).

`parse_latency` reads the command-line form::

    constant:V | V | normal:MEAN,STD | lognormal:MEDIAN,SIGMA | empirical:PATH

>>> parse_latency("normal:50ms,5ms")
Normal(mu=0.05, std=0.005)
>>> parse_latency("3t", tick_hz=60)
Constant(seconds=0.05)
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Final

import gymnasium
import numpy as np

from nonstop.policies.base import Decision, Policy, _check_seed

__all__ = [
    "Latency",
    "Constant",
    "Normal",
    "LogNormal",
    "Empirical",
    "LatencyPolicy",
    "parse_latency",
    "LATENCY_GRAMMAR",
    "MAX_HINT_QUANTILE",
]

#: The quantile ``max_hint`` reports for unbounded distributions.
MAX_HINT_QUANTILE: Final = 0.999

LATENCY_GRAMMAR: Final = (
    "constant:V | V | normal:MEAN,STD | lognormal:MEDIAN,SIGMA | empirical:PATH, where V, MEAN, STD and "
    "MEDIAN are durations with a unit s, ms or t (ticks, needs tick_hz), e.g. 6t, 100ms or 0.1s (a bare number "
    "is an error, except 0), "
    "SIGMA is the unitless log-space spread, and PATH holds one seconds value per line"
)


def _seconds(name: str, value: object) -> float:
    """Validate a duration at the door: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return v


class Latency(ABC):
    """A distribution of inference times in seconds."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> float:
        """One inference time in seconds (>= 0)."""

    @property
    @abstractmethod
    def mean(self) -> float:
        """Expected inference time ``τ̄_θ`` in seconds."""

    @property
    @abstractmethod
    def max_hint(self) -> float:
        """A bound for ``τ_θmax``: the maximum, or the `MAX_HINT_QUANTILE` quantile if unbounded."""


@dataclass(frozen=True, slots=True)
class Constant(Latency):
    """Always ``seconds``.

    >>> Constant(0.25).sample(np.random.default_rng(0)), Constant(0.25).max_hint
    (0.25, 0.25)
    """

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _seconds("Constant latency", self.seconds))

    def sample(self, rng: np.random.Generator) -> float:
        return self.seconds

    @property
    def mean(self) -> float:
        return self.seconds

    @property
    def max_hint(self) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class Normal(Latency):
    """A normal distribution truncated at 0 (negative draws are redrawn, so
    ``mean`` is the truncated mean, a little above ``mu`` when ``std`` is large).

    >>> d = Normal(0.1, 0.01)
    >>> round(d.mean, 6), round(d.max_hint, 4)
    (0.1, 0.1309)
    >>> Normal(0.1, -1.0)
    Traceback (most recent call last):
    ...
    ValueError: Normal std must be a finite number of seconds >= 0, got -1.0
    """

    mu: float
    std: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", _seconds("Normal mean", self.mu))
        object.__setattr__(self, "std", _seconds("Normal std", self.std))

    def sample(self, rng: np.random.Generator) -> float:
        if self.std == 0.0:
            return self.mu
        while True:  # mu >= 0, so each draw is accepted with probability >= 1/2
            x = float(rng.normal(self.mu, self.std))
            if x >= 0.0:
                return x

    @property
    def mean(self) -> float:
        if self.std == 0.0:
            return self.mu
        alpha = -self.mu / self.std
        unit = NormalDist()
        return self.mu + self.std * unit.pdf(alpha) / (1.0 - unit.cdf(alpha))

    @property
    def max_hint(self) -> float:
        if self.std == 0.0:
            return self.mu
        dist = NormalDist(self.mu, self.std)
        below_zero = dist.cdf(0.0)
        return dist.inv_cdf(below_zero + MAX_HINT_QUANTILE * (1.0 - below_zero))


@dataclass(frozen=True, slots=True)
class LogNormal(Latency):
    """``median · exp(sigma · Z)``: a heavy right tail, like real inference times
    under contention. ``sigma`` is the (unitless) standard deviation of ``log τ``.

    >>> d = LogNormal(0.1, 0.5)
    >>> round(d.mean, 4), round(d.max_hint, 4)
    (0.1133, 0.4689)
    """

    median: float
    sigma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "median", _seconds("LogNormal median", self.median))
        sigma = self.sigma
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma < 0:
            raise ValueError(f"LogNormal sigma must be a finite number >= 0, got {sigma!r}")
        object.__setattr__(self, "sigma", float(sigma))

    def sample(self, rng: np.random.Generator) -> float:
        return self.median * math.exp(self.sigma * float(rng.standard_normal()))

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2.0)

    @property
    def max_hint(self) -> float:
        return self.median * math.exp(self.sigma * NormalDist().inv_cdf(MAX_HINT_QUANTILE))


@dataclass(frozen=True, slots=True)
class Empirical(Latency):
    """Resamples measured inference times uniformly (with replacement).

    >>> d = Empirical([0.01, 0.02, 0.03])
    >>> round(d.mean, 6), d.max_hint, d.sample(np.random.default_rng(0)) in (0.01, 0.02, 0.03)
    (0.02, 0.03, True)
    """

    samples: tuple[float, ...]
    source: str | None = field(default=None, compare=False)

    def __init__(self, samples: Iterable[float], source: str | None = None) -> None:
        values = tuple(_seconds("Empirical latency sample", v) for v in samples)
        if not values:
            raise ValueError(f"Empirical latency needs at least one sample{f' ({source})' if source else ''}")
        object.__setattr__(self, "samples", values)
        object.__setattr__(self, "source", source)

    @classmethod
    def from_file(cls, path: str | Path) -> Empirical:
        """Read one seconds value per line; blank lines and ``#`` comments are skipped.

        A line that does not parse raises ``ValueError`` naming the file and line number.
        """
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read empirical latency file {path}: {exc.strerror or exc}") from exc
        values: list[float] = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            body = line.split("#", 1)[0].strip()
            if not body:
                continue
            try:
                values.append(_seconds("latency", float(body)))
            except ValueError as exc:
                raise ValueError(
                    f"{path}:{lineno}: expected one latency in seconds (a finite number >= 0), got {body!r}"
                ) from exc
        if not values:
            raise ValueError(f"{path}: empirical latency file holds no samples (one seconds value per line)")
        return cls(values, source=str(path))

    def sample(self, rng: np.random.Generator) -> float:
        return self.samples[int(rng.integers(len(self.samples)))]

    @property
    def mean(self) -> float:
        return math.fsum(self.samples) / len(self.samples)

    @property
    def max_hint(self) -> float:
        return max(self.samples)

    def __repr__(self) -> str:
        where = f", source={self.source!r}" if self.source else ""
        return f"Empirical(n={len(self.samples)}, mean={self.mean:.6g}, max={self.max_hint:.6g}{where})"


class LatencyPolicy(Policy):
    """Wraps ``base`` and declares a sampled inference time with each decision.

    The declared latency is ``base``'s own (usually 0) plus one draw from
    ``latency``. ``seed(s)`` reseeds both the latency generator and ``base``
    (from independent streams of ``s``); constructed without ``seed``, it leaves ``base``'s own
    seeding alone, so wrapping a seeded policy keeps its decisions reproducible.

    >>> from gymnasium import spaces
    >>> from nonstop.policies.base import NoopPolicy
    >>> p = LatencyPolicy(NoopPolicy(spaces.Discrete(18)), Constant(0.5))
    >>> p.act(None)
    Decision(action=0, latency=0.5)
    >>> q = LatencyPolicy(NoopPolicy(spaces.Discrete(18)), LogNormal(0.1, 0.3), seed=7)
    >>> first = [q.act(None).latency for _ in range(3)]
    >>> q.seed(7); first == [q.act(None).latency for _ in range(3)]
    True
    """

    def __init__(self, base: Policy, latency: Latency, seed: int | None = None) -> None:
        if not isinstance(base, Policy):
            raise TypeError(f"base must be a nonstop Policy, got {type(base).__name__}")
        if not isinstance(latency, Latency):
            raise TypeError(f"latency must be a Latency (see parse_latency), got {type(latency).__name__}")
        self.base: Final = base
        self.latency: Final = latency
        self.action_space: gymnasium.Space = base.action_space
        self._rng = np.random.default_rng()
        if seed is not None:  # no seed: the base policy keeps its own seeding (a seeded base stays reproducible)
            self.seed(seed)

    def seed(self, seed: int | None) -> None:
        seed = _check_seed(seed)
        if seed is None:
            self._rng = np.random.default_rng()
            self.base.seed(None)
            return
        latency_seed, base_seed = np.random.SeedSequence(seed).generate_state(2)
        self._rng = np.random.default_rng(int(latency_seed))
        self.base.seed(int(base_seed))

    def act(self, obs: np.ndarray) -> Decision:
        decision = self.base.act(obs)
        return Decision(decision.action, decision.latency + self.latency.sample(self._rng))

    def __repr__(self) -> str:
        return f"LatencyPolicy(base={self.base!r}, latency={self.latency!r})"


_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan))\s*(ms|s|t)?\s*$", re.I)


def _quantity(text: str, what: str, spec: str, tick_hz: float | None) -> float:
    """``"50ms"`` → 0.05, ``"3t"`` → ``3 / tick_hz``, ``"0.2s"`` → 0.2, ``"0"`` → 0 (seconds).

    A bare number other than 0 is refused: ``--latency 6`` read as six seconds
    (360 ticks at 60 Hz) silently turns a study of a 6-tick model into 100 % inaction.
    """
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(
            f"bad latency spec {spec!r}: {what} {text.strip()!r} is not a number with unit s, ms or t. "
            f"Expected {LATENCY_GRAMMAR}"
        )
    value, unit = float(m.group(1)), (m.group(2) or "s").lower()
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"bad latency spec {spec!r}: {what} must be a finite duration >= 0, got {text.strip()!r}")
    if m.group(2) is None and value != 0:
        raise ValueError(
            f"bad latency spec {spec!r}: {what} {text.strip()!r} has no unit; say {m.group(1)}t (ticks), "
            f"{m.group(1)}ms or {m.group(1)}s. Expected {LATENCY_GRAMMAR}"
        )
    if unit == "ms":
        return value / 1000.0
    if unit == "t":
        if tick_hz is None:
            raise ValueError(
                f"bad latency spec {spec!r}: {what} {text.strip()!r} is in ticks, "
                f"which needs tick_hz (the environment's tick rate)"
            )
        return value / tick_hz
    return value


def parse_latency(spec: str, tick_hz: float | None = None) -> Latency:
    """Parse a latency from its command-line form (see `LATENCY_GRAMMAR`).

    >>> parse_latency("0.2s")
    Constant(seconds=0.2)
    >>> parse_latency("0")
    Constant(seconds=0.0)
    >>> parse_latency("6")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: bad latency spec '6': V '6' has no unit; say 6t (ticks), 6ms or 6s. Expected ...
    >>> parse_latency("constant:250ms")
    Constant(seconds=0.25)
    >>> parse_latency("lognormal:6t,0.5", tick_hz=60)
    LogNormal(median=0.1, sigma=0.5)
    >>> parse_latency("gamma:1,2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: bad latency spec 'gamma:1,2': unknown kind 'gamma'. Expected constant:V | V | ...
    """
    if not isinstance(spec, str):
        raise TypeError(f"latency spec must be a string, got {type(spec).__name__}")
    if tick_hz is not None and not (isinstance(tick_hz, (int, float)) and math.isfinite(tick_hz) and tick_hz > 0):
        raise ValueError(f"tick_hz must be a positive number of ticks per second, got {tick_hz!r}")
    kind, sep, rest = spec.strip().partition(":")
    if not sep:
        return Constant(_quantity(kind, "V", spec, tick_hz))
    kind = kind.strip().lower()

    def args(names: tuple[str, ...]) -> list[str]:
        parts = rest.split(",")
        if len(parts) != len(names) or any(not p.strip() for p in parts):
            raise ValueError(f"bad latency spec {spec!r}: {kind} takes {','.join(names)}. Expected {LATENCY_GRAMMAR}")
        return parts

    if kind == "constant":
        (v,) = args(("V",))
        return Constant(_quantity(v, "V", spec, tick_hz))
    if kind == "normal":
        mean, std = args(("MEAN", "STD"))
        return Normal(_quantity(mean, "MEAN", spec, tick_hz), _quantity(std, "STD", spec, tick_hz))
    if kind == "lognormal":
        median, sigma = args(("MEDIAN", "SIGMA"))
        try:
            sigma_value = float(sigma)
        except ValueError:
            raise ValueError(
                f"bad latency spec {spec!r}: SIGMA {sigma.strip()!r} must be a unitless number "
                f"(the spread of log-latency). Expected {LATENCY_GRAMMAR}"
            ) from None
        if not math.isfinite(sigma_value) or sigma_value < 0:
            raise ValueError(f"bad latency spec {spec!r}: SIGMA must be a finite number >= 0, got {sigma.strip()!r}")
        return LogNormal(_quantity(median, "MEDIAN", spec, tick_hz), sigma_value)
    if kind == "empirical":
        if not rest.strip():
            raise ValueError(f"bad latency spec {spec!r}: empirical needs a PATH. Expected {LATENCY_GRAMMAR}")
        return Empirical.from_file(rest.strip())
    raise ValueError(f"bad latency spec {spec!r}: unknown kind {kind!r}. Expected {LATENCY_GRAMMAR}")
