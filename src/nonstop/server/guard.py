"""The server's edge: which requests may reach a route at all (Jupyter's defaults for a local server).

A server on 127.0.0.1 is reachable by every web page the user's browser opens: a page can post a
form to it, open a WebSocket to it, or rebind its own DNS name to 127.0.0.1 and read the replies.
`EdgeGuard`, one ASGI middleware in front of every route (HTTP and WebSocket, both ``/mcp``
dialects alike), refuses those before any route runs:

* **Host** (421): the ``Host`` header must name this server: ``localhost``, a loopback address,
  the address it binds (on a non-loopback bind, any IP address; on ``0.0.0.0``, this machine's
  name too), or a name given with ``--allow-host``. A DNS-rebinding page sends its own name, so
  it is refused.
* **Origin** (403): a request from a browser page carries ``Origin``; it must be this server's own
  origin (the live page), a loopback origin on this server's port, or one given with
  ``--allow-origin``. No ``Origin`` (curl, httpx, websockets, the MCP SDK) passes.
* **JSON only** (415): a POST (or PUT, PATCH, DELETE) that declares a ``Content-Type`` other
  than JSON, or sends a body without one, is refused: a cross-site form (``text/plain``,
  urlencoded, multipart) or a ``no-cors`` fetch cannot send ``application/json``.

Each refusal is one JSON error naming the flag that would allow it. The checks read a few headers
once per request or socket handshake: nothing on a socket's frames.

>>> policy = EdgePolicy.build("127.0.0.1")
>>> policy.host_allowed("localhost:8000"), policy.host_allowed("evil.example:8000")
(True, False)
>>> policy.origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000", 8000)
True
>>> policy.origin_allowed("http://evil.example", "127.0.0.1:8000", 8000)
False
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = ["DenialNoise", "EdgeGuard", "EdgePolicy", "is_loopback", "is_wildcard", "split_host"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: names that always mean this machine (RFC 6761: browsers never ask DNS for them)
LOOPBACK_NAMES: Final = frozenset({"localhost"})
#: bind addresses that mean "every interface"
WILDCARDS: Final = frozenset({"0.0.0.0", "::", ""})
DEFAULT_PORTS: Final = {"http": 80, "ws": 80, "https": 443, "wss": 443}
#: methods that change nothing here: their bodies are never read, so their type is not checked
READS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def split_host(value: str) -> tuple[str, int | None]:
    """A ``Host`` header (or a URL's authority) as (lower-case name without brackets, port or None).

    >>> split_host("[::1]:8000"), split_host("LocalHost."), split_host("example.com:x")
    (('::1', 8000), ('localhost', None), ('example.com:x', None))
    """
    value = value.strip().lower()
    name, port = value, None
    if value.startswith("["):  # [v6]:port
        end = value.find("]")
        name, rest = value[1:end] if end > 0 else value, value[end + 1 :] if end > 0 else ""
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif value.count(":") == 1:  # name:port (a bare v6 address has several colons)
        head, _, tail = value.partition(":")
        if tail.isdigit():
            name, port = head, int(tail)
    return name.rstrip("."), port


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (``localhost``, 127.0.0.0/8, ``::1``).

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    name, _ = split_host(host)
    address = _ip(name)
    return name in LOOPBACK_NAMES or (address is not None and address.is_loopback)


def is_wildcard(host: str) -> bool:
    """Whether binding ``host`` listens on every interface (``0.0.0.0``, ``::``)."""
    return split_host(host)[0] in WILDCARDS


@dataclass(frozen=True)
class EdgePolicy:
    """Which ``Host`` names and ``Origin`` values reach the server (see the module's docstring).

    ``hosts``: names allowed besides the loopback ones (lower case; ``*`` allows any);
    ``origins``: origins allowed besides this server's own (``scheme://host[:port]``, lower case,
    default port dropped); ``any_ip``: every IP address is a name of this server (a non-loopback
    bind: a DNS-rebinding page always sends a name, never an address).
    """

    hosts: frozenset[str]
    origins: frozenset[str]
    any_ip: bool

    @classmethod
    def build(cls, bind: str, allow_hosts: Iterable[str] = (), allow_origins: Iterable[str] = ()) -> EdgePolicy:
        """The policy of a server bound to ``bind``, with the user's ``--allow-host`` and
        ``--allow-origin`` values (each checked: a bad one raises a one-line `ValueError`)."""
        hosts = {check_host_name(h) for h in allow_hosts}
        bind_name = split_host(bind)[0]
        if bind_name not in WILDCARDS:
            hosts.add(bind_name)
        elif not is_loopback(bind):  # every interface: this machine's own name too
            hosts.add(socket.gethostname().lower())
        return cls(frozenset(hosts), frozenset(normal_origin(o) for o in allow_origins), not is_loopback(bind))

    def host_allowed(self, host: str | None) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is addressed to this server (no
        header: not a browser, which always sends one)."""
        if host is None or "*" in self.hosts:
            return True
        name, _ = split_host(host)
        if name in LOOPBACK_NAMES or name in self.hosts:
            return True
        address = _ip(name)
        return address is not None and (address.is_loopback or self.any_ip)

    def origin_allowed(self, origin: str, host: str | None, port: int | None) -> bool:
        """Whether a page of ``origin`` may use the server reached as ``host`` on local ``port``:
        the server's own origin (the live page), a loopback origin on ``port``, or one allowed."""
        if origin.lower() in self.origins:
            return True
        parts = urlsplit(origin.lower())
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:  # "null" (a sandbox, a file), garbage
            return False
        try:
            origin_port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError:
            return False
        name = parts.hostname
        if host is not None:
            host_name, host_port = split_host(host)
            if host_name == name and (host_port or DEFAULT_PORTS[parts.scheme]) == origin_port:
                return True  # same origin: the server's own page (Host itself was allowed first)
        address = _ip(name)
        loopback = name in LOOPBACK_NAMES or (address is not None and address.is_loopback)
        return loopback and origin_port == port


def check_host_name(value: str) -> str:
    """An ``--allow-host`` value, checked: a host name or address (no scheme, path or port), or ``*``."""
    name = value.strip().lower().rstrip(".")
    if name == "*":
        return name
    if not name or any(c in name for c in "/@?#") or split_host(name)[1] is not None:
        raise ValueError(f"--allow-host takes a host name such as game.example.com (any port), got {value!r}")
    return split_host(name)[0]


def normal_origin(value: str) -> str:
    """An ``--allow-origin`` value as browsers send it: ``scheme://host[:port]``, lower case, its
    default port dropped.

    >>> normal_origin("HTTPS://Game.Example.com:443/")
    'https://game.example.com'
    """
    parts = urlsplit(value.strip().lower())
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or parts.path not in ("", "/"):
        raise ValueError(f"--allow-origin takes an origin such as https://game.example.com, got {value!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + ("" if port in (None, DEFAULT_PORTS[parts.scheme]) else f":{port}")


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class EdgeGuard:
    """ASGI middleware: `EdgePolicy`'s Host and Origin checks on every request and WebSocket
    handshake, and JSON-only bodies on every HTTP request; a refused one never reaches the app."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], policy: EdgePolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":  # lifespan
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
        elif kind == "http":
            await _send_http(send, *refusal)
        else:
            await _refuse_socket(scope, receive, send, *refusal)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """(HTTP status, code, message) when the request is refused, else None."""
        host = origin = content_type = None
        has_body = False
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
            elif key == b"content-type":
                content_type = value.decode("latin-1")
            elif key == b"content-length":
                has_body = value.strip() not in (b"0", b"")
            elif key == b"transfer-encoding":
                has_body = True
        policy = self.policy
        if not policy.host_allowed(host):
            name = split_host(host or "")[0]
            return (
                421,
                "HOST_NOT_ALLOWED",
                f"Host {host!r} does not name this server (a DNS-rebinding page?): reach it as "
                f"127.0.0.1 or localhost, or start it with --allow-host {name or 'NAME'}",
            )
        if origin is not None:
            server = scope.get("server")
            port = server[1] if server else None
            if not policy.origin_allowed(origin, host, port):
                return (
                    403,
                    "ORIGIN_NOT_ALLOWED",
                    f"a page from {origin} may not use this server (only its own page may): start it "
                    f"with --allow-origin {origin} to allow that page",
                )
        if scope["type"] == "http" and scope["method"] not in READS and (content_type is not None or has_body):
            if content_type is None or not _is_json(content_type):
                return (
                    415,
                    "UNSUPPORTED_MEDIA_TYPE",
                    f"this server takes JSON bodies only (Content-Type: application/json), got "
                    f"{content_type or 'a body without a Content-Type'}",
                )
        return None


def _body(code: str, message: str) -> bytes:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}}).encode()


async def _send_http(send: Send, status: int, code: str, message: str) -> None:
    body = _body(code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DenialNoise(logging.Filter):
    """Drops the ERROR line uvicorn's websockets-sansio protocol writes after every WebSocket
    refused with an HTTP response, "ASGI callable returned without completing handshake." (it
    never marks a denial as a finished handshake: Kludex/uvicorn#3138), one line per denial this
    process sent (`noted`), so a page that knocks on the socket cannot fill the log with errors and
    a real incomplete handshake is still logged."""

    MESSAGE: Final = "ASGI callable returned without completing handshake."
    pending = 0  # denials sent whose line has not been seen yet (the event loop's own count)

    @classmethod
    def noted(cls) -> None:
        """One denial was sent: its one line is expected."""
        cls.pending += 1

    def filter(self, record: logging.LogRecord) -> bool:
        if DenialNoise.pending > 0 and record.msg == self.MESSAGE:
            DenialNoise.pending -= 1
            return False
        return True

    @classmethod
    def install(cls) -> None:
        """One filter on uvicorn's error logger (idempotent)."""
        logger = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls())


async def _refuse_socket(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str) -> None:
    """Refuse a WebSocket handshake: the HTTP status and JSON body where the server can send
    them, else close code 1008 (policy violation) with the message as its reason."""
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        DenialNoise.noted()
        body = _body(code, message)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
