"""The edge's settings: one dataclass for what `create_app`, `serve` and `ServerThread` share.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nonstop.server.guard import is_loopback

__all__ = ["EdgeSettings", "split_options"]


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
