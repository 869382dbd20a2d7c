"""The MCP tools, driven in-process by the official SDK's client: a session starts, the world
ticks between tool calls, actions are applied with their delay measured, frames come as PNG; on a
many-seat world an LLM holds a whole team, acts for every seat in one call and reads them all."""

from __future__ import annotations

import asyncio
import base64

import pytest

pytest.importorskip("mcp")
from mcp import Client

from battle16 import BATTLE, BLUE, RED, STAY
from nonstop.server.mcp import TEXT_SEATS, _describe_team, build_mcp_server, team_view
from nonstop.server.sessions import SessionManager

pytestmark = pytest.mark.wall


def test_mcp_tools_drive_a_realtime_session(tmp_path, no_shm_leak) -> None:
    manager = SessionManager(["theory/inaction", "Boxing"], replay_dir=tmp_path)
    server = build_mcp_server(manager)

    async def play() -> None:
        async with Client(server) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"start_session", "join_session", "observe", "act", "wait", "stats", "stop_session"}
            started = (await client.call_tool("start_session", {"seed": 0})).structured_content
            sid = started["session_id"]
            assert started["env"] == "theory/inaction" and started["action_space"]["n"] == 3
            ack = (await client.call_tool("act", {"session_id": sid, "action": 1})).structured_content
            waited = await client.call_tool("wait", {"session_id": sid, "ticks": 5})
            seen = waited.structured_content
            assert seen["tick"] >= ack["tick"] + 5 and seen["agent_ticks"] == 1
            assert "inaction" in waited.content[0].text
            bad = await client.call_tool("act", {"session_id": sid, "action": 9})
            assert bad.is_error and "ACTION_OUT_OF_RANGE" in bad.content[0].text
            stats = (await client.call_tool("stats", {"session_id": sid})).structured_content
            assert stats["lifecycle"] == "running" and stats["inaction_ticks"] >= 4

            boxing = (await client.call_tool("start_session", {"env": "Boxing", "seed": 1})).structured_content
            assert "FIRE" in boxing["action_meanings"]
            frame = await client.call_tool("observe", {"session_id": boxing["session_id"], "image": True})
            png = base64.b64decode(frame.content[1].data)
            assert frame.content[1].mime_type == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n"

            for s in (sid, boxing["session_id"]):
                summary = (await client.call_tool("stop_session", {"session_id": s})).structured_content
                assert summary["lifecycle"] == "closed" and summary["replay"]
            missing = await client.call_tool("observe", {"session_id": sid})
            assert missing.is_error

    try:
        asyncio.run(play())
    finally:
        manager.shutdown()


def test_nonstop_mcp_over_stdio() -> None:
    """`nonstop mcp` as an MCP client launches it: a subprocess speaking JSON-RPC on stdio."""
    import os
    import sys
    from pathlib import Path

    from mcp import StdioServerParameters

    src = str(Path(__file__).resolve().parents[1] / "src")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nonstop.cli", "mcp", "--env", "theory/inaction"],
        env={**os.environ, "PYTHONPATH": src},
    )

    async def play() -> None:
        async with Client(params) as client:
            sid = (await client.call_tool("start_session", {"seed": 3})).structured_content["session_id"]
            await client.call_tool("act", {"session_id": sid, "action": 2})
            seen = (await client.call_tool("wait", {"session_id": sid, "ticks": 3})).structured_content
            assert seen["agent_ticks"] == 1 and seen["tick"] >= 3
            stopped = (await client.call_tool("stop_session", {"session_id": sid})).structured_content
            assert stopped["lifecycle"] == "closed"

    asyncio.run(play())


