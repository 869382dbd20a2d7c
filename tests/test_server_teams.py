"""A whole team in one served session (issue 32 item 3; docs/server.md): a client opens a session of a
many-seat world naming a team and takes every seat of it, another takes the other team; each sends all
its seats' actions in one message and observes all its seats in one reply, over the WebSocket
(`nonstop.server.client.Client`, the real client path) and over OpenEnv's HTTP routes. Every bad input
is one error with its code, and the match plays on.

Wall clock (a server is realtime by nature): the assertions are counts, codes and states, never a
tick-exact timing.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("magent2")

from battle16 import BATTLE, BLUE, RED, STAY
from nonstop.server.app import ServerThread
from nonstop.server.client import Client, ServerError, http_get

pytestmark = pytest.mark.wall
ATTACK_FIRST = 13  # battle's moves are 0..12 (12: stay at 6), attacks 13..20


def _code(call) -> str:
    with pytest.raises(ServerError) as err:
        call()
    return err.value.code


@pytest.fixture
def server(tmp_path, no_shm_leak):
    with ServerThread(envs=[BATTLE, "theory/inaction"], idle_timeout=30.0) as srv:
        yield srv


def test_each_client_holds_a_team_and_acts_for_all_its_seats_in_one_message(server) -> None:
    with Client(server.url) as red, Client(server.url) as blue:
        opened = red.reset_team("red", env=BATTLE, seed=1, encoding="list")
        sid = opened.session_id
        assert sorted(opened.seats) == sorted(RED) and opened.team == "red"
        assert all(seat.reward is None and seat.done is False for seat in opened.seats.values())
        assert opened.seats["red_3"].obs.shape == (13, 13, 5) and opened.seats["red_3"].info["seat"] == "red_3"
        joined = blue.join_team(sid, "blue")
        assert sorted(joined.seats) == sorted(BLUE) and joined.session_id == sid

        ack = red.act_team({seat: STAY for seat in RED})  # every red seat's action in one message
        assert ack["seats"] == 6
        seen = red.wait_team(3)
        for seat in RED:  # each seat's own counters: its action applied, at its own delay
            info = seen.seats[seat].info
            assert info["agent_ticks"] >= 1 and info["last_delay"] >= 1 and info["seat"] == seat
        stepped = blue.step_team({seat: ATTACK_FIRST for seat in BLUE[:4]})  # a seat left out: its β acts
        assert stepped.tick >= seen.tick and set(stepped.seats) == set(BLUE)
        assert all(stepped.seats[s].info["agent_ticks"] >= 1 for s in BLUE[:4])

        # the other team's seats, a team the world lacks, a seat already held, one action: each refused
        assert _code(lambda: red.act_team({"blue_0": STAY})) == "SEAT_NOT_HELD"
        assert _code(lambda: red.act_team({"red_0": 99})) == "ACTION_OUT_OF_RANGE"
        assert _code(lambda: red.act(STAY)) == "SESSION_ERROR"
        assert _code(lambda: red.observe()) == "SESSION_ERROR"  # a team's client reads with observe_team
        with Client(server.url) as third:
            assert _code(lambda: third.join_team(sid, "green")) == "UNKNOWN_TEAM"
            assert _code(lambda: third.join_team(sid, "red")) == "SEAT_TAKEN"
            assert _code(lambda: third.reset_team("green", env=BATTLE)) == "UNKNOWN_TEAM"
            assert _code(lambda: third.reset_team("red", env="theory/inaction")) == "UNKNOWN_TEAM"
        later = red.wait_team(2)  # the match played on through every refusal
        assert later.tick > stepped.tick - 5 and set(later.seats) == set(RED)

        held = {row["seat"]: row["held"] for row in red.state(seats="all")["seats"]}
        assert all(held.values()) and len(held) == 12
    # both teams left: the session ended, and the refused resets left no session behind
    wait_for(lambda: all(s["lifecycle"] == "closed" for s in http_get(server.url, "/sessions")), what="all closed")


def test_a_team_over_openenv_http(server) -> None:
    import httpx

    # one HTTP client: its key (the cookie its /reset sets) is what reaches its session
    with httpx.Client(base_url=server.url.replace("ws://", "http://"), timeout=30) as http:
        opened = http.post("/reset", json={"env": BATTLE, "team": "blue", "encoding": "none"}).json()
        assert sorted(opened["seats"]) == sorted(BLUE) and opened["team"] == "blue"
        sid = opened["session_id"]
        body = {"session_id": sid, "action": {"actions": {seat: STAY for seat in BLUE}}}
        stepped = http.post("/step", json=body).json()
        assert set(stepped["seats"]) == set(BLUE) and stepped["tick"] >= 1
        assert all(seat["observation"]["agent_ticks"] >= 1 for seat in stepped["seats"].values())
        bad = http.post("/step", json={"session_id": sid, "action": {"actions": {"red_0": STAY}}})
        assert bad.status_code >= 400 and bad.json()["data"]["code"] == "SEAT_NOT_HELD"
        both = http.post("/step", json={"session_id": sid, "action": {"action": 1, "actions": {}}})
        assert both.status_code == 422


def test_an_llm_over_mcp_holds_the_other_team_of_a_websocket_bots_match(server) -> None:
    """The official MCP SDK client on ``/mcp`` joins, as team blue, the battle a WebSocket client opened as
    team red: one tool call acts for every blue seat, the bot sees each blue seat's action counted, and
    stopping the team frees its seats while the bot's match plays on."""
    pytest.importorskip("mcp")
    from mcp import Client as McpClient

    with Client(server.url) as red:
        sid = red.reset_team("red", env=BATTLE, seed=2, encoding="none").session_id

        async def play() -> None:
            async with McpClient(server.url.replace("ws://", "http://") + "/mcp") as llm:
                joined = (await llm.call_tool("join_session", {"session_id": sid, "team": "blue"})).structured_content
                assert joined["team"] == "blue" and joined["held"] == BLUE
                taken = await llm.call_tool("join_session", {"session_id": sid, "team": "red"})
                assert taken.is_error and "SEAT_TAKEN" in taken.content[0].text
                ack = await llm.call_tool("act", {"session_id": sid, "actions": {seat: STAY for seat in BLUE}})
                assert ack.structured_content["seats"] == 6
                seen = (await llm.call_tool("wait", {"session_id": sid, "ticks": 3})).structured_content
                assert [seen["seats"][seat]["agent_ticks"] for seat in BLUE] == [1] * 6
                left = (await llm.call_tool("stop_session", {"session_id": sid})).structured_content
                assert left["lifecycle"] == "running"

        asyncio.run(play())
        state = red.state(seats="all")
        assert state["lifecycle"] == "running"
        rows = {row["seat"]: row for row in state["seats"]}
        assert [rows[seat]["agent_ticks"] for seat in BLUE] == [1] * 6 and [rows[s]["agent_ticks"] for s in RED] == [
            0
        ] * 6
        assert [rows[seat]["held"] for seat in BLUE] == [False] * 6 and all(rows[s]["held"] for s in RED)


def test_the_team_example_of_the_server_page_runs_and_prints_what_it_shows(tmp_path, no_shm_leak) -> None:
    """docs/server.md's team example, saved as a script, against a server serving the full battle (81
    against 81): one message acts for 81 seats, one reply observes them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_readme import block

    code = block("red.act_team(")
    shown = next(line for line in code.splitlines() if "print(" in line).split("#")[1].strip()
    script = tmp_path / "team_example.py"
    script.write_text(code)
    with ServerThread(envs=["multi/battle"]) as srv:
        done = subprocess.run(
            [sys.executable, str(script), srv.url],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == shown == "1 81"
