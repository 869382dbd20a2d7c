"""One seat's view of a several-seat tick log (`SeatLog`): the seat's own columns under the unprefixed
names, so every metric computed from a log works per seat. It reads the log only through `TickBlocks`
and imports nothing of its storage (`nonstop.realtime.ticklog` builds it in `TickLog.seat`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from nonstop.realtime.tickcolumns import COLUMNS, TickBlocks, seat_column
from nonstop.realtime.ticksummary import summarize

__all__ = ["SeatLog"]


class SeatLog:
    """One seat's view of a several-seat `TickLog`: the same read interface (``log[column]``,
    `iter_chunks`, `summary`, ``meta`` with that seat's queue counters), the seat's own columns
    under the unprefixed names. Read-only, loads nothing itself.

    >>> from nonstop.realtime.ticklog import TickLog, SEAT_COLUMNS, SOURCE_AGENT, SOURCE_DEFAULT
    >>> log = TickLog(1 / 60, seats=2)
    >>> values = np.zeros((len(SEAT_COLUMNS), 2))
    >>> values[SEAT_COLUMNS.index("source")] = (SOURCE_DEFAULT, SOURCE_AGENT)
    >>> values[SEAT_COLUMNS.index("delay")] = (-1, 2)
    >>> log.append_tick(1, 1 / 60, 1 / 60, episode=0, terminated=False, truncated=False, step_s=0.0,
    ...                 seats=values.reshape(-1))
    >>> log.seat(1)["delay"].tolist(), log.seat(0)["delay"].tolist()
    ([2], [-1])
    """

    def __init__(self, log: TickBlocks, seat: int) -> None:
        self.log, self.index = log, seat
        self.tau_m = log.tau_m
        self.meta = dict(log.meta)
        queues = log.meta.get("queues")
        if isinstance(queues, list) and len(queues) == log.seats:
            self.meta["queue"] = queues[seat]
        self.name = log.seat_names[seat]

    def __len__(self) -> int:
        return len(self.log)

    def iter_chunks(self, columns: Iterable[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        names = list(COLUMNS if columns is None else columns)
        real = [seat_column(name, self.index) for name in names]
        for chunk in self.log.iter_chunks(real):
            yield {name: chunk[r] for name, r in zip(names, real)}

    def __getitem__(self, column: str) -> np.ndarray:
        return self.log[seat_column(column, self.index)]

    def summary(self, **kwargs: Any) -> dict[str, Any]:
        """This seat's `summarize`, with ``seat``: its name."""
        out = summarize(self, **kwargs)
        out["seat"] = self.name
        return out
