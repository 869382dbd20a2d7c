"""OpenEnv's HTTP face beside the WebSocket: ``POST /reset``, ``POST /step``, ``GET /state``, and
the MCP endpoint ``/mcp``.

HTTP sessions. OpenEnv's HTTP routes carry no connection, so a session started by ``POST /reset``
is named by the ``session_id`` in its replies and bound to its client's **key**: a secret that the
first ``/reset`` sets as the ``nonstop_key`` cookie (HTTP clients with a cookie jar, such as an
``httpx.Client`` or a ``requests.Session``, send it back unasked) and that a client may send as the
``X-Nonstop-Key`` header instead. ``/step``, ``/state`` and a later ``/reset`` take ``session_id``
(a body field, or a query parameter of ``/state``) and, without one, act on the most recent session
of the key they present, as OpenEnv's one-env HTTP server does; a session of another key is refused
(403, ``SEAT_NOT_HELD``): one client can neither step nor restart another's. Bodies are OpenEnv's shapes
(``{"seed": 7}``; ``{"action": {"action": 1}}``) and so are replies (``observation``, ``reward``,
``done``). Refusals keep the protocol's codes, with an HTTP status: 422 for a bad value, 404 for
an unknown session, 410 for an ended one, 503 (``Retry-After``) at capacity or under backpressure.
An idle HTTP session ends like any other (the manager's idle timeout).

The routes themselves are `nonstop.server.routes.openenv` (``/reset``, ``/step``, ``/state``) and
`nonstop.server.routes.mcp` (``/mcp``'s two dialects, MCP's streamable HTTP and OpenEnv's); this
module keeps what they share: the HTTP players, the client's key and the refusals' statuses.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from nonstop.server.connection import Connection
from nonstop.server.protocol import ErrorCode, ProtocolError, ResetData, ResetMessage
from nonstop.server.sessions import SessionManager

__all__ = [
    "HttpPlayers",
    "HTTP_STATUS",
    "KEY_COOKIE",
    "client_key",
    "refusal",
    "validation_error",
]

#: HTTP status of each refusal code (anything else: 400)
HTTP_STATUS: dict[str, int] = {
    ErrorCode.VALIDATION_ERROR.value: 422,
    ErrorCode.ACTION_OUT_OF_RANGE.value: 422,
    ErrorCode.INVALID_JSON.value: 422,
    ErrorCode.UNKNOWN_TYPE.value: 422,
    ErrorCode.MESSAGE_TOO_LARGE.value: 413,
    ErrorCode.NO_SESSION.value: 404,
    ErrorCode.SESSION_ENDED.value: 410,
    ErrorCode.CAPACITY_REACHED.value: 503,
    ErrorCode.BACKPRESSURE.value: 503,
    ErrorCode.FACTORY_ERROR.value: 500,
    ErrorCode.EXECUTION_ERROR.value: 500,
    ErrorCode.SESSION_ERROR.value: 409,
    ErrorCode.SEAT_NOT_HELD.value: 403,
    ErrorCode.SEAT_TAKEN.value: 409,
    ErrorCode.SESSION_FULL.value: 409,
    ErrorCode.UNKNOWN_SEAT.value: 422,
    ErrorCode.UNKNOWN_TEAM.value: 422,
}
#: the cookie (or header) that binds OpenEnv HTTP sessions to the client that started them
KEY_COOKIE, KEY_HEADER = "nonstop_key", "x-nonstop-key"


def refusal(exc: ProtocolError) -> JSONResponse:
    status = HTTP_STATUS.get(exc.code, 400)
    headers = {"Retry-After": "1"} if status == 503 else None
    body = {"type": "error", "data": {"message": exc.message, "code": exc.code}, "detail": exc.message}
    return JSONResponse(body, status_code=status, headers=headers)


def validation_error(exc: ValidationError, what: str) -> ProtocolError:
    detail = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or what}: {e['msg']}" for e in exc.errors())
    return ProtocolError(ErrorCode.VALIDATION_ERROR, f"invalid {what}: {detail}")


class HttpPlayers:
    """The connections that HTTP clients drive (no socket), by session id, newest last, each with
    the key of the client that started it (its connection's holder identity on the wire)."""

    def __init__(self, manager: Callable[[], SessionManager], start_timeout: float) -> None:
        self._manager = manager
        self.start_timeout = start_timeout
        self._conns: OrderedDict[str, tuple[str, Connection]] = OrderedDict()

    def get(self, sid: str | None, key: str | None) -> Connection:
        """The connection of session ``sid`` (None: the newest of ``key``'s), if ``key`` started it."""
        if sid is None:
            mine = [conn for owner, conn in self._conns.values() if key is not None and _same(owner, key)]
            if not mine:
                raise ProtocolError(
                    ErrorCode.NO_SESSION,
                    "no HTTP session of yours: POST /reset first (its reply sets the nonstop_key cookie, "
                    "which later calls present, or send it as the X-Nonstop-Key header)",
                )
            return mine[-1]
        entry = self._conns.get(sid)
        if entry is None:
            raise ProtocolError(ErrorCode.NO_SESSION, f"no HTTP session {sid!r}: POST /reset starts one")
        owner, conn = entry
        if key is None or not _same(owner, key):
            raise ProtocolError(
                ErrorCode.SEAT_NOT_HELD,
                f"HTTP session {sid} was started by another client: only the key its /reset set "
                "(the nonstop_key cookie, or the X-Nonstop-Key header) reaches it",
            )
        return conn

    async def reset(self, sid: str | None, key: str | None, data: ResetData) -> tuple[dict[str, Any], str]:
        """Reset ``sid`` (None: start a new session) for the client with ``key`` (None: a new client,
        given a fresh key); returns the reply's data and the key."""
        self._prune()
        if sid is not None:
            conn = self.get(sid, key)
        else:
            conn = Connection(None, self._manager(), self.start_timeout)  # no socket: no pushes
        key = key or secrets.token_urlsafe(24)
        old = conn.session.sid if conn.session is not None else None
        reply = await conn.handle(ResetMessage(data=data))
        session = conn.current()
        if old is not None and old != session.sid:
            self._conns.pop(old, None)
        self._conns[session.sid] = (key, conn)
        self._conns.move_to_end(session.sid)
        return reply["data"], key

    def _prune(self) -> None:
        for sid, (_, conn) in list(self._conns.items()):
            if conn.session is None or not conn.session.live:
                del self._conns[sid]


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def client_key(request: Request) -> str | None:
    """The client's key: the ``X-Nonstop-Key`` header, else the ``nonstop_key`` cookie."""
    return request.headers.get(KEY_HEADER) or request.cookies.get(KEY_COOKIE) or None
