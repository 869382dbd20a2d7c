"""The server's settings: the edge's (`EdgeSettings`: what `create_app`, `serve` and `ServerThread`
share) and the session manager's (`ManagerSettings`), each one dataclass checked at construction.

The app's options used to travel as ten keyword arguments through three functions; they are one
`EdgeSettings` now, checked once at construction. `split_options` sorts a caller's keywords into the
edge's and the session manager's (the rest), so ``create_app(token=..., envs=[...])`` still reads as
one call.

>>> edge, rest = split_options({"token": "a-long-token", "envs": ["theory/inaction"]})
>>> edge.token is not None, rest
(True, {'envs': ['theory/inaction']})
>>> EdgeSettings(max_connections=0)
Traceback (most recent call last):
...
ValueError: max_connections must be a positive integer, got 0
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nonstop.realtime.hostproc import HOST_SCHED
from nonstop.server.guard import is_loopback

__all__ = ["EdgeSettings", "ManagerSettings", "split_options"]


@dataclass(frozen=True)
class EdgeSettings:
    """What the HTTP and WebSocket edge enforces, whatever the routes.

    token: every request needs ``Authorization: Bearer TOKEN`` (None: none needed; loopback only,
        unless ``insecure_no_token``).
    start_timeout: seconds a session's start may take before its request is refused.
    connect_timeout: a WebSocket that has started no session this long after it opened (or whose
        session ended that long ago) is closed (code 1008).
    max_connections: open WebSocket connections allowed; one remote address may hold an eighth.
    host: the address the server is served on (a non-loopback one needs a token).
    allow_hosts, allow_origins: added to the `EdgePolicy`'s own (``--allow-host``, ``--allow-origin``).
    insecure_no_token: serve a non-loopback address without a token, knowingly.
    """

    token: str | None = None
    start_timeout: float = 30.0
    connect_timeout: float = 30.0
    max_connections: int = 256
    host: str = "127.0.0.1"
    allow_hosts: Iterable[str] = ()
    allow_origins: Iterable[str] = ()
    insecure_no_token: bool = False

    def __post_init__(self) -> None:
        token, connect_timeout, max_connections = self.token, self.connect_timeout, self.max_connections
        if token is not None and (not isinstance(token, str) or len(token) < 8):
            raise ValueError("token must be a string of at least 8 characters")
        if (
            isinstance(connect_timeout, bool)
            or not isinstance(connect_timeout, (int, float))
            or not connect_timeout > 0
        ):
            raise ValueError(f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}")
        if not isinstance(max_connections, int) or isinstance(max_connections, bool) or max_connections < 1:
            raise ValueError(f"max_connections must be a positive integer, got {max_connections!r}")
        if token is None and not self.insecure_no_token and not is_loopback(self.host):
            raise ValueError(
                f"refusing to serve on {self.host} without a token: anyone who reaches it could drive every session; "
                "pass --token generate (or --token-file PATH, $NONSTOP_TOKEN), or --insecure-no-token to serve it open"
            )

    @property
    def per_address(self) -> int:
        """Open WebSocket connections one remote address may hold (this machine's own are not counted)."""
        return max(1, self.max_connections // 8)


_FIELDS = frozenset(f.name for f in dataclasses.fields(EdgeSettings))


def split_options(options: dict[str, Any], base: EdgeSettings | None = None) -> tuple[EdgeSettings, dict[str, Any]]:
    """``options`` sorted into `EdgeSettings` (over ``base``) and the rest (the session manager's)."""
    edge = {k: v for k, v in options.items() if k in _FIELDS}
    rest = {k: v for k, v in options.items() if k not in _FIELDS}
    return dataclasses.replace(base or EdgeSettings(), **edge), rest


def _count(name: str, value: Any, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        what = "a positive integer" if least == 1 else "a non-negative integer"
        raise ValueError(f"{name} must be {what}, got {value!r}")


@dataclass(frozen=True)
class ManagerSettings:
    """How a `nonstop.server.sessions.SessionManager` admits, ticks, reaps and records sessions.

    max_sessions: live sessions allowed at once; one more gets ``CAPACITY_REACHED``.
    idle_timeout: a running session whose clients sent nothing for this long, and wait for nothing,
        is ended; a player without a socket (HTTP, MCP) silent this long gives its seats up to their β.
    replay_dir: where replays go; ``None`` disables recording (``record``: False records nothing).
    encoding: how observations travel unless a client says (``b64``, ``list``, ``none``).
    tick_threads: threads of the in-process tick pool (``tick_procs=0``).
    tick_procs: 0 ticks every session on threads of this process; ``n > 0`` on ``n`` worker processes.
    tick_sched: the workers' tick lanes' scheduling (`nonstop.realtime.host.raise_priority`).
    work_workers, max_pending_work: the slow-work queue's threads and its bound (past it: ``BACKPRESSURE``).
    max_waiters: pending waits one session holds at most.
    reap_interval: seconds between the reaper's rounds; keep_closed: ended sessions still listed.
    warm_envs: envs per env id kept built and seeded ahead of time (split over tick processes).
    replay_keep, replay_max_mb: the replay directory's retention (0: no limit); the newest is kept.

    >>> ManagerSettings(tick_sched="often")
    Traceback (most recent call last):
    ...
    ValueError: tick_sched must be one of ('auto', 'fifo', 'nice', 'normal'), got 'often'
    """

    max_sessions: int = 64
    idle_timeout: float = 60.0
    replay_dir: str | os.PathLike | None = None
    record: bool = True
    encoding: str = "b64"
    tick_threads: int = 2
    tick_procs: int = 0
    tick_sched: str = "auto"
    work_workers: int = 2
    max_pending_work: int = 16
    max_waiters: int = 64
    reap_interval: float = 0.25
    keep_closed: int = 256
    warm_envs: int = 0
    replay_keep: int = 1000
    replay_max_mb: float = 0.0

    def __post_init__(self) -> None:
        _count("max_sessions", self.max_sessions, 1)
        if not self.idle_timeout > 0:
            raise ValueError(f"idle_timeout must be a positive number of seconds, got {self.idle_timeout!r}")
        if self.encoding not in ("b64", "list", "none"):
            raise ValueError(f"encoding must be 'b64', 'list' or 'none', got {self.encoding!r}")
        _count("tick_procs", self.tick_procs, 0)
        if self.tick_sched not in HOST_SCHED:
            raise ValueError(f"tick_sched must be one of {HOST_SCHED}, got {self.tick_sched!r}")
        if not isinstance(self.replay_keep, int) or isinstance(self.replay_keep, bool) or self.replay_keep < 0:
            raise ValueError(f"replay_keep must be a non-negative integer (0: no limit), got {self.replay_keep!r}")
        mb = self.replay_max_mb
        if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb >= 0:
            raise ValueError(f"replay_max_mb must be a non-negative number (0: no limit), got {mb!r}")
