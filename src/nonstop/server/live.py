"""The live view: a web page at ``/`` that watches every session of the server as it ticks.

The page (``static/index.html``, ``live.js``, ``live.css``: plain files, no build step, nothing
fetched from outside this server) lists the sessions from ``GET /live/sessions`` — env, seats, tick,
inaction, delay, lateness, return — and opens a live view of each running one: the frames as they
tick, a strip of agent vs β ticks and delay, and the return. It is fed by the protocol's own
``subscribe`` verb, on a **spectator socket** ``/ws/watch/{session_id}``:

* a spectator reads another client's session and nothing more: ``observe``, ``state``, ``wait`` and
  ``subscribe`` work as on ``/ws``; ``reset``, ``step`` and ``act`` are refused with ``READ_ONLY``;
  ``close`` (or a lost spectator) closes the spectator's socket, never the session;
* watching is not activity: a watched session that its owner leaves idle is still reaped;
* at most `MAX_SPECTATORS` sockets watch one session (each holds up to two of its waits);
* when the session ends the spectator is sent a ``SESSION_ENDED`` error and its socket is closed
  (at once when subscribed, within `SPECTATOR_CHECK_S` otherwise);
* spectator sockets count among the server's open connections (``max_connections``).

A several-seat session's view also opens its **seats feed**, ``/ws/seats/{session_id}``
(`nonstop.server.livefeed`): every seat packed in 9 bytes, the world's frame deflated, at most
`nonstop.server.livefeed.MAX_FEED_HZ` updates and `nonstop.server.livefeed.MAX_FEED_BYTES_PER_S`
bytes a second a socket, `nonstop.server.livefeed.MAX_SEAT_FEEDS` sockets a session (counted apart
from its spectators, admitted as they are). ``GET /live/sessions?max_seats=4`` keeps the table's
poll small at a thousand seats; ``GET /live/sessions/{id}/seats`` is the same view as JSON.

Tokens (``nonstop serve --token``): the page and its static files are public (they hold no data and
no secret); every data request still needs the token. The page takes it from its URL fragment
(``/#token=T``: a fragment never reaches the server or its logs) or asks for it, keeps it in the
tab's ``sessionStorage`` and sends it as ``Authorization: Bearer`` on HTTP. Browsers cannot set
headers on a WebSocket, so the spectator socket also accepts the token as a subprotocol,
``nonstop.bearer.<base64url of the token>`` offered beside ``nonstop`` (`token_subprotocol`):
unlike ``?token=``, a subprotocol is never written into an access log.

Host and Origin: the page, its files, its polls and its sockets pass the app's
`nonstop.server.guard.EdgeGuard` like every route: a spectator socket opened by a page of another
origin, or addressed to a name that is not this server's, is refused before it is accepted.

>>> token_subprotocol("s3cret-token")
'nonstop.bearer.czNjcmV0LXRva2Vu'
>>> token_from_subprotocols(["nonstop", token_subprotocol("s3cret-token")])
's3cret-token'
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

from fastapi import Query, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from nonstop.server.auth import authorized, refuse_socket
from nonstop.server.connection import Connection
from nonstop.server.livefeed import MAX_SEAT_FEEDS, FeedPacer, SnapshotCache, serve_seats
from nonstop.envs.seats import team_of
from nonstop.server.liveworld import team_rows
from nonstop.server.protocol import (
    MAX_WAIT_TICKS,
    ActMessage,
    CloseMessage,
    ErrorCode,
    ErrorReply,
    ObserveMessage,
    ProtocolError,
    ResetMessage,
    StateMessage,
    StepMessage,
    SubscribeMessage,
    WaitMessage,
    parse_message,
)
from nonstop.server.sessions import SINGLE_SEAT, Lifecycle, ServerSession, SessionManager

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "MAX_SPECTATORS",
    "STATIC_DIR",
    "SUBPROTOCOL",
    "SpectatorConnection",
    "is_public",
    "mount_live",
    "seats_view",
    "session_rows",
    "token_from_subprotocols",
    "token_subprotocol",
]

log = logging.getLogger("nonstop.server")

#: the page's files, shipped as package data
STATIC_DIR: Final = Path(__file__).with_name("static")
#: the subprotocol a spectator socket speaks (offered by the page; echoed by the server)
SUBPROTOCOL: Final = "nonstop"
#: a token offered as a subprotocol: this prefix, then the token in base64url without padding
BEARER_PREFIX: Final = "nonstop.bearer."
#: spectator sockets per session (each holds up to two of the session's bounded waits)
MAX_SPECTATORS: Final = 8
#: how often a spectator socket with nothing to read checks that its session still runs (s)
SPECTATOR_CHECK_S: Final = 5.0
#: the page's policy: its own scripts, styles and sockets only; data: for nothing but drawn frames
PAGE_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}


def is_public(path: str) -> bool:
    """Paths served without a token: the page and its static files (no session data in them)."""
    return path == "/" or (path.startswith("/live/static/") and ".." not in path)


def token_subprotocol(token: str) -> str:
    """The WebSocket subprotocol that carries ``token`` (what the page offers beside ``nonstop``)."""
    if not isinstance(token, str) or not token:
        raise ValueError("token must be a non-empty string")
    return BEARER_PREFIX + base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def token_from_subprotocols(offered: list[str]) -> str | None:
    """The token carried by one of the ``offered`` subprotocols, or None."""
    for proto in offered:
        if proto.startswith(BEARER_PREFIX):
            encoded = proto[len(BEARER_PREFIX) :]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
    return None


# ----------------------------------------------------------------------------- the sessions table


def session_rows(manager: SessionManager, max_seats: int | None = None) -> list[dict[str, Any]]:
    """One row per session (running, then the recently ended), with what the page's table shows.

    ``seats`` lists each seat's counters (`ServerSession.seat_rows`: one seat, `SINGLE_SEAT`, for a
    one-seat world; a several-seat world's own seats, each held by a client or played by its β),
    the first ``max_seats`` of them when given (the page asks for 4: a thousand seats' rows every
    second were 150 KB); ``seat_count`` says how many there are and ``inaction_fraction`` is over
    all their ticks. ``lateness_p99_ms`` is over the session's recent ticks while it runs, over the
    whole run once it has ended.
    """
    rows = [_session_row(manager, info) for info in manager.list_sessions()]
    for row in rows:
        seats = row["seats"]
        idle = sum(int(s.get("inaction_ticks") or 0) for s in seats)
        ticks = idle + sum(int(s.get("agent_ticks") or 0) for s in seats)
        row["seat_count"], row["inaction_fraction"] = len(seats), idle / ticks if ticks else None
        if max_seats is not None:
            row["seats"] = seats[:max_seats]
    order = {Lifecycle.RUNNING.value: 0, Lifecycle.STARTING.value: 1, Lifecycle.CREATED.value: 1}
    rows.sort(key=lambda r: (order.get(r["lifecycle"], 2), -r["age_s"] if r["lifecycle"] == "running" else r["age_s"]))
    return rows


def _session_row(manager: SessionManager, info: dict[str, Any]) -> dict[str, Any]:
    """The table's row of the session ``info`` describes (`ServerSession.info`)."""
    summary = info.get("summary") or {}
    session = manager.get(info["session_id"])
    obs = None
    if session is not None and session.state is Lifecycle.RUNNING:
        with contextlib.suppress(ProtocolError):
            obs = session.read()
    spec = manager.specs.get(info["env"])
    if obs is not None:
        agent, inaction, delay, total = obs.agent_ticks, obs.inaction_ticks, obs.last_delay, obs.total_reward
        episode, tick = obs.episode, obs.tick
        lateness = (info.get("recent_lateness_ms") or {}).get("p99")
    else:
        agent, inaction = summary.get("agent_ticks", 0), summary.get("inaction_ticks", 0)
        delay, total, episode, tick = None, summary.get("total_reward", 0.0), None, info["tick"]
        lateness = summary.get("lateness_p99_ms")
    seats = info.get("seats") or [
        {
            "seat": SINGLE_SEAT,
            "agent_ticks": agent,
            "inaction_ticks": inaction,
            "inaction_fraction": inaction / (agent + inaction) if agent + inaction else None,
            "last_delay": delay,
        }
    ]
    return {
        "session_id": info["session_id"],
        "env": info["env"],
        "lifecycle": info["lifecycle"],
        "end_reason": info["end_reason"],
        "tick": tick,
        "tick_hz": spec.tick_hz if spec is not None else None,
        "episode": episode,
        "total_reward": total,
        "lateness_p99_ms": lateness,
        "age_s": info["age_s"],
        "seats": seats,
    }


