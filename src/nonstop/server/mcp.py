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

import io
import json
from collections.abc import Callable
from contextvars import ContextVar
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

__all__ = ["build_mcp_server", "run_stdio", "tool_error_text", "PLAYER"]

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

#: seats a team's text summary shows one by one (its structured content has every seat)
TEXT_SEATS = 6
#: an observation of at most this many values is written out in the text
TEXT_OBS_VALUES = 64


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
        if obs.size <= TEXT_OBS_VALUES:
            lines.append(f"observation: {np.round(obs, 4).tolist()}")
        else:
            lines.append(f"observation: a {'x'.join(map(str, obs.shape))} {obs.dtype} frame (observe with image=true)")
    return "\n".join(lines)


def _few(names: list[str]) -> str:
    """``a, b, c``, or past `TEXT_SEATS` names the first few and how many more."""
    if len(names) <= TEXT_SEATS:
        return ", ".join(names)
    return f"{', '.join(names[:TEXT_SEATS])}, ... ({len(names) - TEXT_SEATS} more)"


def team_view(data: dict[str, Any]) -> dict[str, Any]:
    """A ``team_observation`` reply's data as a tool's structured content: each held seat's counters (its
    observation's fields but the array), ``reward`` and ``done`` since the previous look, and the
    team's totals."""
    seats: dict[str, dict[str, Any]] = {}
    for name, seen in data["seats"].items():
        fields = {k: v for k, v in seen["observation"].items() if k not in ("obs", "session_id", "lifecycle", "seat")}
        seats[name] = {**fields, "reward": seen["reward"], "done": seen["done"]}
    done = [name for name, row in seats.items() if row["done"]]
    return {
        "team": data["team"],
        "session_id": data["session_id"],
        "lifecycle": next(iter(data["seats"].values()))["observation"]["lifecycle"],
        "tick": data["tick"],
        "seats_held": len(seats),
        "reward": sum(row["reward"] or 0.0 for row in seats.values()),
        "done": bool(done),
        "done_seats": done,
        "total_reward": sum(row["total_reward"] for row in seats.values()),
        "agent_ticks": sum(row["agent_ticks"] for row in seats.values()),
        "inaction_ticks": sum(row["inaction_ticks"] for row in seats.values()),
        "seats": seats,
    }


def _describe_team(view: dict[str, Any], obs: dict[str, np.ndarray | None], tick_hz: float) -> str:
    """A team's observation for a model to read: totals, the seats whose episodes ended, and the first
    `TEXT_SEATS` seats one by one (81 seats' full observations would drown it)."""
    seats, tick, n = view["seats"], view["tick"], view["seats_held"]
    lines = [
        f"team {view['team']}: you hold {n} seats; tick {tick} ({tick / tick_hz:.2f} s of world time)",
        f"reward since your last look: {view['reward']:+g} over your seats; total reward: {view['total_reward']:g}",
        f"ticks your seats acted on: {view['agent_ticks']}; ticks beta acted on (your inaction): "
        f"{view['inaction_ticks']} (summed over your {n} seats)",
    ]
    delays = [row["last_delay"] for row in seats.values() if row["last_delay"] >= 0]
    if delays:
        span = f"{min(delays)}" if min(delays) == max(delays) else f"{min(delays)} to {max(delays)}"
        lines.append(
            f"your last applied actions were computed from observations {span} ticks old "
            f"({len(delays)} of {n} seats have acted)"
        )
    if view["done_seats"]:
        lines.append(
            f"episodes ended since your last look (each such seat shows its final observation; an agent that died "
            f"leaves its seat to beta): {_few(view['done_seats'])}"
        )
    lines.append(
        "your seats:" if n <= TEXT_SEATS else f"the first {TEXT_SEATS} of your {n} seats (all in structured content):"
    )
    for name in list(seats)[:TEXT_SEATS]:
        row, arr = seats[name], obs.get(name)
        delay = row["last_delay"] if row["last_delay"] >= 0 else "none yet"
        line = (
            f"  {name}: reward {row['reward'] or 0.0:+g}, total {row['total_reward']:g}, acted {row['agent_ticks']}, "
            f"inaction {row['inaction_ticks']}, delay {delay}{', episode ended' if row['done'] else ''}"
        )
        if arr is not None and arr.size <= TEXT_OBS_VALUES:
            line += f", observation {np.round(arr, 4).tolist()}"
        lines.append(line)
    big = next((a for a in obs.values() if a is not None and a.size > TEXT_OBS_VALUES), None)
    if big is not None:
        lines.append(f"observations: a {'x'.join(map(str, big.shape))} {big.dtype} array per seat (not shown as text)")
    return "\n".join(lines)


