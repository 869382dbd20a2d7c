"""A `BatchingServer`'s requests and answers, and how a batch's rows map to them and to a tick log
(`nonstop.inference.batching`).

A batch holds requests of one row (a lane's frame) and **blocks** (many lanes' rows, served whole):
`row_lanes` gives every row's lane, `per_ticket` cuts the forward's answer back into each request's
action. `applied_batch_sizes` joins a server's answers onto a tick log.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Answer", "Request", "applied_batch_sizes", "per_ticket", "row_lanes"]


@dataclass(frozen=True, slots=True)
class Request:
    """One lane's request. ``due`` is the clock time its action is due (the due tick's deadline)."""

    lane: int
    obs: np.ndarray  # by reference: the lane's, unwritten until answered (module docstring)
    obs_tick: int
    due_tick: int
    due: float
    submitted: float
    #: a block: ``obs`` holds ``len(lanes)`` rows, row i lane ``lanes[i]``'s, served in one batch (None: one row)
    lanes: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return 1 if self.lanes is None else len(self.lanes)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server did with one request: its action, the batch it rode in, and when."""

    lane: int
    action: Any  # a block's: one action a row, an array
    obs_tick: int
    due_tick: int
    submitted: float
    started: float  # its batch's start
    answered: float  # its batch's end
    batch_size: int
    late_by: float  # seconds past ``due`` (0.0: on time)

    @property
    def tau_theta(self) -> float:
        """The lane's τ_θ: queue + batch."""
        return self.answered - self.submitted

    @property
    def queue_s(self) -> float:
        return self.started - self.submitted


def row_lanes(batch: Sequence[Any]) -> list[int]:
    """Each row's lane, in the batch's order (a block's rows: its lanes)."""
    if all(ticket.request.lanes is None for ticket in batch):
        return [ticket.request.lane for ticket in batch]
    return [
        lane
        for ticket in batch
        for lane in ([ticket.request.lane] if ticket.request.lanes is None else ticket.request.lanes.tolist())
    ]


def per_ticket(batch: Sequence[Any], outcome: np.ndarray, action_shape: tuple[int, ...]) -> list[Any]:
    """Each ticket's action: a row's (a plain number, or a vector action's array), a block's rows as an array."""
    rows = list(outcome) if action_shape else outcome.tolist()
    if all(ticket.request.lanes is None for ticket in batch):
        return rows
    out, b = [], 0
    for ticket in batch:
        k = ticket.request.rows
        out.append(rows[b] if ticket.request.lanes is None else outcome[b : b + k])
        b += k
    return out


def applied_batch_sizes(
    worker: np.ndarray, obs_tick: np.ndarray, source: np.ndarray, answered_by: Mapping[Hashable, Mapping[int, int]]
) -> np.ndarray:
    """The batch size of the action applied at each tick of a tick log (its ``worker``, ``obs_tick`` and
    ``source`` columns), from a server's `BatchingServer.answered_by`; 0 where β acted or no tagged lane
    answered (a worker of its own: no batch).

    >>> applied_batch_sizes(np.array([0, 1, -1, 0]), np.array([4, 4, -1, 6]), np.array([1, 1, 0, 1]),
    ...                     {0: {4: 3, 6: 1}, 1: {4: 3}}).tolist()
    [3, 3, 0, 1]
    """
    out = np.zeros(len(worker), np.int32)
    for j in np.flatnonzero(np.asarray(source) == 1):
        out[j] = answered_by.get(int(worker[j]), {}).get(int(obs_tick[j]), 0)
    return out