def seats_view(session: ServerSession) -> dict[str, Any]:
    """Every seat of ``session`` at once, as the page's seat grid reads it: each seat's counters
    (`ServerSession.seat_rows`) with its ``team`` and, where the world offers positions, its
    ``position`` and whether it is ``alive`` (a seat the world no longer places has died); each
    team's summary (`team_rows`); the world's ``frame`` (None when it offers no picture)."""
    rows = session.seat_rows()
    world = session.world_view() or {"frame": None, "positions": None}
    positions = world["positions"]
    for row in rows:
        row["team"] = team_of(row["seat"])
        if positions is not None:
            row["position"] = positions.get(row["seat"])
            row["alive"] = row["position"] is not None
    alive = None if positions is None else {row["seat"]: row["alive"] for row in rows}
    return {
        "session_id": session.sid,
        "env": session.spec.env_id,
        "lifecycle": session.state.value,
        "tick": session.tick if session.state is Lifecycle.RUNNING else None,
        "seats": rows,
        "teams": team_rows(rows, alive),
        "frame": world["frame"],
    }


# ----------------------------------------------------------------------------- the spectator socket


class SpectatorConnection:
    """A read-only connection to another client's session (``/ws/watch/{session_id}``).

    It answers ``observe``, ``state``, ``wait`` and ``subscribe`` exactly as the owner's connection
    does (it delegates to a `nonstop.server.connection.Connection` bound to the session), refuses
    ``reset``, ``step`` and ``act`` with ``READ_ONLY``, never touches the session's idle timer and
    never ends the session.
    """

    def __init__(self, ws: WebSocket, manager: SessionManager, session: ServerSession) -> None:
        self.session, self.ws = session, ws
        self.reader = Connection(ws, manager, start_timeout=0.0)
        self.reader.session = session  # bound for reading only: nothing here calls its reset/close
        self._ended: asyncio.Future | None = None
        self._end_sent = False

    async def handle(self, msg: Any) -> Any:
        if isinstance(msg, (ResetMessage, StepMessage, ActMessage)):
            raise ProtocolError(
                ErrorCode.READ_ONLY,
                f"this socket watches session {self.session.sid}: it cannot {msg.type} (connect to /ws to play)",
            )
        reader = self.reader
        if isinstance(msg, StateMessage):
            return reader.state()
        session = reader.running()
        if isinstance(msg, ObserveMessage):
            return reader.observation(session.read(), msg.data.encoding)
        if isinstance(msg, WaitMessage):
            target = msg.data.target(session.tick)
            if target - session.tick > MAX_WAIT_TICKS:
                raise ProtocolError(
                    ErrorCode.VALIDATION_ERROR,
                    f"until={target} is more than {MAX_WAIT_TICKS} ticks ahead of tick {session.tick}",
                )
            return await reader.observe_at(target, msg.data.encoding)
        if isinstance(msg, SubscribeMessage):
            ack = reader.subscribe(msg.data.every, msg.data.encoding)
            if reader._subscription is not None:
                reader._subscription.add_done_callback(self._pushes_stopped)
            return ack
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {msg.type}")

    async def send(self, reply: Any) -> None:
        await self.reader.send(reply)

    def _pushes_stopped(self, task: asyncio.Task) -> None:
        # pushes stop when the session ends (not when replaced or cancelled): say so, then hang up
        if not task.cancelled() and self.session.state is not Lifecycle.RUNNING and self._ended is None:
            self._ended = asyncio.ensure_future(self.report_end())

    async def report_end(self) -> None:
        """Send ``SESSION_ENDED`` (why the session ended) and close the socket, once."""
        if self._end_sent:
            return
        self._end_sent = True
        reason = self.session.end_reason or self.session.state.value
        with contextlib.suppress(Exception):
            await self.send(
                ProtocolError(ErrorCode.SESSION_ENDED, f"session {self.session.sid} has ended ({reason})").reply()
            )
            await self.ws.close(code=1000, reason="session ended")

    def close(self) -> None:
        self.reader.stop_subscription()


