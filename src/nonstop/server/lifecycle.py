"""A server session's lifecycle, an explicit state machine (`Lifecycle`, `TRANSITIONS`)::

    created ──► starting ──► running ──► ended ──► closed
       └───────────┴────────────┴──────────┘ (start failure, timeout, connection lost, close, error)

*ended* means the world stopped ticking and its replay is being finalized; *closed* means every
resource (env, shared memory) is released. Every path into *ended* goes through
`nonstop.server.sessions.SessionManager.end`, which always finishes in *closed*.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

__all__ = ["Lifecycle", "TRANSITIONS", "LIVE"]


class Lifecycle(str, Enum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    ENDED = "ended"
    CLOSED = "closed"


#: Allowed transitions; anything else is a bug and raises.
TRANSITIONS: Final = {
    Lifecycle.CREATED: {Lifecycle.STARTING, Lifecycle.ENDED},
    Lifecycle.STARTING: {Lifecycle.RUNNING, Lifecycle.ENDED},
    Lifecycle.RUNNING: {Lifecycle.ENDED},
    Lifecycle.ENDED: {Lifecycle.CLOSED},
    Lifecycle.CLOSED: set(),
}
LIVE: Final = frozenset({Lifecycle.CREATED, Lifecycle.STARTING, Lifecycle.RUNNING})
