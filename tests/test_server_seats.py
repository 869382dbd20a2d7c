"""Several seats in one served session (docs/design.md §4b): a client creates a `multi/duel` session and
takes its first seat, another joins it, each acts for its own seat; per-seat inaction and delay in
``/sessions`` and in each seat's replies; the replay records every seat's actions and verifies;
every bad input answered with its code while the match and the other seat play on; a seat whose
client leaves is played by its β; an LLM through MCP joins a session a WebSocket client created.

Wall clock (a server is realtime by nature): the assertions hold however loaded the machine is
(counts, codes, states, orderings), never a tick-exact timing.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.server.app import ServerThread
from nonstop.server.client import Client, ServerError, http_get
from nonstop.server.protocol import ErrorCode, message_schemas, parse_message
from nonstop.server.replay import Replay, verify

pytestmark = pytest.mark.wall
DUEL = "multi/duel"  # two seats (first_0, second_0), Discrete(2): 0 holds, 1 draws; 60 Hz
ONE_SEAT = "theory/inaction"


def _session(url: str, sid: str) -> dict:
    return next(s for s in http_get(url, "/sessions") if s["session_id"] == sid)


def _closed(url: str, sid: str) -> dict:
    return wait_for(lambda: (s := _session(url, sid))["lifecycle"] == "closed" and s, what=f"{sid} closed")


def _code(call) -> str:
    with pytest.raises(ServerError) as err:
        call()
    return err.value.code


@pytest.fixture
def server(request, tmp_path, no_shm_leak):
    tick_procs = getattr(request, "param", 0)
    with ServerThread(
        envs=[DUEL, ONE_SEAT], replay_dir=tmp_path / "replays", idle_timeout=30.0, tick_procs=tick_procs
    ) as srv:
        yield srv
    if tick_procs:
        assert all(p.process.exitcode is not None for p in srv.manager.procs.procs)  # every worker reaped


@pytest.mark.parametrize("server", [0, 1], indirect=True, ids=["threads", "procs"])
def test_two_clients_play_one_duel_each_for_its_seat(server) -> None:
    """Both seats act, each through its own connection; counters, delay and rewards are per seat; the
    replay holds both seats' applied actions and re-simulates the match exactly."""
    with Client(server.url) as first, Client(server.url) as second:
        created = first.reset(env=DUEL, seed=4)
        sid = created.info["session_id"]
        assert created.info["seat"] == "first_0" and created.tick == 0
        joined = second.join(sid)  # no seat named: the first free one
        assert joined.info["seat"] == "second_0" and joined.info["session_id"] == sid
        assert joined.reward is None and joined.done is False

        first.wait(20)  # past the holster: draws count from here
        first.act(1)  # a false start (the signal comes 30 to 90 ticks into a round): first_0 loses a round
        mine = first.wait(2)
        assert mine.info["agent_ticks"] == 1 and mine.info["last_delay"] >= 1 and mine.info["seat"] == "first_0"
        seen = second.observe()
        for _ in range(400):  # second_0 draws on the signal and wins that round
            if seen.obs[0] >= 0.5:
                break
            seen = second.wait(1)
        assert seen.obs[0] >= 0.5, "no signal within 400 ticks"
        second.act(1, obs_tick=seen.tick, seat="second_0")  # naming its own seat is allowed
        theirs = second.wait(3)
        assert theirs.info["agent_ticks"] == 1 and theirs.info["last_delay"] >= 1

        state = second.state()  # the counters are the asking seat's, and so is the one row under "seats"
        assert state["seat"] == "second_0" and state["agent_ticks"] == 1
        assert [row["seat"] for row in state["seats"]] == ["second_0"]
        seats = {row["seat"]: row for row in second.state(seats="all")["seats"]}  # every seat's, when asked
        assert seats["first_0"]["agent_ticks"] == 1 and seats["first_0"]["held"] and seats["second_0"]["held"]
        assert seats["first_0"]["last_delay"] >= 1 and seats["second_0"]["last_delay"] >= 1

        listed = {row["seat"]: row for row in _session(server.url, sid)["seats"]}  # GET /sessions, per seat
        assert set(listed) == {"first_0", "second_0"}
        for row in listed.values():
            assert row["held"] and row["agent_ticks"] == 1 and row["inaction_ticks"] >= 20
            assert row["last_delay"] >= 1 and 0 < row["inaction_fraction"] < 1
    info = _closed(server.url, sid)
    ended = {row["seat"]: row for row in info["summary"]["seats"]}
    for row in ended.values():  # the whole run, from the tick log: every tick is the agent's or β's
        assert row["agent_ticks"] == 1 and row["agent_ticks"] + row["inaction_ticks"] == info["summary"]["ticks"]
        assert row["delay_mean_ticks"] >= 1
    assert ended["first_0"]["total_reward"] == -ended["second_0"]["total_reward"]  # a zero-sum game

    replay = Replay.load(info["replay"])
    assert replay.seats == ["first_0", "second_0"] and replay.actions.shape == (replay.ticks, 2)
    result = verify(replay)
    assert result.ok and result.checked > replay.ticks
    for i, prefix in enumerate(("", "seat1_")):
        agent = replay.columns[prefix + "source"] == 1
        assert agent.sum() == 1 and (replay.actions[agent, i] == 1).all() and (replay.actions[~agent, i] == 0).all()
    summary = replay.summary()["seats"]
    assert {s: summary[s]["return"] for s in summary} == {s: ended[s]["total_reward"] for s in ended}

    from nonstop.cli import main

    assert main(["replay", "verify", info["replay"]]) == 0
    # second_0's winning draw decided the round: re-simulated without it, the world diverges
    row = int(np.flatnonzero(replay.columns["seat1_source"] == 1)[0])
    replay.actions[row, 1] = 0
    assert not verify(replay).ok


