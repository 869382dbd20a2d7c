"""``/mcp``: two dialects of JSON-RPC over HTTP, to the same tools (`nonstop.server.mcp`).

* **MCP's streamable HTTP transport** (MCP Inspector, the ``mcp`` SDK's client, LLM hosts), served
  by the official SDK's `StreamableHTTPSessionManager`;
* **OpenEnv's** (its ``MCPToolClient``): a plain JSON reply per POST, sessions opened and closed
  with ``openenv/session/create`` / ``openenv/session/close``, and ``params.session_id`` on
  ``tools/list`` and ``tools/call``. A request is OpenEnv's when its method is ``openenv/…`` or its
  params carry ``session_id`` (MCP's own params never do). Closing an OpenEnv session stops every
  world its tool calls started.

The endpoint is an ASGI app added to the app's routes (`mount_mcp`), so the edge's middleware
(`nonstop.server.guard.EdgeGuard`, the token's check) wraps both dialects like every other route.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeGuard

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from nonstop.server.openenv_http import KEY_COOKIE
from nonstop.server.protocol import ErrorCode, ProtocolError
from nonstop.server.sessions import SessionManager

__all__ = ["McpEndpoint", "OpenEnvMcpSessions", "mount_mcp", "MAX_OPENENV_SESSIONS", "MAX_MCP_BODY"]

#: OpenEnv MCP sessions open at once (each is only a name and the worlds it started)
MAX_OPENENV_SESSIONS = 1024
#: largest /mcp request body read here (MCP tool calls are small)
MAX_MCP_BODY = 1 << 20
LOOPBACK = ("127.0.0.1", "localhost", "::1")

# JSON-RPC error codes
INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVER_ERROR = -32600, -32601, -32602, -32000


def _keyed(scope: dict, send: Callable) -> tuple[dict, Callable]:
    """``scope`` and ``send`` of an ``/mcp`` request that carries its client's key: MCP's stateless
    streamable HTTP has no session to say which client calls a tool, so a request without the
    ``nonstop_key`` cookie is given one (in its scope, for the tools, and as ``Set-Cookie`` on its
    reply, which the SDK's HTTP client and browsers send back)."""
    headers = [(k, v) for k, v in scope.get("headers", [])]
    cookies = b"; ".join(v for k, v in headers if k == b"cookie").decode("latin-1")
    if any(part.strip().startswith(f"{KEY_COOKIE}=") for part in cookies.split(";")):
        return scope, send
    key = secrets.token_urlsafe(24)
    headers.append((b"cookie", f"{KEY_COOKIE}={key}".encode()))
    cookie = f"{KEY_COOKIE}={key}; HttpOnly; Path=/; SameSite=strict".encode()

    async def send_keyed(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
        await send(message)

    return {**scope, "headers": headers}, send_keyed


class OpenEnvMcpSessions:
    """OpenEnv's HTTP MCP sessions: a name per client and the worlds its tool calls started."""

    def __init__(self) -> None:
        self.worlds: dict[str, set[str]] = {}

    def create(self) -> str:
        if len(self.worlds) >= MAX_OPENENV_SESSIONS:
            raise ProtocolError(ErrorCode.CAPACITY_REACHED, f"{MAX_OPENENV_SESSIONS} MCP sessions are open: close one")
        sid = uuid.uuid4().hex
        self.worlds[sid] = set()
        return sid


def _rpc_result(request_id: Any, result: Any) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})


def _rpc_error(request_id: Any, code: int, message: str) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _is_openenv(request: Any) -> TypeGuard[dict[str, Any]]:
    if not isinstance(request, dict):
        return False
    method, params = request.get("method"), request.get("params")
    return isinstance(method, str) and (
        method.startswith("openenv/") or (isinstance(params, dict) and "session_id" in params)
    )