def mount_live(
    app: FastAPI, manager: Callable[[], SessionManager], token: str | None, *, max_connections: int | None = None
) -> None:
    """Add the page (``/``, ``/live/static/*``), ``GET /live/sessions``, ``GET /live/sessions/{sid}/seats``,
    the spectator socket ``/ws/watch/{sid}`` and the seats feed ``/ws/seats/{sid}``
    (`nonstop.server.livefeed`) to ``app``.

    Both sockets count among the app's open connections (``app.state.connections``) and are
    refused past ``max_connections`` like any other socket; each is bounded per session.
    """
    app.state.spectators, app.state.seat_feeds = {}, {}
    if not hasattr(app.state, "connections"):
        app.state.connections = 0
    cache, pacer = SnapshotCache(), FeedPacer()

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    app.mount("/live/static", StaticFiles(directory=STATIC_DIR), name="live-static")

    @app.get("/live/sessions")
    def live_sessions(max_seats: Annotated[int | None, Query(ge=0)] = None) -> JSONResponse:
        m = manager()
        return JSONResponse(
            {
                "sessions": session_rows(m, max_seats),
                "envs": list(m.specs),
                "max_sessions": m.max_sessions,
                "spectators": dict(app.state.spectators),
            }
        )

    @app.get("/live/sessions/{sid}/seats")
    def live_seats(sid: str) -> JSONResponse:
        session = manager().get(sid)
        if session is None:
            return JSONResponse({"error": f"no session {sid}"}, status_code=404)
        return JSONResponse(seats_view(session))

    @app.websocket("/ws/watch/{sid}")
    async def watch(ws: WebSocket, sid: str) -> None:
        async with _admitted(app, ws, token, max_connections) as admitted:
            if admitted:
                async with _watching(ws, manager(), sid, app.state.spectators, MAX_SPECTATORS, "spectators") as session:
                    if session is not None:
                        await _spectate(ws, SpectatorConnection(ws, manager(), session))

    @app.websocket("/ws/seats/{sid}")
    async def seats_feed(ws: WebSocket, sid: str) -> None:
        async with _admitted(app, ws, token, max_connections) as admitted:
            if admitted:
                async with _watching(
                    ws, manager(), sid, app.state.seat_feeds, MAX_SEAT_FEEDS, "seats feeds"
                ) as session:
                    if session is not None:
                        await serve_seats(ws, session, cache, pacer)
                if sid not in app.state.seat_feeds:
                    cache.forget(sid)


