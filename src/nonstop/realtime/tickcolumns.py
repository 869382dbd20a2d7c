"""What one row of the tick log holds (docs/design.md §1.8): the columns, their dtypes, the action sources,
and `TickColumns`, the read interface every metric takes.

The schema sits apart from the storage (`nonstop.realtime.ticklog`) and from the arithmetic over it
(`nonstop.realtime.ticksummary`) so that both import it and neither imports the other's plumbing:
realtime → metrics would run against the layering of docs/architecture.md.

>>> COLUMNS["delay"][0], SOURCE_AGENT, SOURCE_DEFAULT
('i4', 1, 0)
>>> column_names(2)[-2:], column_dtype("seat1_delay"), seat_column("delay", 1)
(('seat1_superseded', 'seat1_stale'), 'i4', 'seat1_delay')
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final, Protocol

import numpy as np

__all__ = [
    "COLUMNS",
    "SEAT_COLUMNS",
    "SOURCE_AGENT",
    "SOURCE_DEFAULT",
    "TickColumns",
    "column_dtype",
    "column_names",
    "seat_column",
]

SOURCE_DEFAULT: Final = 0  # β acted: inaction
SOURCE_AGENT: Final = 1

#: column name -> (dtype on disk, meaning)
COLUMNS: Final[dict[str, tuple[str, str]]] = {
    "tick": ("i8", "tick index t; tick t is due at origin + t·τ_M"),
    "deadline": ("f8", "when the tick was due (s, clock time)"),
    "time": ("f8", "when the host processed it (s, clock time)"),
    "lateness": ("f8", "time - deadline (s)"),
    "source": ("i1", "1 agent action, 0 default behaviour β (inaction)"),
    "worker": ("i4", "worker that computed the applied action, -1 for β"),
    "delay": ("i4", "ticks from the observation the action was computed on to this tick, -1 for β"),
    "obs_tick": ("i8", "tick of the observation the action was computed on, -1 for β"),
    "action": ("f8", "applied action (Discrete index; NaN for vector actions)"),
    "tau_theta": ("f4", "inference time of the applied action (s), NaN for β"),
    "reward": ("f8", "reward of this tick's env step"),
    "episode": ("i4", "episode the tick belongs to"),
    "terminated": ("i1", "episode terminated at this tick"),
    "truncated": ("i1", "episode truncated at this tick"),
    "superseded": ("i2", "pending actions discarded in favour of a newer one"),
    "stale": ("i2", "actions dropped because they came from an earlier episode"),
    "step_s": ("f4", "wall time the env step took (s)"),
    "reset_s": ("f4", "wall time the automatic reset after this tick took (s), 0 if none"),
}

#: The columns each seat of a several-seat world has (docs/design.md §4b). The unprefixed columns belong to
#: the first seat; seat ``i ≥ 1`` has ``seat{i}_source``, ``seat{i}_worker``, ... after the shared
#: ones, so a one-seat log (and every log written before seats existed) has exactly `COLUMNS`.
SEAT_COLUMNS: Final = ("source", "worker", "delay", "obs_tick", "action", "tau_theta", "reward", "superseded", "stale")


def column_names(seats: int = 1) -> tuple[str, ...]:
    """Every column of a log of a world with ``seats`` seats, in row order.

    >>> column_names(2)[-2:]
    ('seat1_superseded', 'seat1_stale')
    """
    if not isinstance(seats, (int, np.integer)) or isinstance(seats, bool) or seats < 1:
        raise ValueError(f"seats must be a positive integer, got {seats!r}")
    return tuple(COLUMNS) + tuple(f"seat{i}_{c}" for i in range(1, int(seats)) for c in SEAT_COLUMNS)


def column_dtype(name: str) -> str:
    """The on-disk dtype of column ``name`` (a seat's column has its unprefixed twin's)."""
    if name.startswith("seat") and "_" in name:
        return COLUMNS[name.split("_", 1)[1]][0]
    return COLUMNS[name][0]


def seat_column(name: str, seat: int) -> str:
    """Where seat ``seat`` keeps column ``name``: the first seat and the shared columns unprefixed."""
    return name if seat == 0 or name not in SEAT_COLUMNS else f"seat{seat}_{name}"


class TickColumns(Protocol):
    """What the metrics read from a log: a `TickLog`, or one seat of it (`SeatLog`)."""

    tau_m: float
    meta: dict[str, Any]

    def __len__(self) -> int: ...

    def __getitem__(self, column: str) -> np.ndarray: ...

    def iter_chunks(self, columns: Iterable[str] | None = None) -> Iterator[dict[str, np.ndarray]]: ...
