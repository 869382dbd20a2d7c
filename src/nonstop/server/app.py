"""The HTTP + WebSocket face of the server (FastAPI; served by uvicorn).

``/ws`` speaks `nonstop.server.protocol`: one session per connection, OpenEnv's lockstep verbs and
the realtime ones; in a several-seat world, one seat per connection (``reset`` creates the session
and takes its first seat, ``join`` takes a seat of another client's session). The event loop only parses, reads slots, submits actions and awaits futures the
tick pool resolves; worlds tick on the pool (`nonstop.server.sessions`). Every refused request is
an ``error`` reply with a code; the connection and every other session carry on.

HTTP: ``/health`` (503 when ticks stop advancing), ``/metadata``, ``/schema``, ``/sessions``,
``/sessions/{id}``, ``/replays`` (names in the replay directory); OpenEnv's ``POST /reset``, ``POST /step``, ``GET /state`` and
the MCP endpoint ``/mcp`` (`nonstop.server.openenv_http`). Each area is a router of its own under
`nonstop.server.routes` (``admin``, ``ws``, ``openenv``, ``mcp``); `create_app` composes them, and
its options are one `EdgeSettings` (`nonstop.server.settings`). With a token, every request needs
``Authorization: Bearer TOKEN`` (WebSockets may pass ``?token=TOKEN`` instead, for clients that
cannot set headers). The token is read from a file or the environment (`resolve_token`) and never
logged: `RedactToken` rewrites ``token=`` in every uvicorn log line. The live page (``/``, its
static files, ``/live/sessions`` and read-only spectator sockets ``/ws/watch/{id}``) is
`nonstop.server.live`; only the page's files are served without the token.

Before any route, `nonstop.server.guard.EdgeGuard` refuses what a web page the user visits could
send: a ``Host`` that does not name this server (421: DNS rebinding), an ``Origin`` other than the
server's own page (403, HTTP and WebSocket alike), a body that is not JSON (415). A non-loopback
bind without a token is refused unless ``insecure_no_token`` says so.

The protocol's verbs, transport-free, are `nonstop.server.connection.Connection` (which the
WebSocket endpoint, the HTTP routes, the MCP tools and the spectators all drive); the token's
handling is `nonstop.server.auth`. Both stay importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.middleware.base import BaseHTTPMiddleware

from nonstop.server.auth import TOKEN_ENV, RedactToken, authorized, page_address, resolve_token
from nonstop.server.guard import DenialNoise, EdgeGuard, EdgePolicy
from nonstop.server.live import is_public, mount_live
from nonstop.server.openenv_http import HttpPlayers
from nonstop.server.routes import admin, manager_of, openenv, ws
from nonstop.server.routes.mcp import mount_mcp
from nonstop.server.sessions import SessionManager
from nonstop.server.settings import EdgeSettings, split_options

__all__ = [
    "create_app",
    "EdgeSettings",
    "serve",
    "ServerThread",
    "free_port",
    "resolve_token",
    "RedactToken",
    "QuietPolling",
    "DEFAULT_PORT",
    "TOKEN_ENV",
]

log = logging.getLogger("nonstop.server")
DEFAULT_PORT = 8000
#: uvicorn closes the socket above this; below it and above MAX_MESSAGE_BYTES we answer with an error
WS_FRAME_LIMIT = 1 << 20
#: uvicorn settings of every server: no per-message deflate (compressing a 100 KB frame costs
#: milliseconds of GIL-held CPU that the tick pool needs; frames travel on a LAN or loopback)
UVICORN_WS: dict[str, Any] = {"ws_max_size": WS_FRAME_LIMIT, "ws_per_message_deflate": False, "lifespan": "on"}


class QuietPolling(logging.Filter):
    """Keeps the live page's polling out of uvicorn's access log: an open page asks for
    ``/live/sessions`` and ``/health`` every second, which buried every other line (two a second
    per open page). Those requests are logged only when they fail (status 400 or more).

    >>> rec = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
    ...                         ("127.0.0.1:5", "GET", "/live/sessions", "1.1", 200), None)
    >>> QuietPolling().filter(rec)
    False
    """

    PATHS = ("/live/sessions", "/health")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) < 5:
            return True
        method, path, status = args[1], str(args[2]), args[4]
        polled = method == "GET" and path.split("?", 1)[0] in self.PATHS
        return not (polled and isinstance(status, int) and status < 400)

    @classmethod
    def install(cls) -> None:
        """One filter on uvicorn's access logger (idempotent)."""
        logger = logging.getLogger("uvicorn.access")
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls())


