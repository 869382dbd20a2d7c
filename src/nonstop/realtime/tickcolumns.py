"""What one row of the tick log holds (docs/design.md §1.8): the columns, their dtypes, the action sources,
where each value sits in a row (`RowLayout`: the shared columns, then each per-seat quantity as one
block of seats), and `TickColumns`, the read interface every metric takes.

The schema sits apart from the storage (`nonstop.realtime.ticklog`) and from the arithmetic over it
(`nonstop.realtime.ticksummary`) so that both import it and neither imports the other's plumbing:
realtime → metrics would run against the layering of docs/architecture.md.

>>> COLUMNS["delay"][0], SOURCE_AGENT, SOURCE_DEFAULT
('i4', 1, 0)
>>> column_names(2)[-2:], column_dtype("seat1_delay"), seat_column("delay", 1)
(('seat1_superseded', 'seat1_stale'), 'i4', 'seat1_delay')
>>> RowLayout(3).block("delay"), RowLayout(3)["seat2_delay"], RowLayout(3).width
(slice(15, 18, None), 17, 36)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final, Protocol

import numpy as np

__all__ = [
    "COLUMNS",
    "SEAT_COLUMNS",
    "SHARED_COLUMNS",
    "RowLayout",
    "TickBlocks",
    "parse_seat_column",
    "SOURCE_ABSENT",
    "SOURCE_AGENT",
    "SOURCE_DEFAULT",
    "TickColumns",
    "column_dtype",
    "column_names",
    "seat_column",
]

SOURCE_DEFAULT: Final = 0  # β acted: inaction
SOURCE_AGENT: Final = 1
SOURCE_ABSENT: Final = -1  # the seat's agent has left the world (died): no action, no inaction

#: column name -> (dtype on disk, meaning)
COLUMNS: Final[dict[str, tuple[str, str]]] = {
    "tick": ("i8", "tick index t; tick t is due at origin + t·τ_M"),
    "deadline": ("f8", "when the tick was due (s, clock time)"),
    "time": ("f8", "when the host processed it (s, clock time)"),
    "lateness": ("f8", "time - deadline (s)"),
    "source": ("i1", "1 agent action, 0 default behaviour β (inaction), -1 the seat's agent has left (died)"),
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
    "stale": (
        "i2",
        "actions dropped because they came from an earlier episode (or reached a seat whose agent has left)",
    ),
    "step_s": ("f4", "wall time the env step took (s)"),
    "reset_s": ("f4", "wall time the automatic reset after this tick took (s), 0 if none"),
}

#: The columns each seat of a several-seat world has (docs/design.md §4b). The unprefixed columns belong to
#: the first seat; seat ``i ≥ 1`` has ``seat{i}_source``, ``seat{i}_worker``, ... after the shared
#: ones, so a one-seat log (and every log written before seats existed) has exactly `COLUMNS`.
SEAT_COLUMNS: Final = ("source", "worker", "delay", "obs_tick", "action", "tau_theta", "reward", "superseded", "stale")
#: The columns every seat shares: the tick, its timing, the episode and how it ended, the env's costs.
SHARED_COLUMNS: Final = tuple(name for name in COLUMNS if name not in SEAT_COLUMNS)


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


def parse_seat_column(name: str) -> tuple[str, int] | None:
    """``(quantity, seat)`` of a per-seat column name (``"delay"`` is seat 0's, ``"seat3_delay"``
    seat 3's), None for a shared column (or no column at all).

    >>> parse_seat_column("seat3_delay"), parse_seat_column("delay"), parse_seat_column("tick")
    (('delay', 3), ('delay', 0), None)
    """
    if name in SEAT_COLUMNS:
        return name, 0
    head, _, quantity = name.partition("_")
    if head.startswith("seat") and head[4:].isdigit() and quantity in SEAT_COLUMNS and head[4:] == str(int(head[4:])):
        return quantity, int(head[4:])
    return None


class RowLayout:
    """Where each value of a tick sits in a row of the log's float64 blocks, for ``seats`` seats: the
    `SHARED_COLUMNS` first, then each of the `SEAT_COLUMNS` as one block of ``seats`` values (seat 0
    first). So a per-seat quantity over a chunk is one (ticks × seats) slice of its rows, and one
    seat's tick values, quantity by quantity, are the (quantities × seats) array the host fills.
    A one-seat row is the 18 columns of `COLUMNS`, shared ones first.

    ``layout[name]`` is a column's place in the row: a shared column, a seat quantity under its
    unprefixed name (seat 0's), or ``seat{i}_<quantity>`` (seat i's, as the logs written before
    the blocks named it; the names are resolved on demand, never listed for every seat).
    """

    __slots__ = ("seats", "width", "_shared", "_first")

    def __init__(self, seats: int = 1) -> None:
        if not isinstance(seats, (int, np.integer)) or isinstance(seats, bool) or seats < 1:
            raise ValueError(f"seats must be a positive integer, got {seats!r}")
        self.seats = int(seats)
        self._shared = {name: i for i, name in enumerate(SHARED_COLUMNS)}
        #: where each quantity's block begins
        self._first = {q: len(SHARED_COLUMNS) + k * self.seats for k, q in enumerate(SEAT_COLUMNS)}
        self.width = len(SHARED_COLUMNS) + len(SEAT_COLUMNS) * self.seats

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def find(self, name: str) -> int | None:
        """``name``'s place in the row, or None if the log has no such column."""
        at = self._shared.get(name)
        if at is not None:
            return at
        parsed = parse_seat_column(name)
        if parsed is None or parsed[1] >= self.seats:
            return None
        return self._first[parsed[0]] + parsed[1]

    def __getitem__(self, name: str) -> int:
        at = self.find(name)
        if at is None:
            raise KeyError(self.unknown(name))
        return at

    def unknown(self, name: str) -> str:
        """The error for a column the log lacks, naming the ones it has."""
        seats = f"; a seat's own: seat{{i}}_<quantity>, i < {self.seats}" if self.seats > 1 else ""
        return f"no column {name!r}; columns are {', '.join(COLUMNS)}{seats}"

    def block(self, quantity: str) -> slice:
        """The ``seats`` places of per-seat ``quantity`` (one of `SEAT_COLUMNS`) in the row."""
        if quantity not in self._first:
            raise KeyError(f"no per-seat quantity {quantity!r}; they are {', '.join(SEAT_COLUMNS)}")
        first = self._first[quantity]
        return slice(first, first + self.seats)

    @property
    def names(self) -> tuple[str, ...]:
        """Every value of a row by name, in row order (`SHARED_COLUMNS`, then seat by seat within each quantity)."""
        return SHARED_COLUMNS + tuple(seat_column(q, i) for q in SEAT_COLUMNS for i in range(self.seats))


class TickColumns(Protocol):
    """What the metrics read from a log: a `TickLog`, or one seat of it (`SeatLog`)."""

    tau_m: float
    meta: dict[str, Any]

    def __len__(self) -> int: ...

    def __getitem__(self, column: str) -> np.ndarray: ...

    def iter_chunks(self, columns: Iterable[str] | None = None) -> Iterator[dict[str, np.ndarray]]: ...


class TickBlocks(TickColumns, Protocol):
    """A log read seat quantities at a time: each chunk's per-seat columns as (ticks × seats) blocks
    (what per-seat and per-team summaries fold over in one pass)."""

    seats: int

    @property
    def seat_names(self) -> list[str]: ...

    def iter_blocks(self, columns: Iterable[str]) -> Iterator[dict[str, np.ndarray]]: ...
