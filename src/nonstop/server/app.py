"""The HTTP + WebSocket face of the server (FastAPI; served by uvicorn).

``/ws`` speaks `nonstop.server.protocol`: one session per connection, OpenEnv's lockstep verbs and
the realtime ones. The event loop only parses, reads slots, submits actions and awaits futures the
tick pool resolves; worlds tick on the pool (`nonstop.server.sessions`). Every refused request is
an ``error`` reply with a code; the connection and every other session carry on.

HTTP: ``/health`` (503 when ticks stop advancing), ``/metadata``, ``/schema``, ``/sessions``,
``/sessions/{id}``, ``/replays``. With a token, every request needs ``Authorization: Bearer TOKEN``
(WebSockets may pass ``?token=TOKEN`` instead, for clients that cannot set headers). The live page
(``/``, its static files, ``/live/sessions`` and read-only spectator sockets ``/ws/watch/{id}``) is
`nonstop.server.live`; only the page's files are served without the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from nonstop.realtime.channels import Observation
from nonstop.server.live import is_public, mount_live
from nonstop.server.protocol import (
    MAX_WAIT_TICKS,
    MESSAGE_TYPES,
    AckReply,
    ActMessage,
    CloseMessage,
    ErrorCode,
    ErrorReply,
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

__all__ = ["create_app", "serve", "ServerThread", "free_port", "DEFAULT_PORT"]

log = logging.getLogger("nonstop.server")
DEFAULT_PORT = 8000
#: uvicorn closes the socket above this; below it and above MAX_MESSAGE_BYTES we answer with an error
WS_FRAME_LIMIT = 1 << 20
#: uvicorn settings of every server: no per-message deflate (compressing a 100 KB frame costs
#: milliseconds of GIL-held CPU that the tick pool needs; frames travel on a LAN or loopback)
UVICORN_WS: dict[str, Any] = {"ws_max_size": WS_FRAME_LIMIT, "ws_per_message_deflate": False, "lifespan": "on"}


@dataclass
class _View:
    """What one reader was last sent, so that ``reward`` and ``done`` are "since then"."""

    tick: int = -1
    total_reward: float = 0.0
    episode: int = 0

    def payload(self, obs: Observation, session: ServerSession, encoding: str) -> dict[str, Any]:
        reward = obs.total_reward - self.total_reward
        done = obs.episode != self.episode or obs.terminated or obs.truncated
        self.tick, self.total_reward, self.episode = obs.tick, obs.total_reward, obs.episode
        return {
            "observation": {
                "obs": encode_array(obs.obs, encoding),
                "tick": obs.tick,
                "time": obs.time,
                "episode": obs.episode,
                "terminated": obs.terminated,
                "truncated": obs.truncated,
                "total_reward": obs.total_reward,
                "inaction_ticks": obs.inaction_ticks,
                "agent_ticks": obs.agent_ticks,
                "last_delay": obs.last_delay,
                "session_id": session.sid,
                "lifecycle": session.state.value,
            },
            "reward": reward,
            "done": done,
        }


class Connection:
    """One client and its session (at most one at a time): the protocol's verbs, transport-free.

    The WebSocket endpoint feeds it parsed messages and sends what `handle` returns; the MCP tools
    (`nonstop.server.mcp`) drive it the same way with ``ws=None`` (then there are no pushes).
    """

    def __init__(self, ws: WebSocket, manager: SessionManager, start_timeout: float) -> None:
        self.ws = ws
        self.manager = manager
        self.start_timeout = start_timeout
        self.session: ServerSession | None = None
        self.view = _View()
        self.config: SessionConfig | None = None
        self.episode = 0  # the episode the client's last reset returned
        self._send_lock = asyncio.Lock()
        self._subscription: asyncio.Task | None = None

    async def send(self, reply: Any) -> None:
        # observation replies are built as dicts on the hot path (no second validation of big arrays)
        text = json.dumps(reply) if isinstance(reply, dict) else reply.model_dump_json()
        async with self._send_lock:
            await self.ws.send_text(text)

    def running(self) -> ServerSession:
        if self.session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        self.session._require_running()
        return self.session

    def _encoding(self, requested: str | None) -> str:
        return requested or self.session.settings.encoding

    async def handle(self, msg: Any) -> Any:
        if self.session is not None:
            self.session.touch()
        if isinstance(msg, ResetMessage):
            return await self.reset(msg)
        if isinstance(msg, StateMessage):
            return self.state()
        session = self.running()
        if isinstance(msg, (StepMessage, ActMessage)):
            obs_tick = msg.data.obs_tick if msg.data.obs_tick is not None else max(self.view.tick, 0)
            seq, tick = session.submit(msg.data.action, obs_tick, self.view.episode)
            if isinstance(msg, ActMessage):
                return AckReply(data={"seq": seq, "tick": tick, "obs_tick": obs_tick})
            return await self.observe_at(tick + 1, None)  # the tick that applies it
        if isinstance(msg, ObserveMessage):
            return self.observation(session.read(), msg.data.encoding)
        if isinstance(msg, WaitMessage):
            target = msg.data.until if msg.data.until is not None else session.tick + msg.data.ticks
            if target - session.tick > MAX_WAIT_TICKS:
                raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"until={target} is more than {MAX_WAIT_TICKS} ticks "
                                    f"ahead of tick {session.tick}")  # fmt: skip
            return await self.observe_at(target, msg.data.encoding)
        if isinstance(msg, SubscribeMessage):
            return self.subscribe(msg.data.every, msg.data.encoding)
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {msg.type}")

    def observation(self, obs: Observation, encoding: str | None) -> dict[str, Any]:
        """An `ObservationReply`, as a dict."""
        return {"type": "observation", "data": self.view.payload(obs, self.session, self._encoding(encoding))}

    async def observe_at(self, target: int, encoding: str | None) -> dict[str, Any]:
        session = self.running()
        await session.wait_tick(target, asyncio.get_running_loop())
        return self.observation(session.read(), encoding)

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
                self.manager.end(session, "restarted by reset")
            self.session = session = self.manager.create(config, seed=data.seed, episode_id=data.episode_id)
            self.config = config
            self.view = _View()
            await self.manager.start(session, timeout=self.start_timeout)
            obs = session.read()
        else:
            obs = session.read()
            if obs.episode == self.episode:  # the episode the client reset into is still on: end it
                session.request_reset()
                loop = asyncio.get_running_loop()
                while obs.episode == self.episode:
                    await session.wait_tick(session.tick + 1, loop)
                    obs = self.running().read()
            session.settings.episode_id = data.episode_id
        self.episode = obs.episode
        reply = self.observation(obs, None)
        reply["data"]["reward"] = None
        reply["data"]["done"] = False
        return reply

    def state(self) -> StateReply:
        session = self.session
        if session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        obs = session.read() if session.state is Lifecycle.RUNNING else None
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
                "inaction_ticks": obs.inaction_ticks if obs else session.summary.get("inaction_ticks", 0),
                "agent_ticks": obs.agent_ticks if obs else session.summary.get("agent_ticks", 0),
                "total_reward": obs.total_reward if obs else session.summary.get("total_reward", 0.0),
                "queue": session.queue.counters() if obs and session.queue is not None else {},
                "record": session.settings.record,
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
        view = _View()
        loop = asyncio.get_running_loop()
        target = session.tick + every
        try:
            while session.state is Lifecycle.RUNNING:
                await session.wait_tick(target, loop)
                if session.state is not Lifecycle.RUNNING:
                    break
                obs = session.read()
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
        if self.session is not None:
            self.manager.end(self.session, reason)


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
    **manager_kwargs: Any,
) -> FastAPI:
    """The FastAPI app. It owns ``manager`` (built from ``manager_kwargs`` if not given) and shuts
    it down, flushing every replay, when the app stops."""
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise ValueError("token must be a string of at least 8 characters")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if app.state.manager is None:
            app.state.manager = SessionManager(**manager_kwargs)
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, app.state.manager.shutdown)

    app = FastAPI(title="nonstop", description="Realtime worlds for agents of any latency", lifespan=lifespan)
    app.state.manager = manager

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

    mount_live(app, mgr, token)  # the page at /, /live/sessions, spectator sockets /ws/watch/{id}

    @app.websocket("/ws")
    async def websocket(ws: WebSocket) -> None:
        if token is not None and not _authorized(ws.headers.get("authorization"), ws.query_params.get("token"), token):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        await ws.accept()
        conn = Connection(ws, mgr(), start_timeout)
        reason = "connection lost"
        try:
            while True:
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
    **manager_kwargs: Any,
) -> int:
    """Run the server until SIGINT/SIGTERM; sessions are ended and replays flushed before exit."""
    import uvicorn

    # The tick pool shares the GIL with the event loop; a short switch interval bounds how long
    # a JSON encode on the loop can hold a due tick back (the default 5 ms would blow a 2 ms budget).
    sys.setswitchinterval(switch_interval)
    manager = SessionManager(list(envs or ["Boxing"]), **manager_kwargs)
    app = create_app(manager, token=token)
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
    """A real uvicorn server on a background thread of this process (tests, examples, notebooks).

    >>> # with ServerThread(envs=["theory/inaction"]) as server:   # doctest: +SKIP
    >>> #     Client(server.url).reset()
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = None, token: str | None = None,
                 start_timeout: float = 30.0, **manager_kwargs: Any) -> None:  # fmt: skip
        import uvicorn

        self.manager = SessionManager(**manager_kwargs)
        self.app = create_app(self.manager, token=token)
        self.port = port or free_port(host)
        self.url = f"ws://{host}:{self.port}"
        config = uvicorn.Config(self.app, host=host, port=self.port, log_level="warning", **UVICORN_WS)
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
