"""MCP tools for LLM agents: drive realtime worlds that keep ticking between tool calls.

``nonstop mcp`` serves, over stdio with the official ``mcp`` SDK, the same verbs as the WebSocket
protocol, as tools: ``start_session``, ``join_session``, ``observe`` (structured text, and a PNG
frame on request), ``act``, ``wait``, ``stats`` and ``stop_session``. The sessions live in this process, on the same
`SessionManager` and tick pool as ``nonstop serve``: while the model thinks, the world goes on and
β acts, and ``stats`` tells the model how much of the world it actually controlled (its inaction)
and how stale its actions were when applied (its delay).

Seats: ``join_session`` takes a seat (named, or the first free one) of a running several-seat session
that another client started, over MCP or over the WebSocket on the same server (``/mcp`` beside
``/ws``), so an LLM plays against a bot in one match. The other tools then act for that seat; where
this MCP server plays several seats of one session, they take ``seat`` to say which. ``stop_session``
on a joined seat gives the seat up (its β plays it); the session ends with its last seated client.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
from pydantic import Field, ValidationError

from nonstop.server.connection import Connection
from nonstop.server.protocol import (
    MAX_WAIT_TICKS,
    ActionData,
    ActMessage,
    JoinData,
    JoinMessage,
    ObserveData,
    ObserveMessage,
    ProtocolError,
    ResetData,
    ResetMessage,
    StateMessage,
    WaitData,
    WaitMessage,
    decode_array,
)
from nonstop.server.sessions import SessionManager

__all__ = ["build_mcp_server", "run_stdio", "tool_error_text"]

#: The tools' argument types: their bounds travel in each tool's JSON Schema, and the SDK checks
#: them before a tool runs, answering a bad value with the bound it broke.
SessionId = Annotated[str, Field(min_length=1, max_length=64, description="a session_id from start_session")]
Seed = Annotated[int | None, Field(ge=0, le=2**31 - 1, description="seed of the world's RNG (0 .. 2**31-1)")]
Ticks = Annotated[int, Field(ge=1, le=MAX_WAIT_TICKS, description=f"ticks to wait (1 .. {MAX_WAIT_TICKS})")]
Action = Annotated[int | list[float], Field(description="a Discrete action index, or a list of floats for a Box")]
Seat = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=64,
        description="a seat name (several-seat worlds: "
        "first_0, second_0, ...); absent: the only seat you hold in that session",
    ),
]


#: players kept before ended sessions are forgotten (an ended one still answers SESSION_ENDED until then)
MAX_ENDED_PLAYERS = 256


def tool_error_text(exc: ValidationError) -> str:
    """One line per rejected field: ``field: reason (got value)``."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
    return "invalid arguments: " + "; ".join(parts)