def test_mcp_tools_declare_bounds_and_answer_bad_arguments_with_reasons(no_shm_leak) -> None:
    """Each tool's JSON Schema carries its bounds, and every bad argument (seed -1, wait 0 / -3 /
    10**7 ticks, an unknown session, an action outside the space) is an error that says why."""
    manager = SessionManager(["theory/inaction"])
    server = build_mcp_server(manager)

    async def play() -> None:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            ticks = tools["wait"].input_schema["properties"]["ticks"]
            assert (ticks["minimum"], ticks["maximum"]) == (1, 36_000)
            seed = next(s for s in tools["start_session"].input_schema["properties"]["seed"]["anyOf"] if "minimum" in s)
            assert (seed["minimum"], seed["maximum"]) == (0, 2**31 - 1)
            assert tools["act"].input_schema["properties"]["session_id"]["minLength"] == 1

            async def refused(name: str, args: dict, *reasons: str) -> None:
                answer = await client.call_tool(name, args)
                text = answer.content[0].text
                assert answer.is_error, f"{name}({args}) was accepted"
                assert all(r in text for r in reasons), f"{name}({args}): {text!r} does not say {reasons}"

            await refused("start_session", {"seed": -1}, "seed", "greater than or equal to 0")
            await refused("start_session", {"env": "Pong-nope"}, "VALIDATION_ERROR", "not served here")
            sid = (await client.call_tool("start_session", {"seed": 0})).structured_content["session_id"]
            await refused("wait", {"session_id": sid, "ticks": 0}, "ticks", "greater than or equal to 1")
            await refused("wait", {"session_id": sid, "ticks": -3}, "ticks", "greater than or equal to 1")
            await refused("wait", {"session_id": sid, "ticks": 10**7}, "ticks", "less than or equal to 36000")
            await refused("observe", {"session_id": "nope"}, "NO_SESSION", "'nope'", sid)
            await refused("stop_session", {"session_id": "nope"}, "NO_SESSION", "'nope'")
            await refused("act", {"session_id": sid, "action": 9}, "ACTION_OUT_OF_RANGE", "Discrete(3)")
            await refused("act", {"session_id": sid, "action": "left"}, "action", "valid integer")
            ok = await client.call_tool("wait", {"session_id": sid, "ticks": 2})
            assert not ok.is_error and ok.structured_content["tick"] >= 2  # the session survived every refusal

    try:
        asyncio.run(play())
    finally:
        manager.shutdown()


def test_an_llm_over_mcp_holds_a_whole_team_acts_for_every_seat_and_gives_it_up(no_shm_leak) -> None:
    """Two MCP servers on one manager (two LLM agents): one starts a battle holding team red, the other
    joins it as team blue. One act reaches every red seat (each seat's agent_ticks counts it); observe,
    wait and stats answer for all held seats; seat/team mix-ups are tool errors with their codes; and
    stop_session gives the whole team up, so a third agent can take it."""
    pytest.importorskip("magent2")
    manager = SessionManager([BATTLE, "theory/inaction"])
    red_server, blue_server, third_server = (build_mcp_server(manager) for _ in range(3))

    async def refused(client: Client, name: str, args: dict, *reasons: str) -> None:
        answer = await client.call_tool(name, args)
        assert answer.is_error, f"{name}({args}) was accepted"
        text = answer.content[0].text
        assert all(r in text for r in reasons), f"{name}({args}): {text!r} does not say {reasons}"

    async def play() -> None:
        async with Client(red_server) as red, Client(blue_server) as blue, Client(third_server) as third:
            started = await red.call_tool("start_session", {"env": BATTLE, "seed": 1, "team": "red"})
            assert "you hold team red" in started.content[0].text and len(started.content[0].text) < 600
            opened = started.structured_content
            sid = opened["session_id"]
            assert opened["team"] == "red" and opened["held"] == RED and "seat" not in opened
            assert sorted(opened["seats"]) == sorted(RED + BLUE) and opened["action_space"]["n"] == 21
            joined = (await blue.call_tool("join_session", {"session_id": sid, "team": "blue"})).structured_content
            assert joined["held"] == BLUE and joined["session_id"] == sid

            await refused(third, "join_session", {"session_id": sid, "seat": "red_0", "team": "red"}, "not both")
            await refused(third, "join_session", {"session_id": sid, "team": "green"}, "UNKNOWN_TEAM", "'red'")
            await refused(third, "join_session", {"session_id": sid, "team": "red"}, "SEAT_TAKEN", "red_0")
            await refused(third, "start_session", {"env": "theory/inaction", "team": "red"}, "UNKNOWN_TEAM")

            ack = (
                await red.call_tool("act", {"session_id": sid, "actions": {s: STAY for s in RED}})
            ).structured_content
            assert ack["seats"] == 6
            waited = await red.call_tool("wait", {"session_id": sid, "ticks": 3})
            seen = waited.structured_content
            assert seen["team"] == "red" and seen["seats_held"] == 6 and set(seen["seats"]) == set(RED)
            assert seen["tick"] >= ack["tick"] + 3
            assert {s: row["agent_ticks"] for s, row in seen["seats"].items()} == dict.fromkeys(RED, 1)
            assert seen["agent_ticks"] == 6 and all(row["last_delay"] >= 1 for row in seen["seats"].values())
            text = waited.content[0].text
            assert "you hold 6 seats" in text and "red_5: reward" in text and "13x13x5" in text

            await refused(red, "act", {"session_id": sid, "actions": {"blue_0": STAY}}, "SEAT_NOT_HELD", "blue_0")
            await refused(red, "act", {"session_id": sid, "actions": {"red_0": 99}}, "ACTION_OUT_OF_RANGE", "red_0")
            await refused(red, "act", {"session_id": sid, "action": STAY}, "SESSION_ERROR", "actions")
            await refused(red, "act", {"session_id": sid, "action": 1, "actions": {"red_0": 1}}, "exactly one")
            await refused(red, "observe", {"session_id": sid, "seat": "red_0"}, "SEAT_NOT_HELD", "team='red'")
            await refused(red, "observe", {"session_id": sid, "team": "blue"}, "SEAT_NOT_HELD", "team 'red'")
            await refused(red, "observe", {"session_id": sid, "seat": "red_0", "team": "red"}, "not both")
            await refused(red, "observe", {"session_id": sid, "image": True}, "VALIDATION_ERROR", "image")

            looked = (await red.call_tool("observe", {"session_id": sid, "team": "red"})).structured_content
            assert set(looked["seats"]) == set(RED) and looked["tick"] >= seen["tick"]
            stats = await red.call_tool("stats", {"session_id": sid, "all_seats": True})
            state = stats.structured_content
            assert state["team"]["name"] == "red" and state["team"]["seats"] == RED
            assert state["team"]["agent_ticks"] == 6  # the act counted once per red seat, none by the refused ones
            rows = {row["seat"]: row for row in state["seats"]}
            assert all(rows[s]["held"] and rows[s]["agent_ticks"] == 0 for s in BLUE)
            assert "you hold 6 seats" in stats.content[0].text and len(stats.content[0].text) < 800

            left = (await blue.call_tool("stop_session", {"session_id": sid})).structured_content
            held = {row["seat"]: row["held"] for row in left["seats"]}
            assert left["lifecycle"] == "running" and held == {**dict.fromkeys(RED, True), **dict.fromkeys(BLUE, False)}
            await refused(blue, "observe", {"session_id": sid}, "NO_SESSION")
            retaken = (await third.call_tool("join_session", {"session_id": sid, "team": "blue"})).structured_content
            assert retaken["held"] == BLUE  # the seats blue gave up are free again
            await third.call_tool("stop_session", {"session_id": sid, "team": "blue"})
            ended = (await red.call_tool("stop_session", {"session_id": sid, "team": "red"})).structured_content
            assert ended["lifecycle"] == "closed" and not any(row["held"] for row in ended["seats"])
            assert not red_server.players and not blue_server.players and not third_server.players

    try:
        asyncio.run(play())
    finally:
        manager.shutdown()