def test_bad_input_is_refused_with_a_code_and_harms_nobody(server) -> None:
    """Acting for a seat you don't hold, an unknown seat, an action outside the seat's space,
    joining a full, unknown, ended or one-seat session: each a clear error with its code; the
    connection, the match and the other seat carry on, and the replay loses nothing."""
    with Client(server.url) as first, Client(server.url) as second, Client(server.url) as third:
        sid = first.reset(env=DUEL, seed=1).info["session_id"]
        assert _code(lambda: third.join("0123456789ab")) == ErrorCode.NO_SESSION.value  # unknown session
        assert _code(lambda: third.join(sid, "third_0")) == ErrorCode.UNKNOWN_SEAT.value  # a seat the env lacks
        assert _code(lambda: third.join(sid, "first_0")) == ErrorCode.SEAT_TAKEN.value  # held by its creator
        second.join(sid, "second_0")
        assert _code(lambda: third.join(sid)) == ErrorCode.SESSION_FULL.value  # every seat held
        assert _code(lambda: second.join(sid)) == ErrorCode.SESSION_ERROR.value  # already seated there

        assert _code(lambda: second.act(1, seat="first_0")) == ErrorCode.SEAT_NOT_HELD.value
        assert _code(lambda: second.step(1, seat="first_0")) == ErrorCode.SEAT_NOT_HELD.value
        assert _code(lambda: second.act(1, seat="third_0")) == ErrorCode.UNKNOWN_SEAT.value
        assert _code(lambda: second.act(2)) == ErrorCode.ACTION_OUT_OF_RANGE.value  # Discrete(2): 0 or 1
        with pytest.raises(ServerError, match="second_0"):  # the error names the seat whose space it is
            second.act([0.5, 0.5])
        malformed = {"type": "join", "data": {"session_id": sid, "seats": "second_0"}}
        assert _code(lambda: second._run(second._async.request(malformed))) == ErrorCode.VALIDATION_ERROR.value

        one = third.reset(env=ONE_SEAT).info["session_id"]  # a one-seat world: its creator holds the seat
        with Client(server.url) as fourth:
            assert _code(lambda: fourth.join(one)) == ErrorCode.SESSION_FULL.value
            assert _code(lambda: fourth.join(one, "first_0")) == ErrorCode.UNKNOWN_SEAT.value
        third.close()
        _closed(server.url, one)
        with Client(server.url) as fifth:
            assert _code(lambda: fifth.join(one)) == ErrorCode.SESSION_ENDED.value

        # a plain reset in a match another client plays in does not end the episode for everyone
        before = second.observe()
        again = first.reset()
        assert again.info["session_id"] == sid and again.info["episode"] == before.info["episode"] == 0
        assert again.tick >= before.tick and second.observe().info["episode"] == 0

        # nobody harmed: both seats still act, the session runs, and nothing refused was applied
        ack = second.act(1)
        first.act(1)
        later = second.wait(3)
        assert later.tick >= ack["tick"] + 3 and later.info["agent_ticks"] == 1 and later.info["lifecycle"] == "running"
        state = first.state()
        assert state["agent_ticks"] == 1 and state["queue"]["submitted"] == 1
        assert second.state()["queue"]["submitted"] == 1
    info = _closed(server.url, sid)
    replay = Replay.load(info["replay"])
    assert verify(replay).ok and replay.ticks == info["summary"]["ticks"]  # every tick recorded
    assert [int((replay.columns[p + "source"] == 1).sum()) for p in ("", "seat1_")] == [1, 1]