def _describe_held(out: dict[str, Any]) -> str:
    """A team start's or join's reply for a model to read (its structured content lists every seat)."""
    space = out["action_space"]
    spaces = f"each seat's action space: {json.dumps(space)}" if space else "action spaces by seat: see action_spaces"
    return "\n".join(
        [
            f"you hold team {out['team']} of session {out['session_id']} ({out['env']}, {out['tick_hz']:g} ticks/s, "
            f"tick {out['tick']}): {len(out['held'])} seats ({_few(out['held'])}) of the world's {len(out['seats'])}",
            spaces,
            "act with actions={seat: action} for any of your seats; a seat you leave out is played by its beta "
            f"({out['default_behaviour']}) until your action comes",
        ]
    )


def team_stats(state: dict[str, Any], team: str, held: list[str]) -> tuple[dict[str, Any], str]:
    """``stats`` for a team holder: the session's state with the team's totals under ``team``, and a
    short text (every seat's counters stay in the structured content's ``seats``)."""
    rows = {row["seat"]: row for row in state.get("seats") or []}
    mine = [rows[name] for name in held if name in rows]
    others = [row for name, row in rows.items() if name not in set(held)]
    totals = {
        "name": team,
        "seats": held,
        "agent_ticks": sum(row["agent_ticks"] for row in mine),
        "inaction_ticks": sum(row["inaction_ticks"] for row in mine),
        "total_reward": sum(row["total_reward"] for row in mine),
    }
    ended = f" ({state['end_reason']})" if state.get("end_reason") else ""
    tick = state["tick"]
    text = "\n".join(
        [
            f"session {state['session_id']} ({state['env']}): {state['lifecycle']}{ended}, tick {tick} "
            f"({tick / state['tick_hz']:.2f} s of world time)",
            f"team {team}: you hold {len(held)} seats ({_few(held)})",
            f"ticks your seats acted on: {totals['agent_ticks']}; ticks beta acted on (your inaction): "
            f"{totals['inaction_ticks']}; total reward: {totals['total_reward']:g}",
            f"the world's other {len(others)} seats: {sum(r['held'] for r in others)} held by other clients, "
            f"the rest played by their beta",
            "every seat's counters are in the structured content (seats; your team's totals under team)",
        ]
    )
    return {**state, "team": totals}, text


