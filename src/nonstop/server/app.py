"""The HTTP + WebSocket face of the server (FastAPI; served by uvicorn).

``/ws`` speaks `nonstop.server.protocol`: one session per connection, OpenEnv's lockstep verbs and
the realtime ones; in a several-seat world, one seat per connection (``reset`` creates the session
and takes its first seat, ``join`` takes a seat of another client's session). The event loop only parses, reads slots, submits actions and awaits futures the
tick pool resolves; worlds tick on the pool (`nonstop.server.sessions`). Every refused request is
an ``error`` reply with a code; the connection and every other session carry on.

HTTP: ``/health`` (503 when ticks stop advancing), ``/metadata``, ``/schema``, ``/sessions``,
``/sessions/{id}``, ``/replays``; OpenEnv's ``POST /reset``, ``POST /step``, ``GET /state`` and
the MCP endpoint ``/mcp`` (`nonstop.server.openenv_http`). With a token, every request needs
``Authorization: Bearer TOKEN`` (WebSockets may pass ``?token=TOKEN`` instead, for clients that
cannot set headers). The token is read from a file or the environment (`resolve_token`) and never
logged: `RedactToken` rewrites ``token=`` in every uvicorn log line. The live page (``/``, its
static files, ``/live/sessions`` and read-only spectator sockets ``/ws/watch/{id}``) is
`nonstop.server.live`; only the page's files are served without the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from nonstop.realtime.channels import Observation
from nonstop.realtime.host import END_TERMINATED, END_TRUNCATED
from nonstop.server.live import is_public, mount_live
from nonstop.server.protocol import (
    MAX_WAIT_TICKS,
    MESSAGE_TYPES,
    AckReply,
    ActMessage,
    CloseMessage,
    ErrorCode,
    ErrorReply,
    JoinMessage,
    ObserveMessage,
    ProtocolError,
    ResetMessage,
    SessionConfig,
    StateMessage,
    StateReply,
    StepMessage,
    SubscribeMessage,
    WaitMessage,
    encode_array,
    message_schemas,
    parse_message,
)
from nonstop.server.sessions import Lifecycle, ServerSession, SessionManager

__all__ = ["create_app", "serve", "ServerThread", "free_port", "resolve_token", "RedactToken", "DEFAULT_PORT",
           "TOKEN_ENV"]

log = logging.getLogger("nonstop.server")
DEFAULT_PORT = 8000
#: uvicorn closes the socket above this; below it and above MAX_MESSAGE_BYTES we answer with an error
WS_FRAME_LIMIT = 1 << 20
#: uvicorn settings of every server: no per-message deflate (compressing a 100 KB frame costs
#: milliseconds of GIL-held CPU that the tick pool needs; frames travel on a LAN or loopback)
UVICORN_WS: dict[str, Any] = {"ws_max_size": WS_FRAME_LIMIT, "ws_per_message_deflate": False, "lifespan": "on"}


@dataclass
class _View:
    """What one reader was last sent, so that ``reward`` and ``done`` are "since then".

    At an episode's end the host publishes twice in one tick: the terminal observation (kept as
    the slot's final one) and then the next episode's first. The reply that says ``done`` carries
    the **terminal** observation with its ``terminated``/``truncated`` flags, as a Gymnasium
    ``step`` would; the next episode's observations follow (``reset`` returns its current one).
    """

    tick: int = -1
    total_reward: float = 0.0
    episode: int = 0  # the episode this reader is in (after a ``done`` reply: the next one)
    ended: bool = False  # the last reply said ``done``: the reader is between episodes
    seat: int = 0  # the seat this reader reads (its observations, reward and counters)

    def payload(
        self, obs: Observation, session: ServerSession, encoding: str, *, fresh: bool = False
    ) -> dict[str, Any]:
        """The reply's ``data`` for the newest observation ``obs``; ``fresh`` (a reset) starts
        the view at ``obs`` and never reports an ended episode."""
        terminated = truncated = False
        shown, episode = obs, obs.episode
        if fresh:
            pass
        elif obs.terminated or obs.truncated:  # read between the two publishes of an episode's end
            episode = obs.episode + 1
            if episode != self.episode:  # not yet reported to this reader
                terminated, truncated = obs.terminated, obs.truncated
        elif obs.episode != self.episode:
            final = session.read_final(self.seat)
            if final.episode == self.episode:  # the terminal observation of the episode this reader was in
                shown, terminated, truncated = final, final.terminated, final.truncated
            else:  # several episodes ended since this reader looked: only how the last one ended is known
                terminated, truncated = obs.last_end == END_TERMINATED, obs.last_end == END_TRUNCATED
        done = not fresh and episode != self.episode
        reward = shown.total_reward - self.total_reward
        self.tick, self.total_reward, self.episode, self.ended = shown.tick, shown.total_reward, episode, done
        return {
            "observation": {
                "obs": encode_array(shown.obs, encoding),
                "tick": shown.tick,
                "time": shown.tick * session.tau_m,  # the session's clock: seconds since its tick 0
                "episode": shown.episode,
                "terminated": terminated,
                "truncated": truncated,
                "total_reward": shown.total_reward,
                "inaction_ticks": shown.inaction_ticks,
                "agent_ticks": shown.agent_ticks,
                "last_delay": shown.last_delay,
                "session_id": session.sid,
                "lifecycle": session.state.value,
                **({"seat": session.seat_names[self.seat]} if session.spec.seats is not None else {}),
            },
            "reward": reward,
            "done": done,
        }


class Connection:
    """One client and its session (at most one at a time): the protocol's verbs, transport-free.

    In a several-seat world the connection holds one seat (``seat``, an index): it reads that seat's
    observations and counters and acts for it alone. Leaving (``close``, a lost connection, a reset
    that starts another session, a join elsewhere) frees the seat for its β; the session ends when
    its last seated client leaves.

    The WebSocket endpoint feeds it parsed messages and sends what `handle` returns; the MCP tools
    (`nonstop.server.mcp`) drive it the same way with ``ws=None`` (then there are no pushes).
    """

    def __init__(self, ws: WebSocket | None, manager: SessionManager, start_timeout: float) -> None:
        self.ws = ws
        self.manager = manager
        self.start_timeout = start_timeout
        self.session: ServerSession | None = None
        self.seat = 0  # the index of the seat this connection holds in its session
        self.view = _View()
        self.config: SessionConfig | None = None
        self._send_lock = asyncio.Lock()
        self._subscription: asyncio.Task | None = None

    async def send(self, reply: Any) -> None:
        # observation replies are built as dicts on the hot path (no second validation of big arrays)
        text = json.dumps(reply) if isinstance(reply, dict) else reply.model_dump_json()
        if self.ws is None:
            raise RuntimeError("this connection has no socket (an MCP or HTTP client): nothing can be pushed to it")
        async with self._send_lock:
            await self.ws.send_text(text)

    def running(self) -> ServerSession:
        if self.session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        self.session._require_running()
        return self.session

    def current(self) -> ServerSession:
        """This connection's session, in whatever state (`running`: a running one)."""
        if self.session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        return self.session

    def _encoding(self, requested: str | None) -> str:
        return requested or self.current().settings.encoding

    async def handle(self, msg: Any) -> Any:
        if self.session is not None:
            self.session.touch()
        if isinstance(msg, ResetMessage):
            return await self.reset(msg)
        if isinstance(msg, StateMessage):
            return self.state()
        if isinstance(msg, JoinMessage):
            return await self.join(msg)
        session = self.running()
        if isinstance(msg, (StepMessage, ActMessage)):
            if msg.data.seat is not None:
                self._check_seat(session, msg.data.seat, msg.type)
            obs_tick = msg.data.obs_tick if msg.data.obs_tick is not None else max(self.view.tick, 0)
            seq, tick = await session.submit_async(msg.data.action, obs_tick, self.view.episode, self.seat)
            if isinstance(msg, ActMessage):
                return AckReply(data={"seq": seq, "tick": tick, "obs_tick": obs_tick})
            return await self.observe_at(tick + 1, None)  # the tick that applies it
        if isinstance(msg, ObserveMessage):
            return self.observation(session.read(self.seat), msg.data.encoding)
        if isinstance(msg, WaitMessage):
            target = msg.data.target(session.tick)
            if target - session.tick > MAX_WAIT_TICKS:
                raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"until={target} is more than {MAX_WAIT_TICKS} ticks "
                                    f"ahead of tick {session.tick}")  # fmt: skip
            return await self.observe_at(target, msg.data.encoding)
        if isinstance(msg, SubscribeMessage):
            return self.subscribe(msg.data.every, msg.data.encoding)
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {msg.type}")

    def observation(self, obs: Observation, encoding: str | None, *, fresh: bool = False) -> dict[str, Any]:
        """An `ObservationReply`, as a dict (``fresh``: a reset's, which starts the reader's view)."""
        data = self.view.payload(obs, self.current(), self._encoding(encoding), fresh=fresh)
        return {"type": "observation", "data": data}

    async def observe_at(self, target: int, encoding: str | None) -> dict[str, Any]:
        session = self.running()
        await session.wait_tick(target, asyncio.get_running_loop())
        return self.observation(session.read(self.seat), encoding)

    def _check_seat(self, session: ServerSession, seat: str, verb: str) -> None:
        """An action naming ``seat`` must be for this connection's own seat."""
        index = session.seat_index(seat)  # UNKNOWN_SEAT for a seat the env lacks
        if index != self.seat or session.holders[index] is not self:
            raise ProtocolError(ErrorCode.SEAT_NOT_HELD, f"cannot {verb} for seat {seat!r} of session {session.sid}: "
                                f"this connection holds seat {session.seat_names[self.seat]!r}")  # fmt: skip

    def leave(self, reason: str) -> None:
        """Give up this connection's seat: β plays it from now; the session ends with ``reason`` if
        no other client holds a seat of it."""
        session = self.session
        if session is None:
            return
        if session.release(self) == 0:
            self.manager.end(session, reason)
        else:
            log.info("session %s: seat %s left (%s); its β plays it", session.sid, session.seat_names[self.seat], reason)

    async def join(self, msg: JoinMessage) -> dict[str, Any]:
        """Take a seat (named, or the first free one) of another client's running session."""
        data = msg.data
        session = self.manager.get(data.session_id)
        if session is None:
            if self.manager.ended(data.session_id) is not None:
                raise ProtocolError(ErrorCode.SESSION_ENDED, f"session {data.session_id} has ended: nothing to join")
            raise ProtocolError(ErrorCode.NO_SESSION, f"no session {data.session_id!r} to join (GET /sessions lists them)")
        if session is self.session and session.holders[self.seat] is self:
            raise ProtocolError(ErrorCode.SESSION_ERROR, f"this connection already holds seat "
                                f"{session.seat_names[self.seat]!r} of session {session.sid}")  # fmt: skip
        index = session.claim(self, data.seat)
        if self.session is not None:  # the seat this connection held elsewhere is given up
            self.stop_subscription()
            self.leave("its client joined another session")
        self.session, self.seat, self.config = session, index, None
        self.view = _View(seat=index)
        session.touch()
        reply = self.observation(session.read(index), data.encoding, fresh=True)
        reply["data"]["reward"] = None
        reply["data"]["done"] = False
        return reply

    async def reset(self, msg: ResetMessage) -> dict[str, Any]:
        data = msg.data
        config = SessionConfig(**data.model_dump(include=set(SessionConfig.model_fields)))
        session = self.session
        restart = session is None or not session.live or data.seed is not None or (
            config != self.config and config != SessionConfig()
        )  # fmt: skip
        if restart:
            if session is not None:
                self.stop_subscription()
                self.leave("restarted by reset")
            self.session = session = self.manager.create(config, seed=data.seed, episode_id=data.episode_id)
            session.holders[0] = self  # its creator takes the first seat, before anyone can join
            self.config, self.seat = config, 0
            self.view = _View()
            await self.manager.start(session, timeout=self.start_timeout)
            obs = session.read()
        else:
            assert session is not None  # restarted above when there is none
            obs = session.read(self.seat)
            if obs.terminated or obs.truncated:  # between the two publishes of an episode's end
                obs = await self._next_episode(obs.episode)
            elif not self.view.ended and sum(h is not None for h in session.holders) <= 1:
                # the client is inside an episode: end it (at the next tick); a match others play
                # in is not this client's to end: its reset answers its seat's current observation
                session.request_reset()
                obs = await self._next_episode(obs.episode)
            session.settings.episode_id = data.episode_id
        reply = self.observation(obs, None, fresh=True)
        reply["data"]["reward"] = None
        reply["data"]["done"] = False
        return reply

    async def _next_episode(self, episode: int) -> Observation:
        """The first observation of an episode after ``episode`` (waits tick by tick)."""
        loop = asyncio.get_running_loop()
        obs = self.running().read(self.seat)
        while obs.episode <= episode or obs.terminated or obs.truncated:
            session = self.current()
            await session.wait_tick(session.tick + 1, loop)
            obs = self.running().read(self.seat)
        return obs

    def state(self) -> StateReply:
        session = self.session
        if session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        seat = self.seat
        obs = session.read(seat) if session.state is Lifecycle.RUNNING else None
        ended = session.summary if seat == 0 else next(
            (row for row in session.summary.get("seats", []) if row["seat"] == session.seat_names[seat]), {})
        seats = None
        if session.spec.seats is not None:
            seats = [{"seat": row["seat"], "held": row["held"], "agent_ticks": row["agent_ticks"],
                      "inaction_ticks": row["inaction_ticks"], "last_delay": row["last_delay"] if
                      row["last_delay"] is not None else -1, "total_reward": row.get("total_reward") or 0.0}
                     for row in session.seat_rows()]  # fmt: skip
        queue = session.queues[seat] if obs and seat < len(session.queues) else None
        return StateReply(
            data={
                "episode_id": session.settings.episode_id,
                "step_count": session.step_count,
                "session_id": session.sid,
                "lifecycle": session.state.value,
                "end_reason": session.end_reason,
                "env": session.spec.env_id,
                "tick": obs.tick if obs else session.summary.get("ticks", -1),
                "tick_hz": session.spec.tick_hz,
                "episode": obs.episode if obs else -1,
                "inaction_ticks": obs.inaction_ticks if obs else ended.get("inaction_ticks", 0),
                "agent_ticks": obs.agent_ticks if obs else ended.get("agent_ticks", 0),
                "total_reward": obs.total_reward if obs else ended.get("total_reward") or 0.0,
                "queue": queue.counters() if queue is not None else {},
                "record": session.settings.record,
                "seat": session.seat_names[seat] if session.spec.seats is not None else None,
                "seats": seats,
            }
        )

    # ---- subscriptions: newest wins, a slow reader only skips ticks
    def subscribe(self, every: int, encoding: str | None) -> AckReply:
        session = self.running()
        self.stop_subscription()
        if every > 0:
            self._subscription = asyncio.create_task(self._push(session, every, self._encoding(encoding)))
        return AckReply(data={"seq": -1, "tick": session.tick, "obs_tick": session.tick})

    async def _push(self, session: ServerSession, every: int, encoding: str) -> None:
        view = dataclasses.replace(self.view)  # pushes report "since" what the client last saw
        loop = asyncio.get_running_loop()
        target = session.tick + every
        try:
            while session.state is Lifecycle.RUNNING:
                await session.wait_tick(target, loop)
                if session.state is not Lifecycle.RUNNING:
                    break
                obs = session.read(view.seat)
                await self.send({"type": "push", "data": view.payload(obs, session, encoding)})  # a PushReply
                target = max(target + every, session.tick + 1)  # skipped ticks are gone: newest wins
        except (ProtocolError, WebSocketDisconnect, RuntimeError):
            return

    def stop_subscription(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None

    def close(self, reason: str) -> None:
        self.stop_subscription()
        self.leave(reason)


#: the environment variable `nonstop serve` reads its token from (unlike ``--token``, not visible in ``ps``)
TOKEN_ENV = "NONSTOP_TOKEN"


def resolve_token(token: str | None = None, token_file: str | os.PathLike | None = None,
                  environ: dict[str, str] | None = None) -> str | None:  # fmt: skip
    """The server's bearer token: ``token`` (the command line: visible to every user in ``ps``), else
    the first line of ``token_file``, else ``$NONSTOP_TOKEN``; ``None`` when none is given.

    >>> resolve_token(environ={"NONSTOP_TOKEN": "s3cret-token"})
    's3cret-token'
    >>> resolve_token("a-token-1", "/some/file")
    Traceback (most recent call last):
    ...
    ValueError: give the token once: --token or --token-file, not both
    """
    if token is not None and token_file is not None:
        raise ValueError("give the token once: --token or --token-file, not both")
    if token_file is not None:
        try:
            text = open(token_file, encoding="utf-8").read()  # noqa: SIM115 - read whole, closed by refcount
        except OSError as exc:
            raise ValueError(f"cannot read the token file {token_file}: {exc.strerror or exc}") from None
        token = text.strip()
        if not token:
            raise ValueError(f"the token file {token_file} is empty")
    if token is None:
        token = (os.environ if environ is None else environ).get(TOKEN_ENV) or None
    return token


_TOKEN_IN_QUERY = re.compile(r"((?:^|[?&])token=)[^&\s\"']*", re.IGNORECASE)


class RedactToken(logging.Filter):
    """Rewrites ``token=VALUE`` in a log record's message and arguments as ``token=***``.

    uvicorn's access log writes each request's path with its query string, and a WebSocket client
    that cannot set headers passes ``?token=``; this filter sits on uvicorn's loggers so the token
    never reaches a handler.

    >>> record = logging.LogRecord("uvicorn.access", 20, "", 0, '%s "%s"', ("1.2.3.4", "/ws?a=1&token=s3cret"), None)
    >>> RedactToken().filter(record), record.getMessage()
    (True, '1.2.3.4 "/ws?a=1&token=***"')
    """

    LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")

    @staticmethod
    def redact(text: str) -> str:
        return _TOKEN_IN_QUERY.sub(r"\1***", text)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self.redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True

    @classmethod
    def install(cls) -> None:
        """Put one filter on each of uvicorn's loggers (idempotent)."""
        for name in cls.LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(cls())


async def _refuse(ws: WebSocket, message: str) -> None:
    """Refuse a WebSocket before its handshake: HTTP 503 with a ``CAPACITY_REACHED`` body (close code
    1013, "try again later", where the server cannot send an HTTP response to a socket)."""
    body = {"type": "error", "data": {"message": message, "code": ErrorCode.CAPACITY_REACHED.value}}
    try:
        await ws.send_denial_response(JSONResponse(body, status_code=503, headers={"Retry-After": "1"}))
    except RuntimeError:  # no "websocket.http.response" extension on this server
        await ws.close(code=1013, reason=message)


def _authorized(header: str | None, query: str | None, token: str) -> bool:
    candidates = []
    if header and header.lower().startswith("bearer "):
        candidates.append(header[7:].strip())
    if query:
        candidates.append(query)
    return any(hmac.compare_digest(c.encode(), token.encode()) for c in candidates)


def create_app(
    manager: SessionManager | None = None,
    *,
    token: str | None = None,
    start_timeout: float = 30.0,
    connect_timeout: float = 30.0,
    max_connections: int = 256,
    host: str = "127.0.0.1",
    **manager_kwargs: Any,
) -> FastAPI:
    """The FastAPI app. It owns ``manager`` (built from ``manager_kwargs`` if not given) and shuts
    it down, flushing every replay, when the app stops. ``host``: the address it will be served
    on (``/mcp`` checks that requests to a loopback server come from a local page).

    A WebSocket connection that has started no session ``connect_timeout`` seconds after it opened
    is closed (code 1008); past ``max_connections`` open WebSocket connections, one more is refused
    with HTTP 503 and a ``CAPACITY_REACHED`` error body before the handshake completes.
    """
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise ValueError("token must be a string of at least 8 characters")
    if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or not connect_timeout > 0:
        raise ValueError(f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}")
    if not isinstance(max_connections, int) or isinstance(max_connections, bool) or max_connections < 1:
        raise ValueError(f"max_connections must be a positive integer, got {max_connections!r}")

    RedactToken.install()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        RedactToken.install()  # again: uvicorn configures its loggers when it starts
        if app.state.manager is None:
            app.state.manager = SessionManager(**manager_kwargs)
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, app.state.manager.shutdown)

    app = FastAPI(title="nonstop", description="Realtime worlds for agents of any latency", lifespan=lifespan)
    app.state.manager = manager
    app.state.connections = 0  # open WebSocket connections (the event loop's own count: no lock)

    def mgr() -> SessionManager:
        if app.state.manager is None:
            app.state.manager = SessionManager(**manager_kwargs)
        return app.state.manager

    if token is not None:

        @app.middleware("http")
        async def require_token(request: Request, call_next: Any) -> Any:
            if not is_public(request.url.path) and not _authorized(request.headers.get("authorization"), None, token):
                return JSONResponse(
                    {"type": "error", "data": {"message": "missing or wrong bearer token", "code": "UNAUTHORIZED"}},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
            return await call_next(request)

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
                env_id: {"tick_hz": spec.tick_hz, "default_beta": spec.default_beta,
                         "description": spec.description, **spec.spaces()}
                for env_id, spec in m.specs.items()
            },  # fmt: skip
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
    def replays() -> list[dict[str, Any]]:
        return mgr().list_replays()

    from nonstop.server.openenv_http import add_openenv_routes

    add_openenv_routes(app, mgr, start_timeout=start_timeout, host=host)  # POST /reset, /step, GET /state, /mcp
    mount_live(app, mgr, token, max_connections=max_connections)  # the page at /, spectator sockets /ws/watch/{id}

    @app.websocket("/ws")
    async def websocket(ws: WebSocket) -> None:
        if token is not None and not _authorized(ws.headers.get("authorization"), ws.query_params.get("token"), token):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        if app.state.connections >= max_connections:
            await _refuse(ws, f"too many open connections ({max_connections}): retry later")
            return
        app.state.connections += 1
        try:
            await _serve_socket(ws)
        finally:
            app.state.connections -= 1

    async def _serve_socket(ws: WebSocket) -> None:
        await ws.accept()
        conn = Connection(ws, mgr(), start_timeout)
        reason = "connection lost"
        loop = asyncio.get_running_loop()
        connect_deadline = loop.time() + connect_timeout
        try:
            while True:
                if conn.session is None:  # a connection must start a session in time, or make room
                    try:
                        frame = await asyncio.wait_for(ws.receive(), max(0.0, connect_deadline - loop.time()))
                    except asyncio.TimeoutError:
                        reason = f"no session started within {connect_timeout:g}s"
                        await ws.close(code=1008, reason=reason)
                        break
                else:
                    frame = await ws.receive()
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
                    reply = await conn.handle(msg)
                except ProtocolError as exc:
                    reply = exc.reply()
                except Exception as exc:  # noqa: BLE001 - a bug must cost one reply, not the connection
                    log.exception("unexpected error handling a message")
                    reply = ErrorReply(data={"message": f"{type(exc).__name__}: {exc}", "code": "EXECUTION_ERROR"})
                await conn.send(reply)
        except WebSocketDisconnect:
            pass
        except RuntimeError as exc:  # the socket closed under us
            log.debug("websocket ended: %s", exc)
        finally:
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
    **manager_kwargs: Any,
) -> int:
    """Run the server until SIGINT/SIGTERM; sessions are ended and replays flushed before exit."""
    import uvicorn

    # The tick pool shares the GIL with the event loop; a short switch interval bounds how long
    # a JSON encode on the loop can hold a due tick back (the default 5 ms would blow a 2 ms budget).
    sys.setswitchinterval(switch_interval)
    app = create_app(None, token=token, connect_timeout=connect_timeout, max_connections=max_connections, host=host)
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

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = None, token: str | None = None,
                 start_timeout: float = 30.0, connect_timeout: float = 30.0, max_connections: int = 256,
                 log_level: str = "warning", **manager_kwargs: Any) -> None:  # fmt: skip
        import uvicorn

        self.manager = SessionManager(**manager_kwargs)
        try:
            self.app = create_app(self.manager, token=token, connect_timeout=connect_timeout,
                                  max_connections=max_connections, host=host)  # fmt: skip
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