class McpEndpoint:
    """The ASGI app at ``/mcp``: OpenEnv's dialect here, everything else to the MCP SDK.

    The MCP server (and the SDK, ~30 MB once imported) is built at the first request, and its
    session manager runs on a task of its own until `aclose` (the app's shutdown)."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self.mcp: Any = None
        self.openenv = OpenEnvMcpSessions()
        self._lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def ready(self) -> Any:
        if self.mcp is not None:
            return self.mcp
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.mcp is None:
                mcp, started, self._stop = self._build(), asyncio.Event(), (stop := asyncio.Event())

                async def run() -> None:  # a task group is entered and left on one task
                    async with mcp.session_manager.run():
                        started.set()
                        await stop.wait()

                self._task = asyncio.create_task(run())
                waiter = asyncio.create_task(started.wait())
                await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if not started.is_set():  # the session manager failed to start: say why, every time
                    waiter.cancel()
                    task, self._task = self._task, None
                    task.result()
                self.mcp = mcp
        return self.mcp

    async def aclose(self) -> None:
        if self._task is not None and self._stop is not None:  # both set by ready()
            self._stop.set()
            with contextlib.suppress(Exception):
                await self._task
            self._task = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        await self.ready()
        if scope["method"] != "POST":
            await self.mcp.session_manager.asgi_app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_MCP_BODY:
                await JSONResponse({"detail": f"request body over {MAX_MCP_BODY} bytes"}, 413)(scope, receive, send)
                return
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        if _is_openenv(request):
            await (await self.openenv_call(request))(scope, receive, send)
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        scope, send = _keyed(scope, send)
        await self.mcp.session_manager.asgi_app(scope, replay, send)

    async def openenv_call(self, request: dict) -> JSONResponse:
        """One request of OpenEnv's dialect (``MCPToolClient`` in production mode)."""
        from mcp.server.mcpserver.exceptions import ToolError

        from nonstop.server.mcp import PLAYER

        rid, method, params = request.get("id"), request["method"], request.get("params") or {}
        if not isinstance(params, dict):
            return _rpc_error(rid, INVALID_PARAMS, "params must be an object")
        if method == "openenv/session/create":
            try:
                return _rpc_result(rid, {"session_id": self.openenv.create()})
            except ProtocolError as exc:
                return _rpc_error(rid, SERVER_ERROR, f"{exc.code}: {exc.message}")
        sid = params.get("session_id")
        worlds = self.openenv.worlds.get(sid) if isinstance(sid, str) else None
        if worlds is None or not isinstance(sid, str):  # (sid is a str wherever worlds were found)
            return _rpc_error(rid, INVALID_PARAMS, f"Unknown session_id: {sid!r} (openenv/session/create opens one)")
        owner = PLAYER.set(("openenv", sid))  # the tools' players are this OpenEnv session's own
        try:
            return await self._openenv_session_call(rid, method, params, sid, worlds, ToolError)
        finally:
            PLAYER.reset(owner)

    async def _openenv_session_call(
        self, rid: Any, method: str, params: dict, sid: str, worlds: set[str], ToolError: type[Exception]
    ) -> JSONResponse:
        if method == "openenv/session/close":
            for world in list(self.openenv.worlds.pop(sid)):
                with contextlib.suppress(Exception):
                    await self.mcp.call_tool("stop_session", {"session_id": world})
            return _rpc_result(rid, {"session_id": sid, "closed": True})
        if method == "tools/list":
            tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in await self.mcp.list_tools()]
            return _rpc_result(rid, {"tools": tools})
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not isinstance(arguments, dict):
                return _rpc_error(rid, INVALID_PARAMS, "tools/call needs params.name (a string) and params.arguments")
            try:
                result = await self.mcp.call_tool(name, arguments)
            except ToolError as exc:
                return _rpc_error(rid, INVALID_PARAMS, str(exc))
            except Exception as exc:  # an unexpected failure costs this call only
                return _rpc_error(rid, SERVER_ERROR, f"tool {name!r} failed: {type(exc).__name__}")
            payload = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            if payload.get("isError"):
                text = " ".join(c.get("text", "") for c in payload.get("content", []))
                return _rpc_error(rid, INVALID_PARAMS, text or f"tool {name!r} failed")
            payload["data"] = payload.get("structuredContent")  # OpenEnv's client returns result["data"]
            if name == "start_session" and isinstance(payload["data"], dict):
                worlds.add(payload["data"]["session_id"])
            elif name == "stop_session":
                worlds.discard(arguments.get("session_id"))
            return _rpc_result(rid, payload)
        return _rpc_error(rid, METHOD_NOT_FOUND, f"Method not found: {method}")


def mount_mcp(app: FastAPI, manager: Callable[[], SessionManager], *, start_timeout: float, host: str) -> None:
    """Add ``/mcp`` to ``app``, its MCP server built at the first request and closed before the
    app's own shutdown. ``host`` is the address the server binds: on a loopback address the MCP
    SDK refuses requests whose ``Host``/``Origin`` is not local (its DNS-rebinding protection);
    elsewhere ("0.0.0.0": the app's `EdgeGuard` checks both dialects already) it is left off."""

    def build() -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        from nonstop.server.mcp import build_mcp_server

        mcp_server = build_mcp_server(manager, start_timeout=start_timeout)
        security = None if host in LOOPBACK else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        mcp_server.streamable_http_app(streamable_http_path="/mcp", host=host, transport_security=security)
        return mcp_server

    endpoint = McpEndpoint(build)
    app.state.mcp = endpoint
    app.add_route("/mcp", endpoint, methods=["GET", "POST", "DELETE"])  # type: ignore[arg-type]  # an ASGI app: Starlette's Route serves a non-function endpoint as one, its annotation names request handlers only

    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[Any]:
        async with inner(a) as state:
            try:
                yield state
            finally:
                await endpoint.aclose()  # before the manager's shutdown (inner's exit)

    app.router.lifespan_context = lifespan