def test_a_big_team_is_summarised_in_a_few_lines_and_given_whole_in_structured_content() -> None:
    """81 seats: the text has the totals, the seats whose episodes ended and `TEXT_SEATS` seats; the
    structured content has every seat's counters, reward and done."""
    import numpy as np

    def seat(i: int) -> dict:
        observation = {
            "obs": None,
            "tick": 40,
            "time": 2.0,
            "episode": 0,
            "terminated": i == 7,
            "truncated": False,
            "total_reward": 0.5,
            "inaction_ticks": 30,
            "agent_ticks": 10,
            "last_delay": 1 + i % 3,
            "session_id": "abc",
            "lifecycle": "running",
            "seat": f"red_{i}",
        }
        return {"observation": observation, "reward": 0.25, "done": i == 7}

    data = {"team": "red", "session_id": "abc", "tick": 40, "seats": {f"red_{i}": seat(i) for i in range(81)}}
    view = team_view(data)
    assert view["seats_held"] == 81 and len(view["seats"]) == 81 and view["done_seats"] == ["red_7"]
    assert view["agent_ticks"] == 810 and view["reward"] == pytest.approx(81 * 0.25) and view["done"] is True
    assert "obs" not in view["seats"]["red_3"] and view["seats"]["red_3"]["reward"] == 0.25
    frames = {name: np.zeros((13, 13, 5), np.float32) for name in view["seats"]}
    text = _describe_team(view, frames, tick_hz=20.0)
    lines = text.splitlines()
    assert len(lines) <= TEXT_SEATS + 7, text
    assert f"the first {TEXT_SEATS} of your 81 seats" in text and "red_7" in text and "1 to 3 ticks" in text
    assert "red_80" not in text and "13x13x5 float32" in text