def create_app(manager: SessionManager | None = None, settings: EdgeSettings | None = None, **options: Any) -> FastAPI:
    """The FastAPI app: the edge's middleware around the routers of `nonstop.server.routes`.

    It owns ``manager`` (built at startup from the options that are not `EdgeSettings` fields, if
    not given) and shuts it down, flushing every replay, when the app stops. ``settings`` (or the
    options named like its fields, over it): the token, the timeouts, the connection limits, the
    address served and the Host and Origin allowances (`nonstop.server.settings.EdgeSettings`).

    A WebSocket connection that has started no session ``connect_timeout`` seconds after it opened
    (or whose session ended that long ago) is closed (code 1008); past ``max_connections`` open
    WebSocket connections, one more is refused with HTTP 503 and a ``CAPACITY_REACHED`` error body
    before the handshake completes, and so is one more from a remote address that holds
    ``max_connections // 8`` already (one host cannot take every socket; this machine's own clients
    share 127.0.0.1 and are counted only in the total).
    """
    edge, manager_options = split_options(options, settings)
    policy = EdgePolicy.build(edge.host, edge.allow_hosts, edge.allow_origins)
    _install_log_filters()
    app = FastAPI(title="nonstop", description="Realtime worlds for agents of any latency", lifespan=_lifespan)
    app.state.manager = manager
    app.state.manager_options = manager_options
    app.state.settings = edge
    app.state.connections = 0  # open WebSocket connections (the event loop's own count: no lock)
    app.state.by_address = {}  # the same, by remote address (loopback ones not counted)
    if edge.token is not None:
        app.add_middleware(BaseHTTPMiddleware, dispatch=_TokenCheck(edge.token))
    app.add_middleware(EdgeGuard, policy=policy)  # added last: outermost, before the token's check

    def mgr() -> SessionManager:
        return manager_of(app)

    app.include_router(admin.router)
    app.state.http_players = HttpPlayers(mgr, edge.start_timeout)
    app.include_router(openenv.router)  # POST /reset, /step, GET /state
    # EdgeGuard checks /mcp's two dialects alike, so the MCP SDK's own Host check (which knows no
    # --allow-host) is left off: "0.0.0.0" tells it so.
    mount_mcp(app, mgr, start_timeout=edge.start_timeout, host="0.0.0.0")
    mount_live(app, mgr, edge.token, max_connections=edge.max_connections)  # the page at /, /ws/watch/{id}
    app.include_router(ws.router)
    return app


def _install_log_filters() -> None:
    RedactToken.install()
    QuietPolling.install()
    DenialNoise.install()


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    _install_log_filters()  # again: uvicorn configures its loggers when it starts
    manager_of(app)
    try:
        yield
    finally:
        await asyncio.get_running_loop().run_in_executor(None, app.state.manager.shutdown)


class _TokenCheck:
    """Every request but the live page's files needs ``Authorization: Bearer TOKEN`` (401 without)."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def __call__(self, request: Request, call_next: Any) -> Any:
        if not is_public(request.url.path) and not authorized(request.headers.get("authorization"), None, self.token):
            return JSONResponse(
                {"type": "error", "data": {"message": "missing or wrong bearer token", "code": "UNAUTHORIZED"}},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await call_next(request)


def serve(
    envs: list[str] | None = None,
    *,
    port: int = DEFAULT_PORT,
    log_level: str = "info",
    switch_interval: float = 0.0005,
    show_token: bool = False,
    **options: Any,
) -> int:
    """Run the server until SIGINT/SIGTERM; sessions are ended and replays flushed before exit.
    ``options``: `EdgeSettings` fields (``host``, ``token``, ...) and the `SessionManager`'s.
    ``show_token``: print the live page's address with the token (a generated one) on stderr."""
    import uvicorn

    # The tick pool shares the GIL with the event loop; a short switch interval bounds how long
    # a JSON encode on the loop can hold a due tick back (the default 5 ms would blow a 2 ms budget).
    sys.setswitchinterval(switch_interval)
    edge, manager_options = split_options(options)
    app = create_app(None, edge)
    if show_token and edge.token is not None:  # the user's terminal only, never a log (the page keeps it out of URLs)
        address = page_address(edge.host, port, edge.token)
        print(f"nonstop serve: the live page, with this run's token: {address}", file=sys.stderr)
    # the app's own settings are checked (above) before the manager starts a process
    app.state.manager = SessionManager(list(envs or ["Boxing"]), **manager_options)
    config = uvicorn.Config(app, host=edge.host, port=port, log_level=log_level, **UVICORN_WS)
    server = uvicorn.Server(config)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; by then the sessions are closed and
    # replays written, so the re-raised signal is ignored and the command exits 0.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if app.state.manager is not None:
            app.state.manager.shutdown()  # idempotent; covers a failed startup
    return 0 if server.started else 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for tests and examples)."""
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerThread:
    """A real uvicorn server on a background thread of this process (tests, examples, notebooks)::

    with ServerThread(envs=["theory/inaction"]) as server:
        Client(server.url).reset()
    """

    def __init__(
        self, *, port: int | None = None, start_timeout: float = 30.0, log_level: str = "warning", **options: Any
    ) -> None:
        """``options``: `EdgeSettings` fields (but ``start_timeout``: here how long the server may take
        to start) and the `SessionManager`'s."""
        import uvicorn

        edge, manager_options = split_options(options)
        self.manager = SessionManager(**manager_options)
        try:
            self.app = create_app(self.manager, edge)
        except BaseException:
            self.manager.shutdown()
            raise
        self.port = port or free_port(edge.host)
        self.url = f"ws://{edge.host}:{self.port}"
        config = uvicorn.Config(self.app, host=edge.host, port=self.port, log_level=log_level, **UVICORN_WS)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="nonstop-uvicorn", daemon=True)
        self.start_timeout = start_timeout

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        waited = 0.0
        while not self.server.started:
            if not self._thread.is_alive() or waited > self.start_timeout:
                self.manager.shutdown()
                raise RuntimeError(f"the server did not start on port {self.port}")
            self._thread.join(0.02)
            waited += 0.02
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
        self.manager.shutdown()
