"""How big the next batch is: the latency curve L(b) and the batch-size rule (docs/design.md §7). Pure
logic: numbers in, a batch size out; no clock, no thread, no torch.

A batching inference server (`nonstop.inference.batching`) serves the most urgent requests first
(earliest deadline first) and takes as many of them as it can while the most urgent one that can
still be met is met. How long a batch of ``b`` takes is its **latency curve** L(b):

* a model ``L(b) = a + c·b`` (`LatencyCurve.linear`): what the virtual clock runs on, and the
  shape measured on GPUs (a launch cost ``a``, a per-observation cost ``c``);
* a table ``b → seconds`` (`LatencyCurve.table`), interpolated between entries;
* and, on real hardware, re-measured as the server runs (`LatencyCurve.observe`): an exponential
  moving average per batch size of the measured times replaces the given value for that size.

A server whose forward pads each batch to a few sizes (CUDA graphs) declares them (`set_padding`): a
batch of 33 costs what the 64 it runs as costs, so L is kept and read at the padded size.

>>> curve = LatencyCurve.linear(0.002, 0.001)      # 2 ms + 1 ms per observation
>>> round(curve(1), 6), round(curve(8), 6)
(0.003, 0.01)
>>> choose_batch_size(0.0, [0.006, 0.006, 0.006, 0.006, 0.02], curve, max_batch=64)
4
>>> curve.observe(4, 0.004)                        # measured faster than the model said
>>> round(curve(4), 6), choose_batch_size(0.0, [0.0045] * 6, curve, max_batch=64)
(0.004, 4)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

__all__ = [
    "LatencyCurve",
    "choose_batch_size",
    "parse_curve",
    "CURVE_GRAMMAR",
    "steady_batch",
    "worlds_ceiling",
    "curve_table_spec",
    "read_curve_file",
]

CURVE_GRAMMAR: Final = (
    "linear:A,C (L(b) = A + C·b) | table:B=L,B=L,... (b observations take L; interpolated between entries), "
    "where A, C and L are durations with a unit s, ms or t (ticks), e.g. linear:2ms,0.25ms or table:1=2t,8=5t; "
    "or the path of a file holding one of these (`nonstop bench gpu --save-curve` writes one)"
)


def _duration(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


class LatencyCurve:
    """L(b): the seconds a batch of ``b`` observations takes, given and re-measured.

    The given curve is a model ``a + c·b`` or a table; between two table entries it is linear, below
    the smallest entry it is that entry's time, past the largest it goes on with the slope of the
    last two entries (never downwards; one entry: proportional to ``b``). `observe` records a
    measured time for one size: the first measurement replaces the given value, later ones are
    blended in with weight ``alpha`` (an exponential moving average). A size never measured takes the given value, but never less than
    the measured time of a smaller batch: a bigger batch is not assumed faster than one timed.

    >>> curve = LatencyCurve.table({1: 0.002, 8: 0.009})
    >>> [round(curve(b), 6) for b in (1, 4, 8, 16)]
    [0.002, 0.005, 0.009, 0.017]
    >>> curve.observe(2, 0.010); round(curve(4), 6)   # 4 is not measured: at least what 2 took
    0.01
    >>> LatencyCurve.linear(-1.0, 0.0)
    Traceback (most recent call last):
    ...
    ValueError: a must be a finite number of seconds >= 0, got -1.0
    """

    def __init__(self, given: Callable[[int], float], *, alpha: float = 0.2, describe: str = "custom") -> None:
        if not callable(given):
            raise TypeError(f"given must be a callable b -> seconds, got {type(given).__name__}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be a weight in (0, 1], got {alpha!r}")
        self._given: Final = given
        self.alpha: Final = float(alpha)
        self.description: Final = describe
        #: batch size -> (EMA of measured seconds, number of measurements)
        self.measured: dict[int, tuple[float, int]] = {}
        #: batch size -> EMA of the device's own seconds (CUDA events), beside the host's wall time
        self.device_measured: dict[int, float] = {}
        #: the sizes batches are padded to (`set_padding`); empty: none
        self.padding: tuple[int, ...] = ()

    def set_padding(self, sizes: Sequence[int]) -> None:
        """Batches run padded to the next of ``sizes``: L(b) is L of that size (past the largest, b itself).

        >>> curve = LatencyCurve.linear(0.001, 0.001); curve.set_padding((1, 4, 16))
        >>> round(curve(3), 6), round(curve(4), 6), round(curve(20), 6)
        (0.005, 0.005, 0.021)
        """
        if any(isinstance(s, bool) or int(s) != s or s < 1 for s in sizes):
            raise ValueError(f"padding sizes must be batch sizes >= 1, got {tuple(sizes)!r}")
        self.padding = tuple(sorted({int(s) for s in sizes}))

    def padded(self, b: int) -> int:
        """The size a batch of ``b`` runs as: the smallest padding size that holds it (b past them all)."""
        return min((s for s in self.padding if s >= b), default=b)

    @classmethod
    def linear(cls, a: float, c: float, *, alpha: float = 0.2) -> "LatencyCurve":
        """The model ``L(b) = a + c·b`` (seconds)."""
        a, c = _duration("a", a), _duration("c", c)
        return cls(lambda b: a + c * b, alpha=alpha, describe=f"linear:{a:g}s,{c:g}s")

    @classmethod
    def table(cls, table: Mapping[int, float], *, alpha: float = 0.2) -> "LatencyCurve":
        """An empirical table ``{b: seconds}`` (at least one entry, sizes >= 1)."""
        if not isinstance(table, Mapping) or not table:
            raise ValueError(f"a latency table needs at least one entry b -> seconds, got {table!r}")
        for b, s in table.items():
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise ValueError(f"a latency table's batch sizes are ints >= 1, got {b!r}")
            _duration(f"L({b})", s)
        sizes = sorted(table)
        times = [float(table[b]) for b in sizes]

        def given(b: int) -> float:
            if b <= sizes[0]:
                return times[0]
            for j in range(1, len(sizes)):
                if b <= sizes[j]:
                    lo, hi = sizes[j - 1], sizes[j]
                    return times[j - 1] + (times[j] - times[j - 1]) * (b - lo) / (hi - lo)
            if len(sizes) == 1:
                return times[0] * b / sizes[0]
            slope = max(
                0.0, (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
            )  # a noisy table never falls past its end
            return times[-1] + slope * (b - sizes[-1])

        return cls(given, alpha=alpha, describe="table:" + ",".join(f"{b}={s:g}s" for b, s in zip(sizes, times)))

    def __call__(self, b: int) -> float:
        """L(b) in seconds, for ``b >= 1``."""
        if b < 1:
            raise ValueError(f"a batch holds at least one observation, got b={b!r}")
        b = self.padded(b)
        hit = self.measured.get(b)
        if hit is not None:
            return hit[0]
        below = [s for s in tuple(self.measured) if s < b]  # a copy: the server's thread may be adding a size
        floor = self.measured[max(below)][0] if below else 0.0
        return max(float(self._given(b)), floor)

    def observe(self, b: int, seconds: float, device_seconds: float | None = None) -> None:
        """Record that a batch of ``b`` took ``seconds`` (host wall time, measured on the hardware), and the
        device's own ``device_seconds`` beside it where known; both at the padded size."""
        seconds = _duration("a measured batch time", seconds)
        b = self.padded(b)
        if device_seconds is not None:
            device_seconds = _duration("a measured device time", device_seconds)
            was = self.device_measured.get(b)
            self.device_measured[b] = device_seconds if was is None else was + self.alpha * (device_seconds - was)
        old = self.measured.get(b)
        if old is None:
            self.measured[b] = (seconds, 1)
        else:
            ema, n = old
            self.measured[b] = (ema + self.alpha * (seconds - ema), n + 1)

    def describe(self) -> dict[str, object]:
        """The given curve and the measured table, for a report."""
        return {
            "given": self.description,
            "measured_s": {b: round(ema, 9) for b, (ema, _) in sorted(self.measured.items())},
            "measurements": {b: n for b, (_, n) in sorted(self.measured.items())},
            "device_s": {b: round(s, 9) for b, s in sorted(self.device_measured.items())},
            "padding": list(self.padding),
        }

    def __repr__(self) -> str:
        return f"LatencyCurve({self.description}, measured sizes={sorted(self.measured)})"


