"""Who may use the server: its bearer token (where it comes from: `resolve_token`, or
`generate_token`; the live page's address that carries it: `page_address`; that it is never
logged: `RedactToken`; checking it in constant time: `authorized`), and refusing a WebSocket the
server has no room for (`refuse_socket`). The app's endpoints and the live page's spectator
sockets share these.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import secrets
import socket
from urllib.parse import unquote_plus

from fastapi import WebSocket
from fastapi.responses import JSONResponse

from nonstop.server.guard import DenialNoise
from nonstop.server.protocol import ErrorCode

__all__ = [
    "TOKEN_ENV",
    "GENERATE",
    "resolve_token",
    "generate_token",
    "page_address",
    "RedactToken",
    "authorized",
    "refuse_socket",
]

#: the environment variable `nonstop serve` reads its token from (unlike ``--token``, not visible in ``ps``)
TOKEN_ENV = "NONSTOP_TOKEN"
#: ``--token generate``: a fresh random token for this run (`generate_token`)
GENERATE = "generate"


def generate_token() -> str:
    """A fresh token: 32 random bytes from `secrets`, base64url (43 characters, safe in a URL)."""
    return secrets.token_urlsafe(32)


def page_address(host: str, port: int, token: str) -> str:
    """The live page's address carrying ``token`` in its fragment (never sent to the server); on a
    wildcard bind, under this machine's name.

    >>> page_address("127.0.0.1", 8000, "abc")
    'http://127.0.0.1:8000/#token=abc'
    >>> page_address("::1", 8000, "abc")
    'http://[::1]:8000/#token=abc'
    """
    name = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    if ":" in name:
        name = f"[{name}]"
    return f"http://{name}:{port}/#token={token}"


def resolve_token(
    token: str | None = None, token_file: str | os.PathLike | None = None, environ: dict[str, str] | None = None
) -> str | None:
    """The server's bearer token: ``token`` (the command line: visible to every user in ``ps``), else
    the first line of ``token_file`` (what follows it is never read), else ``$NONSTOP_TOKEN``;
    ``None`` when none is given.

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
            with open(token_file, encoding="utf-8") as f:
                line = f.readline()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ValueError(f"cannot read the token file {token_file}: {why}") from None
        token = line.strip()
        if not token:
            raise ValueError(f"the token file {token_file} is empty on its first line, where the token goes")
    if token is None:
        token = (os.environ if environ is None else environ).get(TOKEN_ENV) or None
    return token


#: a query parameter: its key (group 2) and value; whether the key is ``token`` is decided decoded
_QUERY_PARAM = re.compile(r"((?:^|[?&;])([^=&;?\s\"'#]*)=)([^&;\s\"']*)")


def _redact_param(match: re.Match[str]) -> str:
    # the server decodes keys (?tok%65n= is ?token=), so the key is matched as the server reads it
    key = match.group(2)
    if "token" in key.lower() or (("%" in key or "+" in key) and "token" in unquote_plus(key).lower()):
        return match.group(1) + "***"
    return match.group(0)


class RedactToken(logging.Filter):
    """Rewrites ``token=VALUE`` in a log record's message and arguments as ``token=***``.

    uvicorn's access log writes each request's path with its query string, and a WebSocket client
    that cannot set headers passes ``?token=``; this filter sits on uvicorn's loggers so the token
    never reaches a handler. A key is read as the server reads it, percent-decoded: ``?tok%65n=``
    authenticates, so it is redacted too (as is any key that contains ``token``).

    >>> record = logging.LogRecord("uvicorn.access", 20, "", 0, '%s "%s"', ("1.2.3.4", "/ws?a=1&token=s3cret"), None)
    >>> RedactToken().filter(record), record.getMessage()
    (True, '1.2.3.4 "/ws?a=1&token=***"')
    >>> RedactToken.redact("/ws?TOK%65n=s3cret&a=1")
    '/ws?TOK%65n=***&a=1'
    """

    LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")

    @staticmethod
    def redact(text: str) -> str:
        if "=" not in text:
            return text
        return _QUERY_PARAM.sub(_redact_param, text)

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
        DenialNoise.noted()
    except RuntimeError:  # no "websocket.http.response" extension on this server
        await ws.close(code=1013, reason=message)


def authorized(header: str | None, query: str | None, token: str) -> bool:
    candidates = []
    if header and header.lower().startswith("bearer "):
        candidates.append(header[7:].strip())
    if query:
        candidates.append(query)
    return any(hmac.compare_digest(c.encode(), token.encode()) for c in candidates)