@contextlib.asynccontextmanager
async def _admitted(app: FastAPI, ws: WebSocket, token: str | None, max_connections: int | None) -> AsyncIterator[bool]:
    """Accept ``ws`` (True) when its token is right and the app has room for one more connection,
    counted while it lasts; refuse it (False) otherwise."""
    offered = list(ws.scope.get("subprotocols") or [])
    if token is not None and not authorized(ws.headers.get("authorization"), token_from_subprotocols(offered), token):
        await ws.close(code=1008, reason="missing or wrong bearer token")
        yield False
        return
    if max_connections is not None and app.state.connections >= max_connections:
        await refuse_socket(ws, f"too many open connections ({max_connections}): retry later")
        yield False
        return
    app.state.connections += 1
    try:
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        yield True
    finally:
        app.state.connections -= 1


@contextlib.asynccontextmanager
async def _watching(
    ws: WebSocket, manager: SessionManager, sid: str, counts: dict[str, int], bound: int, kind: str
) -> AsyncIterator[ServerSession | None]:
    """The running session ``sid``, counted in ``counts`` while watched; None (after telling the
    socket why and closing it) when there is none or it already has ``bound`` ``kind``."""
    session = manager.get(sid)
    refusal = None
    if session is None or session.state is not Lifecycle.RUNNING:
        refusal = ProtocolError(ErrorCode.NO_SESSION, f"no running session {sid} to watch")
    elif counts.get(sid, 0) >= bound:
        refusal = ProtocolError(ErrorCode.BACKPRESSURE, f"session {sid} already has {bound} {kind}")
    if refusal is not None:
        with contextlib.suppress(Exception):
            await ws.send_text(refusal.reply().model_dump_json())
            await ws.close(code=1000, reason=refusal.code)
        yield None
        return
    counts[sid] = counts.get(sid, 0) + 1
    try:
        yield session
    finally:
        left = counts.get(sid, 1) - 1
        if left > 0:
            counts[sid] = left
        else:
            counts.pop(sid, None)
        with contextlib.suppress(Exception):
            await ws.close()


async def _spectate(ws: WebSocket, spectator: SpectatorConnection) -> None:
    """Answer a spectator's messages until it leaves or its session ends."""
    session = spectator.session
    try:
        while True:
            try:  # wake now and then: a spectator that never subscribed still hears the end
                frame = await asyncio.wait_for(ws.receive(), SPECTATOR_CHECK_S)
            except asyncio.TimeoutError:
                if session.state is not Lifecycle.RUNNING:
                    await spectator.report_end()
                    break
                continue
            if frame["type"] == "websocket.disconnect":
                break
            raw = frame.get("text")
            if raw is None:
                raw = frame.get("bytes") or b""
            try:
                msg = parse_message(raw)
                if isinstance(msg, CloseMessage):
                    break
                reply = await spectator.handle(msg)
            except ProtocolError as exc:
                reply = exc.reply()
            except Exception as exc:  # a bug must cost one reply, not the socket
                log.exception("unexpected error handling a spectator's message")
                reply = ErrorReply(data={"message": f"{type(exc).__name__}: {exc}", "code": "EXECUTION_ERROR"})
            await spectator.send(reply)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        spectator.close()