def choose_batch_size(
    now: float, deadlines: Sequence[float], curve: Callable[[int], float], *, max_batch: int, tolerance: float = 0.0
) -> int:
    """The size of the next batch: its requests are the first ``b`` of ``deadlines`` (earliest first).

    ``b`` is the largest size (up to ``max_batch`` and the queue) whose batch, started ``now`` and done
    at ``now + L(b)``, still meets every deadline in it that could be met at all, i.e. by a batch of
    one (``now + L(1) <= deadline + tolerance``). Requests that cannot be met even alone are already
    late: they ride in EDF order and are answered late, and when none in reach can be met the batch is
    as large as allowed (the backlog clears fastest). Since deadlines are sorted, the binding one is
    the first that can still be met.

    >>> lin = lambda b: 1.0 + 0.5 * b                    # L(1) = 1.5, L(2) = 2.0, L(3) = 2.5
    >>> choose_batch_size(0.0, [2.0, 2.0, 9.0], lin, max_batch=8)   # L(3) misses 2.0, L(2) meets it
    2
    >>> choose_batch_size(0.0, [1.0, 2.0, 9.0], lin, max_batch=8)   # 1.0 is lost already; 2.0 binds
    2
    >>> choose_batch_size(0.0, [1.0, 1.0, 1.0], lin, max_batch=2)   # all lost: as many as allowed
    2
    """
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
    m = min(len(deadlines), max_batch)
    if m == 0:
        raise ValueError("no request to batch: deadlines is empty")
    alone = now + curve(1)
    first_met = next((j for j in range(m) if alone <= deadlines[j] + tolerance), m)
    if first_met == m:
        return m  # nothing in reach can be met: every answer is late, clear the most at once
    binding = deadlines[first_met] + tolerance
    for b in range(m, first_met, -1):  # b > first_met: the batch holds the binding request
        if now + curve(b) <= binding:
            return b
    return first_met  # > 0 here (with first_met == 0 the loop reached b = 1, which meets it): the lost ones alone