@pytest.mark.slow
def test_a_seat_whose_client_leaves_is_played_by_its_beta(server) -> None:
    """The joiner leaves: the session goes on, its seat free and played by β (counted as that seat's
    inaction), open to the next client; the creator leaving does not end it either; it ends by its
    own limit (max_ticks) with every tick of both seats in the replay."""
    with Client(server.url) as first:
        sid = first.reset(env=DUEL, seed=2, max_ticks=240).info["session_id"]
        with Client(server.url) as second:
            second.join(sid)
            second.act(1)
            second.wait(2)
        row = wait_for(lambda: (s := _session(server.url, sid))["seats"][1]["held"] is False and s, what="seat freed")
        assert row["lifecycle"] == "running"
        after = first.wait(10)
        assert after.info["lifecycle"] == "running"
        state = {r["seat"]: r for r in first.state(seats="all")["seats"]}
        assert state["second_0"]["held"] is False and state["second_0"]["agent_ticks"] == 1
        assert state["second_0"]["inaction_ticks"] >= after.tick - 1  # β plays every other tick of it
        with Client(server.url) as third:
            assert third.join(sid).info["seat"] == "second_0"  # the free seat is matched to the next client
            first.close()  # the creator leaves: third still plays
            assert third.wait(2).info["lifecycle"] == "running"
            assert [r["held"] for r in _session(server.url, sid)["seats"]] == [False, True]
            third.act(1)
            third.wait(2)
            info = _closed(server.url, sid)  # max_ticks: 240 ticks, 4 s of world time
    assert info["end_reason"] == "max_ticks reached"
    seats = {row["seat"]: row for row in info["summary"]["seats"]}
    assert seats["second_0"]["agent_ticks"] == 2 and seats["first_0"]["agent_ticks"] == 0
    replay = Replay.load(info["replay"])
    assert replay.ticks == 240 and verify(replay).ok


def test_the_published_schema_has_join_and_the_seat_codes() -> None:
    schemas = message_schemas()
    join = schemas["client_messages"]["join"]
    assert join["properties"]["type"]["const"] == "join" and join["additionalProperties"] is False
    assert "seat" in schemas["action"]["properties"] and "seat" in schemas["observation"]["properties"]
    msg = parse_message('{"type": "join", "data": {"session_id": "abc", "seat": "second_0"}}')
    assert (msg.data.session_id, msg.data.seat) == ("abc", "second_0")
    for bad in ('{"type": "join", "data": {}}', '{"type": "join", "data": {"session_id": "abc", "seat": ""}}'):
        with pytest.raises(Exception, match="invalid 'join' message"):
            parse_message(bad)
    assert {"SEAT_NOT_HELD", "UNKNOWN_SEAT", "SEAT_TAKEN", "SESSION_FULL"} <= {c.value for c in ErrorCode}


