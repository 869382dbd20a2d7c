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

Teams: on a many-seat world (``multi/battle``: 81 ``red_*`` against 81 ``blue_*``) ``start_session`` and
``join_session`` take ``team`` instead of ``seat`` and hold every seat of it, through the protocol's
team verbs (`nonstop.server.connection.TeamHold`). ``act`` then takes ``actions`` (``{seat: action}``),
``observe``, ``wait`` and ``stats`` answer for every held seat (all of them in the structured content,
totals and a few seats in the text), and ``stop_session`` gives the whole team up.

Players: each MCP client has its own (`build_mcp_server`'s ``caller``): its tools reach only the worlds
it started or joined, whatever session ids it knows. A player silent for the manager's idle timeout
gives its seats up (no disconnect tells an HTTP server that a client left).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any

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
    StateQuery,
    WaitData,
    WaitMessage,
    decode_array,
)
from nonstop.server.mcptext import (
    TEXT_OBS_VALUES as TEXT_OBS_VALUES,
    TEXT_SEATS as TEXT_SEATS,
    describe,
    describe_held,
    describe_team,
    png,
    team_stats,
    team_view,
)
from nonstop.server.sessions import SessionManager

# the text's renderers under their former names (tests and notebooks import them from here)
_describe_team, _describe = describe_team, describe

__all__ = ["build_mcp_server", "run_stdio", "tool_error_text", "team_view", "team_stats", "PLAYER", "Toolkit"]

#: who calls the tools when no MCP session says so: OpenEnv's HTTP dialect sets its own session here
#: (`nonstop.server.openenv_http`), so that each OpenEnv session has its own players too
PLAYER: ContextVar[Any] = ContextVar("nonstop_mcp_player", default=None)

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
Team = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=64,
        description="a team name (many-seat worlds: red, blue, ...; a seat's team is its name up to the last _): "
        "every seat of that team; give seat or team, not both",
    ),
]
Actions = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=64)], Action] | None,
    Field(
        min_length=1,
        description="a team's actions by seat, {seat: action} (when you hold a team; give action or actions, "
        "not both); a seat left out gets nothing this time, so its beta acts",
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
    "the session when done. On a many-seat world, start or join with team=NAME to hold every seat of a team: "
    "act then takes actions={seat: action}, and observe, wait and stats answer for all your seats."
)


