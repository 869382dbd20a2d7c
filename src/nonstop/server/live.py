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

Tokens (``nonstop serve --token``): the page and its static files are public (they hold no data and
no secret); every data request still needs the token. The page takes it from its URL fragment
(``/#token=T``: a fragment never reaches the server or its logs) or asks for it, keeps it in the
tab's ``sessionStorage`` and sends it as ``Authorization: Bearer`` on HTTP. Browsers cannot set
headers on a WebSocket, so the spectator socket also accepts the token as a subprotocol,
``nonstop.bearer.<base64url of the token>`` offered beside ``nonstop`` (`token_subprotocol`):
unlike ``?token=``, a subprotocol is never written into an access log.

Host and Origin: the page, its files, its polls and its spectator sockets pass the app's
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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fastapi import WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from nonstop.server.auth import authorized, refuse_socket
from nonstop.server.connection import Connection
from nonstop.server.liveworld import team_of, team_rows
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


def session_rows(manager: SessionManager) -> list[dict[str, Any]]:
    """One row per session (running, then the recently ended), with what the page's table shows.

    ``seats`` lists each seat's counters (`ServerSession.seat_rows`: one seat, `SINGLE_SEAT`, for a
    one-seat world; a several-seat world's own seats, each held by a client or played by its β);
    ``lateness_p99_ms`` is over the session's recent ticks while it runs, over the whole
    run once it has ended.
    """
    rows = []
    for info in manager.list_sessions():
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
        rows.append(
            {
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
        )
    order = {Lifecycle.RUNNING.value: 0, Lifecycle.STARTING.value: 1, Lifecycle.CREATED.value: 1}
    rows.sort(key=lambda r: (order.get(r["lifecycle"], 2), -r["age_s"] if r["lifecycle"] == "running" else r["age_s"]))
    return rows


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
    """Add the page (``/``, ``/live/static/*``), ``GET /live/sessions`` and ``/ws/watch/{sid}`` to ``app``.

    Spectator sockets count among the app's open connections (``app.state.connections``) and are
    refused past ``max_connections`` like any other socket.
    """
    app.state.spectators = {}
    if not hasattr(app.state, "connections"):
        app.state.connections = 0

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    app.mount("/live/static", StaticFiles(directory=STATIC_DIR), name="live-static")

    @app.get("/live/sessions")
    def live_sessions() -> JSONResponse:
        m = manager()
        return JSONResponse(
            {
                "sessions": session_rows(m),
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
        offered = list(ws.scope.get("subprotocols") or [])
        if token is not None and not authorized(
            ws.headers.get("authorization"), token_from_subprotocols(offered), token
        ):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        if max_connections is not None and app.state.connections >= max_connections:
            await refuse_socket(ws, f"too many open connections ({max_connections}): retry later")
            return
        app.state.connections += 1
        try:
            await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
            await _spectate(ws, sid)
        finally:
            app.state.connections -= 1

    async def _spectate(ws: WebSocket, sid: str) -> None:
        session = manager().get(sid)
        refusal = None
        if session is None or session.state is not Lifecycle.RUNNING:
            refusal = ProtocolError(ErrorCode.NO_SESSION, f"no running session {sid} to watch")
        elif app.state.spectators.get(sid, 0) >= MAX_SPECTATORS:
            refusal = ProtocolError(ErrorCode.BACKPRESSURE, f"session {sid} already has {MAX_SPECTATORS} spectators")
        if refusal is not None:
            with contextlib.suppress(Exception):
                await ws.send_text(refusal.reply().model_dump_json())
                await ws.close(code=1000, reason=refusal.code)
            return
        assert session is not None  # refused above otherwise
        app.state.spectators[sid] = app.state.spectators.get(sid, 0) + 1
        spectator = SpectatorConnection(ws, manager(), session)
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
            left = app.state.spectators.get(sid, 1) - 1
            if left > 0:
                app.state.spectators[sid] = left
            else:
                app.state.spectators.pop(sid, None)
            with contextlib.suppress(Exception):
                await ws.close()
