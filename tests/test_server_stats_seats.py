"""``state`` (and the MCP ``stats`` tool, and ``GET /state``) answer for the seats a client holds: one
seat's reply stays the same size however many seats the world has, and ``seats="all"`` still lists
every seat's row (issue 43: at 162 seats, one seat's state was ~15 KB of other seats' rows)."""

from __future__ import annotations

import asyncio
import json
from functools import partial

import httpx
import pytest

from battle16 import BATTLE
from nonstop.envs.magent import BATTLE_NOOP, MAGENT_TICK_HZ, battle_agents, make_battle
from nonstop.envs.spec import register
from nonstop.server.app import ServerThread
from nonstop.server.client import Client

BATTLE_40 = "multi/battle-40"  # 64 against 64: ten times battle-16's seats
register(
    BATTLE_40,
    partial(make_battle, map_size=40),
    family="multi",
    tick_hz=MAGENT_TICK_HZ,
    noop_action=BATTLE_NOOP,
    default_beta="noop",
    description="MAgent2 battle on a 40x40 map (tests)",
)


@pytest.fixture(scope="module")
def server():
    with ServerThread(envs=[BATTLE, BATTLE_40], idle_timeout=30.0) as srv:
        yield srv


def _sizes(url: str, env: str) -> tuple[dict, int, int]:
    """One seat's ``state``, its size in bytes, and the size of the every-seat one."""
    with Client(url) as client:
        client.reset(env=env, seed=1, encoding="none")
        mine, every = client.state(), client.state(seats="all")
        assert len(every["seats"]) == battle_agents(40 if env == BATTLE_40 else 16)
        return mine, len(json.dumps(mine)), len(json.dumps(every))


def test_one_seats_state_does_not_grow_with_the_world(server) -> None:
    small, small_bytes, small_all = _sizes(server.url, BATTLE)
    big, big_bytes, big_all = _sizes(server.url, BATTLE_40)
    assert [row["seat"] for row in small["seats"]] == [small["seat"]] == ["red_0"]
    assert [row["seat"] for row in big["seats"]] == ["red_0"]
    assert abs(big_bytes - small_bytes) <= 16  # the same row; only numbers' digits may differ
    assert big_all > 8 * small_all  # asked for, every seat's row still comes (128 rows against 12)


def test_a_teams_state_lists_its_own_seats_and_the_mcp_stats_tool_likewise(server) -> None:
    with Client(server.url) as red:
        seen = red.reset_team("red", env=BATTLE, seed=2, encoding="none")
        rows = red.state()["seats"]
        assert sorted(row["seat"] for row in rows) == sorted(seen.seats) and len(rows) == 6
        assert len(red.state(seats="all")["seats"]) == 12

        from nonstop.server.mcp import build_mcp_server

        async def stats() -> tuple[dict, dict]:
            mcp = build_mcp_server(server.manager)
            started = (await mcp.call_tool("start_session", {"env": BATTLE, "seed": 3})).structured_content
            sid = started["session_id"]
            one = (await mcp.call_tool("stats", {"session_id": sid})).structured_content
            every = (await mcp.call_tool("stats", {"session_id": sid, "all_seats": True})).structured_content
            await mcp.call_tool("stop_session", {"session_id": sid})
            return one, every

        one, every = asyncio.run(stats())
        assert [row["seat"] for row in one["seats"]] == ["red_0"] and len(every["seats"]) == 12


def test_http_state_takes_seats_mine_or_all(server) -> None:
    base = server.url.replace("ws://", "http://")
    with httpx.Client(base_url=base) as http:
        opened = http.post("/reset", json={"env": BATTLE, "seed": 4, "encoding": "none"})
        assert opened.status_code == 200
        assert [row["seat"] for row in http.get("/state").json()["seats"]] == ["red_0"]
        assert len(http.get("/state", params={"seats": "all"}).json()["seats"]) == 12
        bad = http.get("/state", params={"seats": "some"})
        assert bad.status_code == 422 and bad.json()["data"]["code"] == "VALIDATION_ERROR"