class Toolkit:
    """What the tools share: the manager, the players' table and the SDK's result types.

    ``players``: the seats each MCP client plays, by client (its MCP session; an OpenEnv session;
    None for calls from this process): (session_id, seat name) -> its connection (a team's: each of
    its seats). One client's tools never reach another's worlds, whatever ids it knows."""

    def __init__(self, sessions: Callable[[], SessionManager], start_timeout: float) -> None:
        from mcp.server.mcpserver.exceptions import ToolError

        self.sessions, self.start_timeout, self.ToolError = sessions, start_timeout, ToolError
        self.players: dict[Any, dict[tuple[str, str], Connection]] = {}

    @staticmethod
    def caller(ctx: Any) -> Any:
        """The client calling a tool: OpenEnv's session if its dialect says so; over streamable HTTP,
        the MCP session where the protocol has one (its ``Mcp-Session-Id``, which the SDK checks), else
        the client's key (the ``nonstop_key`` cookie ``/mcp`` sets: the stateless protocol has no
        session). None: stdio (one client per server) or in memory, and a client that keeps no
        cookie on the stateless protocol (such clients share one table)."""
        forced = PLAYER.get()
        if forced is not None:
            return forced
        try:
            context = ctx.request_context
        except ValueError:  # called from this process, outside any request
            return None
        request = context.request
        if request is None:  # stdio: this server's only client (MCP's stateless protocol names none)
            return None
        if session_id := request.headers.get("mcp-session-id"):
            return ("mcp", session_id)
        key = getattr(request, "cookies", {}).get("nonstop_key")  # set by /mcp (routes.mcp._keyed)
        return ("key", key) if key else None

    def connection(self) -> Connection:
        return Connection(None, self.sessions(), self.start_timeout)  # no socket: no pushes

    @staticmethod
    def seat_name(conn: Connection) -> str:
        return conn.current().seat_names[conn.seat]

    def seat_or_team(self, seat: str | None, team: str | None) -> None:
        if seat is not None and team is not None:
            raise self.ToolError("VALIDATION_ERROR: give seat (one seat) or team (all of a team's seats), not both")

    def held(self, conn: Connection) -> list[str]:
        """The seats ``conn`` holds: its team's, or its one seat."""
        return list(conn.team.by_name) if conn.team is not None else [self.seat_name(conn)]

    def holding(self, conn: Connection) -> str:
        if conn.team is not None:
            return f"team {conn.team.name!r} ({len(conn.team.by_name)} seats)"
        return f"seat {self.seat_name(conn)!r}"

    def player(
        self, ctx: Any, session_id: str, seat: str | None = None, team: str | None = None, named: str | None = None
    ) -> Connection:
        """The connection that plays ``seat`` or ``team`` of ``session_id`` for the client calling
        (neither: the only one it plays there, or the one holding ``named``, the first seat an act's
        ``actions`` names)."""
        self.seat_or_team(seat, team)
        table = self.players.get(self.caller(ctx), {})
        mine = {name: conn for (sid, name), conn in table.items() if sid == session_id}
        if not mine:
            open_ = sorted({sid for sid, _ in table})
            raise self.ToolError(
                f"NO_SESSION: no session {session_id!r} played here; start one with start_session or "
                f"join one with join_session (open: {open_})"
            )
        holdings = list({id(conn): conn for conn in mine.values()}.values())
        yours = f"you hold {', '.join(self.holding(c) for c in holdings)} of session {session_id}"
        if team is not None:
            teams = [c for c in holdings if c.team is not None and c.team.name == team]
            if not teams:
                raise self.ToolError(f"SEAT_NOT_HELD: {yours}, not team {team!r}")
            return teams[0]
        if seat is not None:
            return self._seat(mine, seat, yours)
        if named is not None and named in mine:
            return mine[named]
        if len(holdings) > 1:
            raise self.ToolError(f"VALIDATION_ERROR: {yours}: say which with seat= or team=")
        return holdings[0]

    def _seat(self, mine: dict[str, Connection], seat: str, yours: str) -> Connection:
        if seat not in mine:
            raise self.ToolError(f"SEAT_NOT_HELD: {yours}, not seat {seat!r}")
        if (team_ := mine[seat].team) is not None:
            raise self.ToolError(
                f"SEAT_NOT_HELD: seat {seat!r} is held as part of team {team_.name!r}: pass team={team_.name!r} "
                "(the tools answer for every seat of it)"
            )
        return mine[seat]

    def remember(self, ctx: Any, conn: Connection) -> None:
        players = self.players
        if sum(map(len, players.values())) >= MAX_ENDED_PLAYERS:  # forget closed sessions (servers run long)
            for who, table in list(players.items()):
                for key in [k for k, c in table.items() if c.session is not None and not c.session.live]:
                    table.pop(key, None)
                if not table:
                    players.pop(who, None)
        table = players.setdefault(self.caller(ctx), {})
        for name in self.held(conn):
            table[(conn.current().sid, name)] = conn

    def forget(self, ctx: Any, session_id: str, names: list[str]) -> None:
        who = self.caller(ctx)
        table = self.players.get(who, {})
        for name in names:
            table.pop((session_id, name), None)
        if not table:
            self.players.pop(who, None)

    async def run(self, conn: Connection, msg: Any) -> Any:
        try:
            return await conn.handle(msg)
        except ProtocolError as exc:
            raise self.ToolError(f"{exc.code}: {exc.message}") from None  # reaches the model as an error result

    def message(self, cls: Any, **data: Any) -> Any:
        """Build a protocol message; a value the protocol refuses becomes a ToolError with its reason."""
        try:
            return cls(**data)
        except ValidationError as exc:
            raise self.ToolError(f"VALIDATION_ERROR: {tool_error_text(exc)}") from None

    def no_team_image(self, conn: Connection, image: bool) -> None:
        if image and conn.team is not None:
            raise self.ToolError(
                f"VALIDATION_ERROR: image=true shows one seat's frame; you hold team {conn.team.name!r}, whose "
                "seats are read as text and structured content (join one seat to see its frames)"
            )

    def result(self, conn: Connection, reply: dict[str, Any], image: bool = False) -> Any:
        """An observation's (or a team's) reply as a tool result: text, structured content, a PNG."""
        from mcp_types import CallToolResult, ImageContent, TextContent

        tick_hz = conn.current().spec.tick_hz
        if reply["type"] == "team_observation":  # a team holder: every seat in one reply
            view = team_view(reply["data"])
            arrays = {name: decode_array(seen["observation"]["obs"]) for name, seen in reply["data"]["seats"].items()}
            text = describe_team(view, arrays, tick_hz)
            return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=view)
        data = reply["data"]
        fields = {k: v for k, v in data["observation"].items() if k != "obs"}
        obs = decode_array(data["observation"]["obs"])
        text = describe(fields, data["reward"], obs, tick_hz, bool(data["done"]))
        content: list[Any] = [TextContent(type="text", text=text)]
        if image and obs is not None:
            content.append(ImageContent(type="image", data=base64.b64encode(png(obs)).decode(), mime_type="image/png"))
        return CallToolResult(
            content=content, structured_content={**fields, "reward": data["reward"], "done": data["done"]}
        )

    def seated(self, conn: Connection, reply: dict[str, Any]) -> Any:
        """A start's or join's reply: the session and the seats held (a team's: a short text; its
        structured content lists every seat)."""
        from mcp_types import CallToolResult, TextContent

        session = conn.current()
        spec = session.spec
        team = reply["type"] == "team_observation"
        out = {
            "session_id": session.sid,
            "env": spec.env_id,
            "tick_hz": spec.tick_hz,
            "action_space": spec.spaces()["action"],
            "action_meanings": spec.action_meanings,
            "default_behaviour": session.settings.default,
            "tick": reply["data"]["tick"] if team else reply["data"]["observation"]["tick"],
        }
        if spec.seats is not None:
            spaces = {name: spec.spaces()["seats"][name]["action"] for name in self.held(conn)}
            out.update(seats=list(spec.seats), action_space=next(iter(spaces.values())))
            if conn.team is None:
                out.update(seat=self.seat_name(conn))
            else:  # every held seat, and each one's action space where they differ
                out.update(team=conn.team.name, held=self.held(conn))
                if any(space != out["action_space"] for space in spaces.values()):
                    out.update(action_space=None, action_spaces=spaces)
        text = describe_held(out) if conn.team is not None else json.dumps(out, indent=2)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=out)

    def stats(self, conn: Connection, state: dict[str, Any]) -> Any:
        """A ``state`` reply as the stats tool's result (a team's: its totals and a short text)."""
        from mcp_types import CallToolResult, TextContent

        if conn.team is not None:
            session = conn.current()
            mine = set(conn.team.by_name.values())
            others = [i for i in range(len(session.seat_names)) if i not in mine]
            held_by_others = sum(session.holders[i] is not None for i in others)
            state, text = team_stats(state, conn.team.name, self.held(conn), (len(others), held_by_others))
        else:
            text = json.dumps(state, indent=2)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=state)


