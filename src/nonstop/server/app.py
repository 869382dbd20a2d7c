"""The HTTP + WebSocket face of the server (FastAPI; served by uvicorn).

``/ws`` speaks `nonstop.server.protocol`: one session per connection, OpenEnv's lockstep verbs and
the realtime ones; in a several-seat world, one seat per connection (``reset`` creates the session
and takes its first seat, ``join`` takes a seat of another client's session). The event loop only parses, reads slots, submits actions and awaits futures the
tick pool resolves; worlds tick on the pool (`nonstop.server.sessions`). Every refused request is
an ``error`` reply with a code; the connection and every other session carry on.

HTTP: ``/health`` (503 when ticks stop advancing), ``/metadata``, ``/schema``, ``/sessions``,
``/sessions/{id}``, ``/replays`` (names in the replay directory); OpenEnv's ``POST /reset``, ``POST /step``, ``GET /state`` and
the MCP endpoint ``/mcp`` (`nonstop.server.openenv_http`). With a token, every request needs
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
import collections
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from nonstop.server.auth import TOKEN_ENV, RedactToken, authorized, page_address, refuse_socket, resolve_token
from nonstop.server.connection import Connection
from nonstop.server.guard import DenialNoise, EdgeGuard, EdgePolicy, is_loopback
from nonstop.server.live import is_public, mount_live
from nonstop.server.protocol import (
    MESSAGE_TYPES,
    CloseMessage,
    ErrorReply,
    ProtocolError,
    message_schemas,
    parse_message,
)
from nonstop.server.sessions import SessionManager

__all__ = [
    "create_app",
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
#: frames a WebSocket client may send while its previous message is handled (a long wait), read and
#: kept in order; past them the socket is not read until that message is answered
_EARLY_FRAMES = 16
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


def create_app(
    manager: SessionManager | None = None,
    *,
    token: str | None = None,
    start_timeout: float = 30.0,
    connect_timeout: float = 30.0,
    max_connections: int = 256,
    host: str = "127.0.0.1",
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
    insecure_no_token: bool = False,
    **manager_kwargs: Any,
) -> FastAPI:
    """The FastAPI app. It owns ``manager`` (built from ``manager_kwargs`` if not given) and shuts
    it down, flushing every replay, when the app stops. ``host``: the address it will be served
    on; a non-loopback one needs a ``token`` unless ``insecure_no_token``. ``allow_hosts`` and
    ``allow_origins`` add to the `EdgePolicy`'s own (``--allow-host``, ``--allow-origin``).

    A WebSocket connection that has started no session ``connect_timeout`` seconds after it opened
    (or whose session ended that long ago) is closed (code 1008); past ``max_connections`` open
    WebSocket connections, one more is refused with HTTP 503 and a ``CAPACITY_REACHED`` error body
    before the handshake completes, and so is one more from a remote address that holds
    ``max_connections // 8`` already (one host cannot take every socket; this machine's own clients
    share 127.0.0.1 and are counted only in the total).
    """
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise ValueError("token must be a string of at least 8 characters")
    if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or not connect_timeout > 0:
        raise ValueError(f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}")
    if not isinstance(max_connections, int) or isinstance(max_connections, bool) or max_connections < 1:
        raise ValueError(f"max_connections must be a positive integer, got {max_connections!r}")
    if token is None and not insecure_no_token and not is_loopback(host):
        raise ValueError(
            f"refusing to serve on {host} without a token: anyone who reaches it could drive every session; "
            "pass --token generate (or --token-file PATH, $NONSTOP_TOKEN), or --insecure-no-token to serve it open"
        )
    policy = EdgePolicy.build(host, allow_hosts, allow_origins)

    RedactToken.install()
    QuietPolling.install()
    DenialNoise.install()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        RedactToken.install()  # again: uvicorn configures its loggers when it starts
        QuietPolling.install()
        DenialNoise.install()
        if app.state.manager is None:
            app.state.manager = SessionManager(**manager_kwargs)
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, app.state.manager.shutdown)

    app = FastAPI(title="nonstop", description="Realtime worlds for agents of any latency", lifespan=lifespan)
    app.state.manager = manager
    app.state.connections = 0  # open WebSocket connections (the event loop's own count: no lock)
    app.state.by_address = {}  # the same, by remote address (loopback ones not counted)
    per_address = max(1, max_connections // 8)

    def mgr() -> SessionManager:
        if app.state.manager is None:
            app.state.manager = SessionManager(**manager_kwargs)
        return app.state.manager

    if token is not None:

        @app.middleware("http")
        async def require_token(request: Request, call_next: Any) -> Any:
            if not is_public(request.url.path) and not authorized(request.headers.get("authorization"), None, token):
                return JSONResponse(
                    {"type": "error", "data": {"message": "missing or wrong bearer token", "code": "UNAUTHORIZED"}},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
            return await call_next(request)

    app.add_middleware(EdgeGuard, policy=policy)  # added last: outermost, before the token's check

    @app.get("/health")
    def health() -> JSONResponse:
        report = mgr().health()
        report["connections"] = app.state.connections
        report["max_connections"] = max_connections
        return JSONResponse(report, status_code=200 if report["ticks_advancing"] else 503)

    @app.get("/metadata")
    def metadata() -> dict[str, Any]:
        m = mgr()
        return {
            "name": "nonstop",
            "description": "Realtime worlds that never wait: the world ticks on its own clock; when no action is "
            "ready the default behaviour β acts and the tick counts as inaction.",
            "default_env": m.default_env,
            "envs": {
                env_id: {
                    "tick_hz": spec.tick_hz,
                    "default_beta": spec.default_beta,
                    "description": spec.description,
                    **spec.spaces(),
                }
                for env_id, spec in m.specs.items()
            },
            "messages": list(MESSAGE_TYPES),
            "max_sessions": m.max_sessions,
            "idle_timeout_s": m.idle_timeout,
            "records_replays": m.record,
        }

    @app.get("/schema")
    def schema() -> dict[str, Any]:
        return message_schemas()

    @app.get("/sessions")
    def sessions() -> list[dict[str, Any]]:
        return mgr().list_sessions()

    @app.get("/sessions/{sid}")
    def session(sid: str) -> JSONResponse:
        for info in mgr().list_sessions():
            if info["session_id"] == sid:
                return JSONResponse(info)
        return JSONResponse({"type": "error", "data": {"message": f"no session {sid}", "code": "NO_SESSION"}}, 404)

    @app.get("/replays")
    def replays() -> list[dict[str, Any]]:  # names in the replay directory: where it lies is no client's business
        return [{"name": r["name"], "bytes": r["bytes"]} for r in mgr().list_replays()]

    from nonstop.server.openenv_http import add_openenv_routes

    # POST /reset, /step, GET /state, /mcp. EdgeGuard checks /mcp's two dialects alike, so the MCP
    # SDK's own Host check (which knows no --allow-host) is left off: "0.0.0.0" tells it so.
    add_openenv_routes(app, mgr, start_timeout=start_timeout, host="0.0.0.0")
    mount_live(app, mgr, token, max_connections=max_connections)  # the page at /, spectator sockets /ws/watch/{id}

    @app.websocket("/ws")
    async def websocket(ws: WebSocket) -> None:
        if token is not None and not authorized(ws.headers.get("authorization"), ws.query_params.get("token"), token):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        if app.state.connections >= max_connections:
            await refuse_socket(ws, f"too many open connections ({max_connections}): retry later")
            return
        address = ws.client.host if ws.client is not None else ""
        counted = bool(address) and not is_loopback(address)
        held = app.state.by_address.get(address, 0)
        if counted and held >= per_address:
            await refuse_socket(ws, f"too many open connections from {address} ({per_address}): retry later")
            return
        app.state.connections += 1
        if counted:
            app.state.by_address[address] = held + 1
        try:
            await _serve_socket(ws)
        finally:
            app.state.connections -= 1
            if counted:
                left = app.state.by_address.pop(address) - 1
                if left:
                    app.state.by_address[address] = left

    async def _serve_socket(ws: WebSocket) -> None:
        await ws.accept()
        conn = Connection(ws, mgr(), start_timeout, end_grace=connect_timeout)
        reason = "connection lost"
        loop = asyncio.get_running_loop()
        connect_deadline = loop.time() + connect_timeout
        # frames read while a message was handled (a wait can take minutes): the socket is read all the
        # while, so a client that hangs up mid-wait is seen at once and its wait dropped
        early: collections.deque[dict[str, Any]] = collections.deque()
        receiving: asyncio.Future[Any] | None = None
        try:
            while True:
                if early:
                    frame = early.popleft()
                else:
                    receiving = receiving or asyncio.ensure_future(ws.receive())
                    if conn.session is None:  # a connection must start a session in time, or make room
                        try:
                            frame = await asyncio.wait_for(
                                asyncio.shield(receiving), max(0.0, connect_deadline - loop.time())
                            )
                        except asyncio.TimeoutError:
                            reason = f"no session started within {connect_timeout:g}s"
                            await ws.close(code=1008, reason=reason)
                            break
                    else:
                        frame = await receiving
                    receiving = None
                if frame["type"] == "websocket.disconnect":
                    break
                raw = frame.get("text")
                if raw is None:
                    raw = frame.get("bytes") or b""
                try:
                    msg = parse_message(raw)
                    if isinstance(msg, CloseMessage):
                        reason = "closed by client"
                        break
                    handling = asyncio.ensure_future(conn.handle(msg))
                    gone = False
                    while not handling.done() and len(early) < _EARLY_FRAMES:
                        receiving = receiving or asyncio.ensure_future(ws.receive())
                        await asyncio.wait((handling, receiving), return_when=asyncio.FIRST_COMPLETED)
                        if receiving.done():
                            early.append(receiving.result())
                            receiving = None
                            gone = early[-1]["type"] == "websocket.disconnect"
                            if gone:
                                handling.cancel()  # its caller hung up: a wait leaves the session now
                                break
                    if gone:
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await handling
                        break
                    reply = await handling
                except ProtocolError as exc:
                    reply = exc.reply()
                except Exception as exc:  # a bug must cost one reply, not the connection
                    log.exception("unexpected error handling a message")
                    reply = ErrorReply(data={"message": f"{type(exc).__name__}: {exc}", "code": "EXECUTION_ERROR"})
                await conn.send(reply)
        except WebSocketDisconnect:
            pass
        except RuntimeError as exc:  # the socket closed under us
            log.debug("websocket ended: %s", exc)
        finally:
            if receiving is not None:
                receiving.cancel()
            conn.close(reason)
            with contextlib.suppress(Exception):
                await ws.close()

    return app


def serve(
    envs: list[str] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    log_level: str = "info",
    switch_interval: float = 0.0005,
    connect_timeout: float = 30.0,
    max_connections: int = 256,
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
    insecure_no_token: bool = False,
    show_token: bool = False,
    **manager_kwargs: Any,
) -> int:
    """Run the server until SIGINT/SIGTERM; sessions are ended and replays flushed before exit.
    ``show_token``: print the live page's address with the token (a generated one) on stderr."""
    import uvicorn

    # The tick pool shares the GIL with the event loop; a short switch interval bounds how long
    # a JSON encode on the loop can hold a due tick back (the default 5 ms would blow a 2 ms budget).
    sys.setswitchinterval(switch_interval)
    app = create_app(
        None,
        token=token,
        connect_timeout=connect_timeout,
        max_connections=max_connections,
        host=host,
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
        insecure_no_token=insecure_no_token,
    )
    if show_token and token is not None:  # the user's terminal only, never a log (the page keeps it out of URLs)
        print(
            f"nonstop serve: the live page, with this run's token: {page_address(host, port, token)}", file=sys.stderr
        )
    # the app's own settings are checked (above) before the manager starts a process
    app.state.manager = SessionManager(list(envs or ["Boxing"]), **manager_kwargs)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, **UVICORN_WS)
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
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        token: str | None = None,
        start_timeout: float = 30.0,
        connect_timeout: float = 30.0,
        max_connections: int = 256,
        log_level: str = "warning",
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
        **manager_kwargs: Any,
    ) -> None:
        import uvicorn

        self.manager = SessionManager(**manager_kwargs)
        try:
            self.app = create_app(
                self.manager,
                token=token,
                connect_timeout=connect_timeout,
                max_connections=max_connections,
                host=host,
                allow_hosts=allow_hosts,
                allow_origins=allow_origins,
            )
        except BaseException:
            self.manager.shutdown()
            raise
        self.port = port or free_port(host)
        self.url = f"ws://{host}:{self.port}"
        config = uvicorn.Config(self.app, host=host, port=self.port, log_level=log_level, **UVICORN_WS)
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