def test_an_llm_through_mcp_joins_a_match_a_websocket_bot_created(server) -> None:
    """The official MCP SDK client on ``/mcp`` joins the duel a WebSocket client started on ``/ws``:
    it acts for its seat, the bot sees it in the counters, bad joins are tool errors with codes,
    and stopping the joined seat leaves the bot's match running."""
    from mcp import Client as McpClient

    with Client(server.url) as bot:
        sid = bot.reset(env=DUEL, seed=6).info["session_id"]

        async def play() -> None:
            async with McpClient(server.url.replace("ws://", "http://") + "/mcp") as llm:
                assert "join_session" in {t.name for t in (await llm.list_tools()).tools}
                missing = await llm.call_tool("join_session", {"session_id": "0123456789ab"})
                assert missing.is_error and "NO_SESSION" in missing.content[0].text
                nowhere = await llm.call_tool("join_session", {"session_id": sid, "seat": "third_0"})
                assert nowhere.is_error and "UNKNOWN_SEAT" in nowhere.content[0].text
                joined = (await llm.call_tool("join_session", {"session_id": sid})).structured_content
                assert joined["seat"] == "second_0" and joined["seats"] == ["first_0", "second_0"]
                assert joined["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
                full = await llm.call_tool("join_session", {"session_id": sid})
                assert full.is_error and "SESSION_FULL" in full.content[0].text
                bad = await llm.call_tool("act", {"session_id": sid, "action": 5})
                assert bad.is_error and "ACTION_OUT_OF_RANGE" in bad.content[0].text
                ack = (await llm.call_tool("act", {"session_id": sid, "action": 1})).structured_content
                seen = (await llm.call_tool("wait", {"session_id": sid, "ticks": 3})).structured_content
                assert seen["seat"] == "second_0" and seen["agent_ticks"] == 1 and seen["tick"] >= ack["tick"] + 3
                stats = (await llm.call_tool("stats", {"session_id": sid})).structured_content
                assert stats["seat"] == "second_0" and [s["seat"] for s in stats["seats"]] == ["second_0"]
                stats = (await llm.call_tool("stats", {"session_id": sid, "all_seats": True})).structured_content
                assert [s["held"] for s in stats["seats"]] == [True, True]
                left = (await llm.call_tool("stop_session", {"session_id": sid})).structured_content
                assert left["lifecycle"] == "running" and [s["held"] for s in left["seats"]] == [True, False]

        asyncio.run(play())
        state = bot.state(seats="all")
        assert state["lifecycle"] == "running" and state["agent_ticks"] == 0
        assert {r["seat"]: r["agent_ticks"] for r in state["seats"]} == {"first_0": 0, "second_0": 1}
    assert _closed(server.url, sid)["end_reason"] == "closed by client"


def test_readme_seats_example_runs_and_prints_the_info_shown(tmp_path, no_shm_leak) -> None:
    """The several-seat example of docs/server.md, saved as a script, against a server serving the
    duel: it prints dicts with exactly the keys the page shows."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from test_readme import block

    code = block("player.join(")
    comments = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    split = next(i for i, line in enumerate(comments) if line.startswith("["))
    info_keys = set(re.findall(r"'(\w+)':", " ".join(comments[:split])))  # the observation's info
    seat_keys = set(re.findall(r"'(\w+)':", " ".join(comments[split:])))  # each seat's counters
    script = tmp_path / "seats_example.py"
    script.write_text(code)
    with ServerThread(envs=[DUEL]) as srv:
        done = subprocess.run(
            [sys.executable, str(script), srv.url],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [set(re.findall(r"'(\w+)':", line)) for line in done.stdout.splitlines() if "{" in line]
    assert printed == [info_keys, seat_keys] and "seat" in info_keys and "held" in seat_keys


def test_a_seat_sessions_replay_is_recoverable_from_its_streamed_chunks(tmp_path, monkeypatch, no_shm_leak) -> None:
    """What a two-seat session streams while it runs (tick-log chunks with every seat's columns,
    both seats' replay columns) is enough to rebuild its replay, should the server die: the
    durable ticks re-simulate exactly, with both seats' actions."""
    from nonstop.server import session as server_session

    monkeypatch.setattr(server_session, "SESSION_CHUNK_ROWS", 16)  # read where the sessions are built
    with ServerThread(envs=[DUEL], replay_dir=tmp_path / "replays", idle_timeout=30.0, tick_procs=0) as srv:
        with Client(srv.url) as first, Client(srv.url) as second:
            sid = first.reset(env=DUEL, seed=3).info["session_id"]
            second.join(sid)
            first.act(1)
            second.wait(20)
            second.act(1)
            first.wait(60)
            recovered = Replay.recover(srv.manager.ticklog_dir(sid))  # while it runs: its durable chunks
    assert recovered.ticks >= 64 and recovered.ticks % 16 == 0 and recovered.header["complete"] is False
    assert recovered.seats == ["first_0", "second_0"] and recovered.actions.shape == (recovered.ticks, 2)
    assert [int((recovered.columns[p + "source"] == 1).sum()) for p in ("", "seat1_")] == [1, 1]
    assert verify(recovered).ok


@pytest.mark.slow
def test_bench_server_quick_with_two_seats(no_shm_leak) -> None:
    """`nonstop bench server --seats 2 --quick`: a real server process, two-seat multi/Boxing sessions,
    one client per seat (the first creates, the second joins): each session counted once."""
    import argparse

    pytest.importorskip("multi_agent_ale_py")
    from nonstop.bench import server

    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args(["--seats", "2", "--sessions", "2", "--seconds", "2", "--ramp", "0.2"])
    args.quick, args.json = True, True
    result = server.run(args)
    assert result["env"] == "multi/Boxing" and result["seats"] == 2 and result["clients"] == 4
    assert result["reset_ms"]["n"] == 2 and result["join_ms"]["n"] == 2 and result["health_after"] == "healthy"
    assert 0.5 < result["ticks_fraction"] < 1.5  # per session, not per client
    assert all(isinstance(result[k], (bool, int, float)) for k in server.RESULT_KEYS)
