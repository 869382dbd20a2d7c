"""Who may use the server: its bearer token (where it comes from: `resolve_token`; that it is never
logged: `RedactToken`; checking it in constant time: `authorized`), and refusing a WebSocket the
server has no room for (`refuse_socket`). The app's endpoints and the live page's spectator
sockets share these.
"""

from __future__ import annotations

import hmac
import logging
import os
import re

from fastapi import WebSocket
from fastapi.responses import JSONResponse

from nonstop.server.protocol import ErrorCode

__all__ = ["TOKEN_ENV", "resolve_token", "RedactToken", "authorized", "refuse_socket"]

#: the environment variable `nonstop serve` reads its token from (unlike ``--token``, not visible in ``ps``)
TOKEN_ENV = "NONSTOP_TOKEN"


def resolve_token(
    token: str | None = None, token_file: str | os.PathLike | None = None, environ: dict[str, str] | None = None
) -> str | None:
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


async def refuse_socket(ws: WebSocket, message: str) -> None:
    """Refuse a WebSocket before its handshake: HTTP 503 with a ``CAPACITY_REACHED`` body (close code
    1013, "try again later", where the server cannot send an HTTP response to a socket)."""
    body = {"type": "error", "data": {"message": message, "code": ErrorCode.CAPACITY_REACHED.value}}
    try:
        await ws.send_denial_response(JSONResponse(body, status_code=503, headers={"Retry-After": "1"}))
    except RuntimeError:  # no "websocket.http.response" extension on this server
        await ws.close(code=1013, reason=message)


def authorized(header: str | None, query: str | None, token: str) -> bool:
    candidates = []
    if header and header.lower().startswith("bearer "):
        candidates.append(header[7:].strip())
    if query:
        candidates.append(query)
    return any(hmac.compare_digest(c.encode(), token.encode()) for c in candidates)