def build_mcp_server(manager: SessionManager | Callable[[], SessionManager], *, start_timeout: float = 60.0) -> Any:
    """An `mcp.server.mcpserver.MCPServer` whose tools drive sessions on ``manager`` (or on the
    manager a callable returns when a session starts: an app whose manager is built at startup)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name="nonstop", instructions=INSTRUCTIONS)
    kit = Toolkit(manager if callable(manager) else lambda: manager, start_timeout)
    _session_tools(_registrar(server), kit)
    _play_tools(_registrar(server), kit)
    server.players = kit.players  # type: ignore[attr-defined]  # for tests and shutdown
    return server


def _registrar(server: Any) -> Callable[[str], Callable[[Callable], Any]]:
    """``server.tool`` for a tool taking ``ctx``: its annotation names the SDK's `Context`, which the
    SDK finds by type among the tool's hints (resolved in this module, which imports the SDK lazily,
    so it is set here)."""
    from mcp.server.mcpserver import Context

    def tool(description: str) -> Callable[[Callable], Any]:
        def register(fn: Callable) -> Any:
            fn.__annotations__["ctx"] = Context
            return server.tool(description=description)(fn)

        return register

    return tool


def _session_tools(tool: Callable[[str], Callable[[Callable], Any]], kit: Toolkit) -> None:
    """start_session, join_session and stop_session: taking seats and giving them up."""

    @tool(
        "Start a realtime session. env: one of the served env ids (default: the first); "
        "seed: 0 .. 2**31-1 (default: a random one, recorded in the replay); team: on a many-seat world, "
        "hold every seat of that team (e.g. red) instead of the first seat."
    )
    async def start_session(
        ctx: Any, env: Annotated[str | None, Field(max_length=200)] = None, seed: Seed = None, team: Team = None
    ) -> Any:
        conn = kit.connection()
        data = kit.message(ResetData, env=env, seed=seed, team=team, encoding="b64")
        reply = await kit.run(conn, kit.message(ResetMessage, data=data))
        kit.remember(ctx, conn)
        return kit.seated(conn, reply)

    @tool(
        "Join a running session another player started (over MCP or WebSocket) by its "
        "session_id, taking `seat` (e.g. second_0) or, absent, the first free seat; or, with `team` (e.g. "
        "red, on a many-seat world), every seat of that team (the reply's `held` lists them). You then act "
        "for those seats against the other players; the world does not wait for any of you."
    )
    async def join_session(ctx: Any, session_id: SessionId, seat: Seat = None, team: Team = None) -> Any:
        kit.seat_or_team(seat, team)
        conn = kit.connection()
        data = kit.message(JoinData, session_id=session_id, seat=seat, team=team, encoding="b64")
        reply = await kit.run(conn, kit.message(JoinMessage, data=data))
        kit.remember(ctx, conn)
        return kit.seated(conn, reply)

    @tool(
        "Stop a session (a joined seat or team: give it up, the others play on; its beta plays "
        "it); returns its summary (and replay path when recording)."
    )
    async def stop_session(ctx: Any, session_id: SessionId, seat: Seat = None, team: Team = None) -> dict[str, Any]:
        conn = kit.player(ctx, session_id, seat, team)  # (its refusal lists the sessions this client plays)
        kit.forget(ctx, session_id, kit.held(conn))
        session = conn.current()
        conn.close("stopped by stop_session")
        if not session.live:  # it was the last seated client: wait for its replay
            await asyncio.get_running_loop().run_in_executor(None, session.finalized.wait, 30.0)
        return session.info()


def _play_tools(tool: Callable[[str], Callable[[Callable], Any]], kit: Toolkit) -> None:
    """observe, act, wait and stats: playing the seats held."""

    @tool(
        "The newest observation (text; image=true adds a PNG frame). The world keeps ticking. "
        "Holding a team: every seat's counters, reward and done in the structured content (seats), totals "
        "and a few seats in the text."
    )
    async def observe(
        ctx: Any, session_id: SessionId, image: bool = False, seat: Seat = None, team: Team = None
    ) -> Any:
        conn = kit.player(ctx, session_id, seat, team)
        kit.no_team_image(conn, image)
        return kit.result(conn, await kit.run(conn, ObserveMessage(data=ObserveData(encoding="b64"))), image)

    @tool(
        "Queue an action; returns at once. It is applied at the next tick (its delay counted). "
        "Holding a team: give actions={seat: action} (any of your seats) instead of action."
    )
    async def act(
        ctx: Any,
        session_id: SessionId,
        action: Action | None = None,
        seat: Seat = None,
        team: Team = None,
        actions: Actions = None,
    ) -> dict[str, Any]:
        conn = kit.player(ctx, session_id, seat, team, named=next(iter(actions), None) if actions else None)
        msg = kit.message(ActMessage, data=kit.message(ActionData, action=action, actions=actions))
        return (await kit.run(conn, msg)).data.model_dump()

    @tool(
        f"Wait until `ticks` more ticks have passed (1 .. {MAX_WAIT_TICKS}; the world does "
        "not stop), then observe (holding a team: every seat, as observe)."
    )
    async def wait(
        ctx: Any, session_id: SessionId, ticks: Ticks = 1, image: bool = False, seat: Seat = None, team: Team = None
    ) -> Any:
        conn = kit.player(ctx, session_id, seat, team)
        kit.no_team_image(conn, image)
        msg = kit.message(WaitMessage, data=kit.message(WaitData, ticks=ticks, encoding="b64"))
        return kit.result(conn, await kit.run(conn, msg), image)

    @tool(
        "Session stats: tick, your agent ticks vs inaction ticks, total reward, queue counters "
        "(several-seat worlds: the seats you hold under `seats`, every seat's with all_seats=true; holding a "
        "team: its totals under `team`)."
    )
    async def stats(
        ctx: Any, session_id: SessionId, seat: Seat = None, team: Team = None, all_seats: bool = False
    ) -> Any:
        conn = kit.player(ctx, session_id, seat, team)
        msg = StateMessage(data=StateQuery(seats="all" if all_seats else "mine"))
        return kit.stats(conn, (await kit.run(conn, msg)).data.model_dump())


def run_stdio(envs: list[str], *, replay_dir: str | None = None) -> int:
    """``nonstop mcp``: serve the tools on stdin/stdout until the client disconnects."""
    manager = SessionManager(envs, replay_dir=replay_dir, idle_timeout=3600.0)
    try:
        build_mcp_server(manager).run("stdio")
    finally:
        manager.shutdown()
    return 0