def build_mcp_server(manager: SessionManager | Callable[[], SessionManager], *, start_timeout: float = 60.0) -> Any:
    """An `mcp.server.mcpserver.MCPServer` whose tools drive sessions on ``manager`` (or on the
    manager a callable returns when a session starts: an app whose manager is built at startup)."""
    sessions = manager if callable(manager) else lambda: manager
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, ImageContent, TextContent

    from mcp.server.mcpserver import Context

    server = MCPServer(name="nonstop", instructions=INSTRUCTIONS)
    #: the seats each MCP client plays, by client (its MCP session; an OpenEnv session; None for calls
    #: from this process): (session_id, seat name) -> its connection (a team's: each of its seats).
    #: One client's tools never reach another's worlds, whatever ids it knows.
    players: dict[Any, dict[tuple[str, str], Connection]] = {}

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
        key = getattr(request, "cookies", {}).get("nonstop_key")  # set by /mcp (openenv_http._keyed)
        return ("key", key) if key else None

    def tool(description: str) -> Callable[[Callable], Any]:
        """``server.tool`` for a tool taking ``ctx``: its annotation names the SDK's `Context`, which
        the SDK finds by type among the tool's hints (resolved in this module, which imports the SDK
        lazily, so it is set here)."""

        def register(fn: Callable) -> Any:
            fn.__annotations__["ctx"] = Context
            return server.tool(description=description)(fn)

        return register

    def seat_name(conn: Connection) -> str:
        return conn.current().seat_names[conn.seat]

    def seat_or_team(seat: str | None, team: str | None) -> None:
        if seat is not None and team is not None:
            raise ToolError("VALIDATION_ERROR: give seat (one seat) or team (all of a team's seats), not both")

    def held(conn: Connection) -> list[str]:
        """The seats ``conn`` holds: its team's, or its one seat."""
        return list(conn.team.by_name) if conn.team is not None else [seat_name(conn)]

    def holding(conn: Connection) -> str:
        if conn.team is not None:
            return f"team {conn.team.name!r} ({len(conn.team.by_name)} seats)"
        return f"seat {seat_name(conn)!r}"

    def player(
        ctx: Any, session_id: str, seat: str | None = None, team: str | None = None, named: str | None = None
    ) -> Connection:
        """The connection that plays ``seat`` or ``team`` of ``session_id`` for the client calling
        (neither: the only one it plays there, or the one holding ``named``, the first seat an act's
        ``actions`` names)."""
        seat_or_team(seat, team)
        table = players.get(caller(ctx), {})
        mine = {name: conn for (sid, name), conn in table.items() if sid == session_id}
        if not mine:
            open_ = sorted({sid for sid, _ in table})
            raise ToolError(
                f"NO_SESSION: no session {session_id!r} played here; start one with start_session or "
                f"join one with join_session (open: {open_})"
            )
        holdings = list({id(conn): conn for conn in mine.values()}.values())
        yours = f"you hold {', '.join(holding(c) for c in holdings)} of session {session_id}"
        if team is not None:
            teams = [c for c in holdings if c.team is not None and c.team.name == team]
            if not teams:
                raise ToolError(f"SEAT_NOT_HELD: {yours}, not team {team!r}")
            return teams[0]
        if seat is not None:
            if seat not in mine:
                raise ToolError(f"SEAT_NOT_HELD: {yours}, not seat {seat!r}")
            if (team_ := mine[seat].team) is not None:
                raise ToolError(
                    f"SEAT_NOT_HELD: seat {seat!r} is held as part of team {team_.name!r}: pass team={team_.name!r} "
                    "(the tools answer for every seat of it)"
                )
            return mine[seat]
        if named is not None and named in mine:
            return mine[named]
        if len(holdings) > 1:
            raise ToolError(f"VALIDATION_ERROR: {yours}: say which with seat= or team=")
        return holdings[0]

    def remember(ctx: Any, conn: Connection) -> None:
        if sum(map(len, players.values())) >= MAX_ENDED_PLAYERS:  # forget closed sessions (servers run long)
            for who, table in list(players.items()):
                for key in [k for k, c in table.items() if c.session is not None and not c.session.live]:
                    table.pop(key, None)
                if not table:
                    players.pop(who, None)
        table = players.setdefault(caller(ctx), {})
        for name in held(conn):
            table[(conn.current().sid, name)] = conn

    def forget(ctx: Any, session_id: str, names: list[str]) -> None:
        who = caller(ctx)
        table = players.get(who, {})
        for name in names:
            table.pop((session_id, name), None)
        if not table:
            players.pop(who, None)

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

    def no_team_image(conn: Connection, image: bool) -> None:
        if image and conn.team is not None:
            raise ToolError(
                f"VALIDATION_ERROR: image=true shows one seat's frame; you hold team {conn.team.name!r}, whose "
                "seats are read as text and structured content (join one seat to see its frames)"
            )

    def result(conn: Connection, reply: dict[str, Any], image: bool = False) -> Any:
        tick_hz = conn.current().spec.tick_hz
        if reply["type"] == "team_observation":  # a team holder: every seat in one reply
            view = team_view(reply["data"])
            arrays = {name: decode_array(seen["observation"]["obs"]) for name, seen in reply["data"]["seats"].items()}
            text = _describe_team(view, arrays, tick_hz)
            return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=view)
        data = reply["data"]
        fields = {k: v for k, v in data["observation"].items() if k != "obs"}
        obs = decode_array(data["observation"]["obs"])
        text = _describe(fields, data["reward"], obs, tick_hz, bool(data["done"]))
        content: list[Any] = [TextContent(type="text", text=text)]
        if image and obs is not None:
            import base64

            content.append(ImageContent(type="image", data=base64.b64encode(_png(obs)).decode(), mime_type="image/png"))
        return CallToolResult(
            content=content, structured_content={**fields, "reward": data["reward"], "done": data["done"]}
        )

    @tool(
        description="Start a realtime session. env: one of the served env ids (default: the first); "
        "seed: 0 .. 2**31-1 (default: a random one, recorded in the replay); team: on a many-seat world, "
        "hold every seat of that team (e.g. red) instead of the first seat."
    )
    async def start_session(
        ctx: Any, env: Annotated[str | None, Field(max_length=200)] = None, seed: Seed = None, team: Team = None
    ) -> Any:
        conn = Connection(None, sessions(), start_timeout)  # no socket: no pushes
        data = message(ResetData, env=env, seed=seed, team=team, encoding="b64")
        reply = await run(conn, message(ResetMessage, data=data))
        remember(ctx, conn)
        return seated(conn, reply)

    def seated(conn: Connection, reply: dict[str, Any]) -> Any:
        """A start's or join's reply: the session and the seats held (a team's: a short text; its
        structured content lists every seat)."""
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
            spaces = {name: spec.spaces()["seats"][name]["action"] for name in held(conn)}
            out.update(seats=list(spec.seats), action_space=next(iter(spaces.values())))
            if conn.team is None:
                out.update(seat=seat_name(conn))
            else:  # every held seat, and each one's action space where they differ
                out.update(team=conn.team.name, held=held(conn))
                if any(space != out["action_space"] for space in spaces.values()):
                    out.update(action_space=None, action_spaces=spaces)
        text = _describe_held(out) if conn.team is not None else json.dumps(out, indent=2)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=out)

    @tool(
        description="Join a running session another player started (over MCP or WebSocket) by its "
        "session_id, taking `seat` (e.g. second_0) or, absent, the first free seat; or, with `team` (e.g. "
        "red, on a many-seat world), every seat of that team (the reply's `held` lists them). You then act "
        "for those seats against the other players; the world does not wait for any of you."
    )
    async def join_session(ctx: Any, session_id: SessionId, seat: Seat = None, team: Team = None) -> Any:
        seat_or_team(seat, team)
        conn = Connection(None, sessions(), start_timeout)  # no socket: no pushes
        data = message(JoinData, session_id=session_id, seat=seat, team=team, encoding="b64")
        reply = await run(conn, message(JoinMessage, data=data))
        remember(ctx, conn)
        return seated(conn, reply)

    @tool(
        description="The newest observation (text; image=true adds a PNG frame). The world keeps ticking. "
        "Holding a team: every seat's counters, reward and done in the structured content (seats), totals "
        "and a few seats in the text."
    )
    async def observe(
        ctx: Any, session_id: SessionId, image: bool = False, seat: Seat = None, team: Team = None
    ) -> Any:
        conn = player(ctx, session_id, seat, team)
        no_team_image(conn, image)
        return result(conn, await run(conn, ObserveMessage(data=ObserveData(encoding="b64"))), image)

    @tool(
        description="Queue an action; returns at once. It is applied at the next tick (its delay counted). "
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
        conn = player(ctx, session_id, seat, team, named=next(iter(actions), None) if actions else None)
        return (
            await run(conn, message(ActMessage, data=message(ActionData, action=action, actions=actions)))
        ).data.model_dump()

    @tool(
        description=f"Wait until `ticks` more ticks have passed (1 .. {MAX_WAIT_TICKS}; the world does "
        "not stop), then observe (holding a team: every seat, as observe)."
    )
    async def wait(
        ctx: Any,
        session_id: SessionId,
        ticks: Ticks = 1,
        image: bool = False,
        seat: Seat = None,
        team: Team = None,
    ) -> Any:
        conn = player(ctx, session_id, seat, team)
        no_team_image(conn, image)
        msg = message(WaitMessage, data=message(WaitData, ticks=ticks, encoding="b64"))
        return result(conn, await run(conn, msg), image)

    @tool(
        description="Session stats: tick, your agent ticks vs inaction ticks, total reward, queue counters "
        "(several-seat worlds: every seat's under `seats`; holding a team: its totals under `team`)."
    )
    async def stats(ctx: Any, session_id: SessionId, seat: Seat = None, team: Team = None) -> Any:
        conn = player(ctx, session_id, seat, team)
        state = (await run(conn, StateMessage())).data.model_dump()
        if conn.team is not None:
            state, text = team_stats(state, conn.team.name, held(conn))
        else:
            text = json.dumps(state, indent=2)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=state)

    @tool(
        description="Stop a session (a joined seat or team: give it up, the others play on; its beta plays "
        "it); returns its summary (and replay path when recording)."
    )
    async def stop_session(ctx: Any, session_id: SessionId, seat: Seat = None, team: Team = None) -> dict[str, Any]:
        conn = player(ctx, session_id, seat, team)  # (its refusal lists the sessions this client plays)
        forget(ctx, session_id, held(conn))
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