INSTRUCTIONS = (
    "These tools drive realtime worlds: a world ticks on its own clock (e.g. 60 ticks per second) and never "
    "waits for you. When you have no action queued, a default behaviour (beta) acts and the tick counts as "
    "inaction. Start a session (or join a seat of another player's session with join_session), observe, act "
    "(returns at once), wait a number of ticks if useful, and read stats to see your inaction and delay. Stop "
    "the session when done."
)


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    arr = np.asarray(frame)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.dtype != np.uint8:
        lo, hi = float(arr.min()), float(arr.max())
        arr = ((arr - lo) / (hi - lo or 1.0) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _describe(
    fields: dict[str, Any], reward: float | None, obs: np.ndarray | None, tick_hz: float, done: bool = False
) -> str:
    tick = fields["tick"]
    lines = [
        f"tick {tick} ({tick / tick_hz:.2f} s of world time), episode {fields['episode']}",
        f"reward since your last look: {reward if reward is not None else 0.0:+g}; "
        f"total reward: {fields['total_reward']:g}",
        f"ticks you acted on: {fields['agent_ticks']}; ticks beta acted on (your inaction): {fields['inaction_ticks']}",
    ]
    if done:
        how = "terminated" if fields["terminated"] else "truncated" if fields["truncated"] else "ended"
        lines.append(
            f"the episode {how} since your last look (this is its final observation); "
            "the world has already started the next one"
        )
    if fields["last_delay"] >= 0:
        lines.append(f"your last applied action was computed from an observation {fields['last_delay']} ticks old")
    if obs is not None:
        if obs.size <= 64:
            lines.append(f"observation: {np.round(obs, 4).tolist()}")
        else:
            lines.append(f"observation: a {'x'.join(map(str, obs.shape))} {obs.dtype} frame (observe with image=true)")
    return "\n".join(lines)


def build_mcp_server(manager: SessionManager | Callable[[], SessionManager], *, start_timeout: float = 60.0) -> Any:
    """An `mcp.server.mcpserver.MCPServer` whose tools drive sessions on ``manager`` (or on the
    manager a callable returns when a session starts: an app whose manager is built at startup)."""
    sessions = manager if callable(manager) else lambda: manager
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, ImageContent, TextContent

    server = MCPServer(name="nonstop", instructions=INSTRUCTIONS)
    #: every seat this MCP server plays: (session_id, seat name) -> its connection
    players: dict[tuple[str, str], Connection] = {}

    def seat_name(conn: Connection) -> str:
        return conn.current().seat_names[conn.seat]

    def player(session_id: str, seat: str | None = None) -> Connection:
        mine = {name: conn for (sid, name), conn in players.items() if sid == session_id}
        if not mine:
            open_ = sorted({sid for sid, _ in players})
            raise ToolError(
                f"NO_SESSION: no session {session_id!r} played here; start one with start_session or "
                f"join one with join_session (open: {open_})"
            )
        if seat is None:
            if len(mine) > 1:
                raise ToolError(
                    f"VALIDATION_ERROR: you hold seats {sorted(mine)} of session {session_id}: say which with seat="
                )
            return next(iter(mine.values()))
        if seat not in mine:
            raise ToolError(f"SEAT_NOT_HELD: you hold seats {sorted(mine)} of session {session_id}, not {seat!r}")
        return mine[seat]

    def remember(conn: Connection) -> None:
        if len(players) >= MAX_ENDED_PLAYERS:  # forget closed sessions (HTTP servers run for long)
            ended = [k for k, c in players.items() if c.session is not None and not c.session.live]
            for old in ended[: len(players) // 2]:
                players.pop(old, None)
        players[(conn.current().sid, seat_name(conn))] = conn

    async def run(conn: Connection, msg: Any) -> Any:
        try:
            return await conn.handle(msg)
        except ProtocolError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from None  # reaches the model as an error result

    def message(cls: Any, **data: Any) -> Any:
        """Build a protocol message; a value the protocol refuses becomes a ToolError with its reason."""
        try:
            return cls(**data)
        except ValidationError as exc:
            raise ToolError(f"VALIDATION_ERROR: {tool_error_text(exc)}") from None

    def result(conn: Connection, reply: dict[str, Any], image: bool = False) -> Any:
        data = reply["data"]
        fields = {k: v for k, v in data["observation"].items() if k != "obs"}
        obs = decode_array(data["observation"]["obs"])
        text = _describe(fields, data["reward"], obs, conn.current().spec.tick_hz, bool(data["done"]))
        content: list[Any] = [TextContent(type="text", text=text)]
        if image and obs is not None:
            import base64

            content.append(ImageContent(type="image", data=base64.b64encode(_png(obs)).decode(), mime_type="image/png"))
        return CallToolResult(
            content=content, structured_content={**fields, "reward": data["reward"], "done": data["done"]}
        )

    @server.tool(
        description="Start a realtime session. env: one of the served env ids (default: the first); "
        "seed: 0 .. 2**31-1 (default: a random one, recorded in the replay)."
    )
    async def start_session(
        env: Annotated[str | None, Field(max_length=200)] = None, seed: Seed = None
    ) -> dict[str, Any]:
        conn = Connection(None, sessions(), start_timeout)  # no socket: no pushes
        reply = await run(conn, message(ResetMessage, data=message(ResetData, env=env, seed=seed, encoding="b64")))
        remember(conn)
        return seated(conn, reply)

    def seated(conn: Connection, reply: dict[str, Any]) -> dict[str, Any]:
        session = conn.current()
        spec = session.spec
        out = {
            "session_id": session.sid,
            "env": spec.env_id,
            "tick_hz": spec.tick_hz,
            "action_space": spec.spaces()["action"],
            "action_meanings": spec.action_meanings,
            "default_behaviour": session.settings.default,
            "tick": reply["data"]["observation"]["tick"],
        }
        if spec.seats is not None:
            out.update(
                seat=seat_name(conn),
                seats=list(spec.seats),
                action_space=spec.spaces()["seats"][seat_name(conn)]["action"],
            )
        return out

    @server.tool(
        description="Join a running session another player started (over MCP or WebSocket) by its "
        "session_id, taking `seat` (e.g. second_0) or, absent, the first free seat. You then act for that "
        "seat against the other players; the world does not wait for any of you."
    )
    async def join_session(session_id: SessionId, seat: Seat = None) -> dict[str, Any]:
        conn = Connection(None, sessions(), start_timeout)  # no socket: no pushes
        reply = await run(
            conn, message(JoinMessage, data=message(JoinData, session_id=session_id, seat=seat, encoding="b64"))
        )
        remember(conn)
        return seated(conn, reply)

    @server.tool(description="The newest observation (text; image=true adds a PNG frame). The world keeps ticking.")
    async def observe(session_id: SessionId, image: bool = False, seat: Seat = None) -> Any:
        conn = player(session_id, seat)
        return result(conn, await run(conn, ObserveMessage(data=ObserveData(encoding="b64"))), image)

    @server.tool(description="Queue an action; returns at once. It is applied at the next tick (its delay counted).")
    async def act(session_id: SessionId, action: Action, seat: Seat = None) -> dict[str, Any]:
        conn = player(session_id, seat)
        return (await run(conn, message(ActMessage, data=message(ActionData, action=action)))).data.model_dump()

    @server.tool(
        description=f"Wait until `ticks` more ticks have passed (1 .. {MAX_WAIT_TICKS}; the world does "
        "not stop), then observe."
    )
    async def wait(session_id: SessionId, ticks: Ticks = 1, image: bool = False, seat: Seat = None) -> Any:
        conn = player(session_id, seat)
        msg = message(WaitMessage, data=message(WaitData, ticks=ticks, encoding="b64"))
        return result(conn, await run(conn, msg), image)

    @server.tool(
        description="Session stats: tick, your agent ticks vs inaction ticks, total reward, queue counters "
        "(several-seat worlds: every seat's under `seats`)."
    )
    async def stats(session_id: SessionId, seat: Seat = None) -> dict[str, Any]:
        conn = player(session_id, seat)
        return (await run(conn, StateMessage())).data.model_dump()

    @server.tool(
        description="Stop a session (a joined seat: give it up, the others play on); returns its summary "
        "(and replay path when recording)."
    )
    async def stop_session(session_id: SessionId, seat: Seat = None) -> dict[str, Any]:
        try:
            conn = player(session_id, seat)
        except ToolError as exc:
            raise ToolError(f"{exc} (open: {sorted({sid for sid, _ in players})})") from None
        players.pop((session_id, seat_name(conn)), None)
        session = conn.current()
        conn.close("stopped by stop_session")
        if not session.live:  # it was the last seated client: wait for its replay
            import asyncio

            await asyncio.get_running_loop().run_in_executor(None, session.finalized.wait, 30.0)
        return session.info()

    server.players = players  # type: ignore[attr-defined]  # for tests and shutdown
    return server


def run_stdio(envs: list[str], *, replay_dir: str | None = None) -> int:
    """``nonstop mcp``: serve the tools on stdin/stdout until the client disconnects."""
    manager = SessionManager(envs, replay_dir=replay_dir, idle_timeout=3600.0)
    try:
        build_mcp_server(manager).run("stdio")
    finally:
        manager.shutdown()
    return 0
