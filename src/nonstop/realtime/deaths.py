"""Every part of a run that dies says so: one line on stderr at once, and a row in the run's summary.

A learner or an inference worker may die (a process killed, a model that raises, a node lost); its
supervisor restarts it while its `nonstop.realtime.lifeline.RestartBudget` allows. Whichever the
backend (a thread, a process, a Ray actor, a timed process of the virtual clock), each death is a
`Death`: which part, where it ran, the cause, whether it was restarted and what the budget has left.
The supervisor tells it (`tell`: stderr) when it sees it, at the cadence it already polls at, and
keeps it; the run writes every part's deaths into ``summary.json`` under ``deaths``.

>>> death = Death("learner 1", "pid 4242", exit_cause(-9), restarted=True, budget_left=4,
...               budget="5 restarts within 60 s", time=2.5)
>>> death.line()
'learner 1 (pid 4242) died: killed by SIGKILL; restarted (4 of 5 restarts within 60 s left)'
>>> Death("inference worker 0", in_this_process(), "RuntimeError: boom", restarted=False,
...       why_not="restarts are off").line().endswith("not restarted (restarts are off)")
True
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Death", "exit_cause", "in_this_process", "tell"]


@dataclass(frozen=True)
class Death:
    """One death of one part of a run, as its supervisor saw it."""

    #: which part: ``"learner 1"``, ``"inference worker 0"``, ``"Ray learner 2"``
    part: str
    #: where it ran: ``"pid 4242"``, ``"a thread of pid 4242"``, ``"pid 4242 on node 1a2b3c4d"``
    where: str
    #: what ended it: ``"killed by SIGKILL"``, ``"exit code 1"``, ``"RuntimeError: boom"``
    cause: str
    restarted: bool
    #: restarts the part's budget still allows within its window after this one (None: no such budget)
    budget_left: int | None = None
    #: the budget, in words (`RestartBudget.describe`), when there is one
    budget: str = ""
    #: why it was not restarted (restarts off, the budget spent), when it was not
    why_not: str = ""
    #: when, on the run's clock (virtual or wall seconds)
    time: float = 0.0

    @classmethod
    def under(cls, budget: Any, part: str, where: str, cause: str, *, why_not: str, now: float) -> "Death":
        """A death of a part a `RestartBudget` restarts: restarted unless ``why_not`` says why not, with the
        budget's restarts left at ``now``."""
        return cls(
            part,
            where,
            cause,
            restarted=not why_not,
            budget_left=budget.left(now),
            budget=budget.describe(),
            why_not=why_not,
            time=now,
        )

    def line(self) -> str:
        """The one line that tells this death (without the ``nonstop:`` prefix `tell` adds)."""
        head = f"{self.part} ({self.where}) died: {self.cause}"
        if not self.restarted:
            return f"{head}; not restarted ({self.why_not or 'its supervisor gave up'})"
        if self.budget_left is None:
            return f"{head}; restarted"
        return f"{head}; restarted ({self.budget_left} of {self.budget} left)"

    def as_dict(self) -> dict[str, Any]:
        """The summary's row: every field, the time rounded to microseconds."""
        return {**asdict(self), "time": round(self.time, 6)}


def exit_cause(exitcode: int | None) -> str:
    """A process's end in words, from its exit code (multiprocessing's: minus the signal that killed it).

    >>> exit_cause(-15), exit_cause(1), exit_cause(None)
    ('killed by SIGTERM', 'exit code 1', 'ended (no exit code yet)')
    """
    if exitcode is None:
        return "ended (no exit code yet)"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def in_this_process() -> str:
    """Where a part that is a thread (or a timed process of the virtual clock) of this process ran."""
    return f"a thread of pid {os.getpid()}"


def tell(line: str) -> None:
    """Say ``line`` on stderr at once (a death is news the moment it happens, not at the run's end)."""
    print(f"nonstop: {line}", file=sys.stderr, flush=True)
