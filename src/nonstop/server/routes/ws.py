"""``/ws``: the protocol's socket (`nonstop.server.protocol`), one session per connection.

The door: the token (header, or ``?token=`` for clients that cannot set one), then the open
connection count (``max_connections`` in all, an eighth of it from one remote address; this
machine's own clients share 127.0.0.1 and count only in the total). Then `SocketLoop` reads
frames, hands each message to the connection's `Connection` and sends its reply; a bug costs one
reply, never the connection.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from nonstop.server.auth import authorized, refuse_socket
from nonstop.server.connection import Connection
from nonstop.server.guard import is_loopback
from nonstop.server.protocol import CloseMessage, ErrorReply, ProtocolError, parse_message
from nonstop.server.routes import manager_of

__all__ = ["router", "EARLY_FRAMES"]

log = logging.getLogger("nonstop.server")
router = APIRouter()

#: frames a WebSocket client may send while its previous message is handled (a long wait), read and
#: kept in order; past them the socket is not read until that message is answered
EARLY_FRAMES = 16


@router.websocket("/ws")
async def websocket(ws: WebSocket) -> None:
    app, settings = ws.app, ws.app.state.settings
    token = settings.token
    if token is not None and not authorized(ws.headers.get("authorization"), ws.query_params.get("token"), token):
        await ws.close(code=1008, reason="missing or wrong bearer token")
        return
    if app.state.connections >= settings.max_connections:
        await refuse_socket(ws, f"too many open connections ({settings.max_connections}): retry later")
        return
    address = ws.client.host if ws.client is not None else ""
    counted = bool(address) and not is_loopback(address)
    held = app.state.by_address.get(address, 0)
    if counted and held >= settings.per_address:
        await refuse_socket(ws, f"too many open connections from {address} ({settings.per_address}): retry later")
        return
    app.state.connections += 1
    if counted:
        app.state.by_address[address] = held + 1
    try:
        await ws.accept()
        conn = Connection(ws, manager_of(app), settings.start_timeout, end_grace=settings.connect_timeout)
        await SocketLoop(ws, conn, settings.connect_timeout).run()
    finally:
        app.state.connections -= 1
        if counted:
            left = app.state.by_address.pop(address) - 1
            if left:
                app.state.by_address[address] = left


class SocketLoop:
    """One accepted socket's life: read a frame, handle it, reply, until the client leaves.

    The socket is read all the while a message is handled (a wait can take minutes), so a client
    that hangs up mid-wait is seen at once and its wait dropped; frames that arrive meanwhile are
    kept in order (up to `EARLY_FRAMES`)."""

    def __init__(self, ws: WebSocket, conn: Connection, connect_timeout: float) -> None:
        self.ws, self.conn, self.connect_timeout = ws, conn, connect_timeout
        self.reason = "connection lost"
        self.early: collections.deque[dict[str, Any]] = collections.deque()
        self.receiving: asyncio.Future[Any] | None = None
        self.connect_deadline = asyncio.get_running_loop().time() + connect_timeout

    async def run(self) -> None:
        try:
            while (frame := await self.next_frame()) is not None:
                if frame["type"] == "websocket.disconnect":
                    break
                reply = await self.answer(frame)
                if reply is None:
                    break
                await self.conn.send(reply)
        except WebSocketDisconnect:
            pass
        except RuntimeError as exc:  # the socket closed under us
            log.debug("websocket ended: %s", exc)
        finally:
            if self.receiving is not None:
                self.receiving.cancel()
            self.conn.close(self.reason)
            with contextlib.suppress(Exception):
                await self.ws.close()

    async def next_frame(self) -> dict[str, Any] | None:
        """The next frame (an early one first); None when a connection started no session in time."""
        if self.early:
            return self.early.popleft()
        self.receiving = self.receiving or asyncio.ensure_future(self.ws.receive())
        if self.conn.session is None:  # a connection must start a session in time, or make room
            left = max(0.0, self.connect_deadline - asyncio.get_running_loop().time())
            try:
                frame = await asyncio.wait_for(asyncio.shield(self.receiving), left)
            except asyncio.TimeoutError:
                self.reason = f"no session started within {self.connect_timeout:g}s"
                await self.ws.close(code=1008, reason=self.reason)
                return None
        else:
            frame = await self.receiving
        self.receiving = None
        return frame

    async def answer(self, frame: dict[str, Any]) -> Any:
        """The reply to one frame; None when the client closed or hung up meanwhile."""
        raw = frame.get("text")
        if raw is None:
            raw = frame.get("bytes") or b""
        try:
            msg = parse_message(raw)
            if isinstance(msg, CloseMessage):
                self.reason = "closed by client"
                return None
            return await self.handle(msg)
        except ProtocolError as exc:
            return exc.reply()
        except _HungUp:
            return None
        except Exception as exc:  # a bug must cost one reply, not the connection
            log.exception("unexpected error handling a message")
            return ErrorReply(data={"message": f"{type(exc).__name__}: {exc}", "code": "EXECUTION_ERROR"})

    async def handle(self, msg: Any) -> Any:
        """``msg``'s reply, reading the socket meanwhile; raises `_HungUp` if the client left."""
        handling = asyncio.ensure_future(self.conn.handle(msg))
        while not handling.done() and len(self.early) < EARLY_FRAMES:
            self.receiving = self.receiving or asyncio.ensure_future(self.ws.receive())
            await asyncio.wait((handling, self.receiving), return_when=asyncio.FIRST_COMPLETED)
            if self.receiving.done():
                self.early.append(self.receiving.result())
                self.receiving = None
                if self.early[-1]["type"] == "websocket.disconnect":
                    handling.cancel()  # its caller hung up: a wait leaves the session now
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await handling
                    raise _HungUp
        return await handling


class _HungUp(Exception):
    """The client hung up while its message was handled."""