def parse_curve(spec: str, tick_hz: float | None = None) -> LatencyCurve:
    """A `LatencyCurve` from its command-line form (`CURVE_GRAMMAR`).

    >>> parse_curve("linear:2ms,0.5ms").describe()["given"]
    'linear:0.002s,0.0005s'
    >>> round(parse_curve("table:1=1t,8=4t", tick_hz=60)(8), 6)
    0.066667
    >>> parse_curve("quadratic:1,2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: bad latency curve 'quadratic:1,2': unknown kind 'quadratic'. Expected linear:A,C ...
    """
    import os

    from nonstop.policies.latency import _quantity

    if not isinstance(spec, str):
        raise TypeError(f"a latency curve spec is a string, got {type(spec).__name__}")
    if os.path.isfile(spec):
        return parse_curve(read_curve_file(spec), tick_hz=tick_hz)
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    bad = f"bad latency curve {spec!r}"
    if kind == "linear":
        parts = rest.split(",")
        if len(parts) != 2:
            raise ValueError(f"{bad}: linear takes A,C. Expected {CURVE_GRAMMAR}")
        return LatencyCurve.linear(_quantity(parts[0], "A", spec, tick_hz), _quantity(parts[1], "C", spec, tick_hz))
    if kind == "table":
        table: dict[int, float] = {}
        for entry in rest.split(","):
            b, eq, seconds = entry.partition("=")
            if not eq or not b.strip().isdigit() or int(b) < 1:
                raise ValueError(
                    f"{bad}: {entry.strip()!r} is not B=L with B a batch size >= 1. Expected {CURVE_GRAMMAR}"
                )
            table[int(b)] = _quantity(seconds, f"L({int(b)})", spec, tick_hz)
        return LatencyCurve.table(table)
    raise ValueError(f"{bad}: unknown kind {kind!r}. Expected {CURVE_GRAMMAR}")


def read_curve_file(path: str) -> str:
    """The curve spec a file holds: its first line that is not blank or a ``#`` comment."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"latency curve file {path} holds no curve: want one line such as table:1=2ms,8=5ms")
    if lines[0].split(":")[0].strip().lower() not in ("linear", "table"):
        raise ValueError(f"latency curve file {path}: {lines[0][:60]!r} is not a curve. Expected {CURVE_GRAMMAR}")
    return lines[0]


def curve_table_spec(table: Mapping[int, float]) -> str:
    """``table:b=Ls,...`` for measured seconds per batch size: what `parse_curve` reads back.

    >>> spec = curve_table_spec({8: 0.0138, 1: 0.0025}); spec
    'table:1=0.0025s,8=0.0138s'
    >>> round(parse_curve(spec)(8), 6)
    0.0138
    """
    if not table:
        raise ValueError("a measured curve needs at least one batch size")
    return "table:" + ",".join(f"{int(b)}={float(s):.6g}s" for b, s in sorted(table.items()))


def steady_batch(curve: Callable[[int], float], tau_m: float, worlds: int, max_batch: int) -> int | None:
    """The smallest batch ``b <= max_batch`` with ``L(b) <= b·τ_M/K``: a server that runs one batch at a
    time answers K requests a tick only if a batch of b takes at most the b/K ticks its requests arrive
    in; staggered lanes settle near this b. None: no batch keeps up with ``worlds`` worlds.

    >>> steady_batch(lambda b: 0.001 + 0.00025 * b, 1 / 60, 40, 64)   # L(6) = 2.5 ms = 6/40 of a tick
    6
    """
    if worlds < 1 or max_batch < 1:
        raise ValueError(f"worlds and max_batch must be >= 1, got {worlds}, {max_batch}")
    return next((b for b in range(1, max_batch + 1) if curve(b) <= b * tau_m / worlds * (1 + 1e-9)), None)


def worlds_ceiling(curve: Callable[[int], float], tau_m: float, max_batch: int) -> tuple[int, int]:
    """``(K, b)``: the most worlds, each asking once per tick τ_M, that one device with curve L keeps up
    with, ``K = max_b ⌊b·τ_M/L(b)⌋`` over ``b <= max_batch``, and the smallest batch that reaches it.
    With L(b) = A + C·b it is ``⌊max_batch·τ_M/L(max_batch)⌋``, below τ_M/C however large the batch.

    >>> worlds_ceiling(lambda b: 0.001 + 0.00025 * b, 1 / 60, 64)     # 64·τ_M/L(64) = 62.7; b = 54 gets 62 too
    (62, 54)
    """
    if not (tau_m > 0 and math.isfinite(tau_m)) or max_batch < 1:
        raise ValueError(f"tau_m must be a positive number of seconds and max_batch >= 1, got {tau_m}, {max_batch}")
    best, at = 0, 1
    for b in range(1, max_batch + 1):
        k = math.floor(b * tau_m / curve(b) * (1 + 1e-9)) if curve(b) > 0 else max_batch * 10**6
        if k > best:
            best, at = k, b
    return best, at
