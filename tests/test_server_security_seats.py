"""One controller per seat, always (issue 40): a failed reset leaves no ghost controller, every act
checks that this connection holds its seat, MCP clients each have their own players, OpenEnv HTTP
sessions answer only the client that started them, waits are bounded per connection and dropped
when their caller goes away, a parked wait is activity, a socket whose session ended is closed,
overflowing numbers are bad actions, and a vanished HTTP or MCP holder gives its seat up.

Real servers on 127.0.0.1, the real clients (nonstop's WebSocket client on ``websockets``, ``httpx``,
the MCP SDK's streamable-HTTP client); every loop is bounded. Wall clock: the assertions are
counts, codes and states, never tick-exact timings.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("mcp")

from nonstop.server.app import ServerThread
from nonstop.server.client import Client, ServerError, http_get
from nonstop.server.connection import MAX_WAITS_PER_CONNECTION

pytestmark = pytest.mark.wall
DUEL = "multi/duel"  # two seats (first_0, second_0), Discrete(2), 60 Hz; teams "first" and "second"
ONE_SEAT = "theory/inaction"  # 60 Hz, Discrete(3)
BOX = "Pendulum-v1"  # Box(-2, 2, (1,)) torque, 20 Hz
BOX_SEATS = "multi/duel-continuous"  # two seats, Box(-1, 1, (1,))
HUGE = 10**400  # past every float: json reads it as an int, numpy cannot convert it


def _code(call) -> str:
    with pytest.raises(ServerError) as err:
        call()
    return err.value.code


def _info(url: str, sid: str) -> dict:
    return next(s for s in http_get(url, "/sessions") if s["session_id"] == sid)


def _http(url: str) -> httpx.Client:
    return httpx.Client(base_url=url.replace("ws://", "http://"), timeout=30)


@pytest.fixture
def server(no_shm_leak):
    with ServerThread(envs=[DUEL, ONE_SEAT, BOX, BOX_SEATS], idle_timeout=30.0, max_sessions=8) as srv:
        yield srv


# ---------------------------------------------------------------- 2: a failed reset leaves no ghost


def test_a_refused_reset_keeps_the_seat_held_by_its_client(server) -> None:
    """A reset naming an env the server lacks changes nothing: the client keeps its session and its
    seat, so nobody else can take that seat and the match keeps one controller per seat."""
    with Client(server.url) as first, Client(server.url) as thief:
        sid = first.reset(env=DUEL, seed=1).info["session_id"]
        assert _code(lambda: first.reset(env="no/such-env")) == "VALIDATION_ERROR"
        assert _code(lambda: thief.join(sid, "first_0")) == "SEAT_TAKEN"
        assert [s["held"] for s in _info(server.url, sid)["seats"]] == [True, False]
        assert first.act(1)["seq"] >= 0  # still its seat

        team = first.reset_team("first", env=DUEL, seed=2).session_id
        assert _code(lambda: first.reset(env="no/such-env", team="first")) == "VALIDATION_ERROR"
        assert _code(lambda: thief.join_team(team, "first")) == "SEAT_TAKEN"
        assert first.act_team({"first_0": 1})["seats"] == 1


def test_a_restart_refused_at_capacity_changes_nothing(no_shm_leak) -> None:
    """A restart starts the new session before it leaves the old one: refused at capacity, the client
    still holds its seat (nobody else can take it); a client alone in its session may restart at
    capacity, since that session ends as it leaves."""
    with ServerThread(envs=[DUEL], idle_timeout=30.0, max_sessions=1) as srv:
        with Client(srv.url, retry_deadline=0.0) as first, Client(srv.url) as second, Client(srv.url) as third:
            sid = first.reset(env=DUEL, seed=1).info["session_id"]
            second.join(sid, "second_0")
            assert _code(lambda: first.reset(env=DUEL, seed=2)) == "CAPACITY_REACHED"
            assert _code(lambda: third.join(sid, "first_0")) == "SEAT_TAKEN"
            assert first.step(1).info["session_id"] == sid
            second.close()
            again = first.reset(env=DUEL, seed=2).info["session_id"]  # alone now: its old session makes room
            assert again != sid and _info(srv.url, sid)["lifecycle"] in ("ended", "closed")


# ---------------------------------------------------------------- 3: MCP clients have their own players


def test_one_mcp_client_cannot_act_in_or_stop_another_clients_world(server) -> None:
    from mcp import Client as McpClient

    url = server.url.replace("ws://", "http://") + "/mcp"

    async def play() -> None:
        async with McpClient(url) as owner, McpClient(url) as other:
            sid = (await owner.call_tool("start_session", {"env": ONE_SEAT, "seed": 1})).structured_content[
                "session_id"
            ]
            team = (
                await owner.call_tool("start_session", {"env": DUEL, "seed": 2, "team": "first"})
            ).structured_content["session_id"]
            for name, args in [
                ("act", {"session_id": sid, "action": 1}),
                ("observe", {"session_id": sid}),
                ("stop_session", {"session_id": sid}),
                ("act", {"session_id": team, "actions": {"first_0": 1}}),
                ("stop_session", {"session_id": team, "team": "first"}),
            ]:
                refused = await other.call_tool(name, args)
                assert refused.is_error and "NO_SESSION" in refused.content[0].text, (name, refused.content)
            assert (await owner.call_tool("act", {"session_id": sid, "action": 1})).structured_content["seq"] >= 0
            for world in (sid, team):
                assert _info(server.url, world)["lifecycle"] == "running"
                stopped = await owner.call_tool(
                    "stop_session", {"session_id": world, "team": "first"} if world == team else {"session_id": world}
                )
                assert stopped.structured_content["lifecycle"] == "closed"

    asyncio.run(play())


# ---------------------------------------------------------------- 4: OpenEnv HTTP sessions are their starter's


def test_an_http_client_cannot_step_or_reset_another_clients_session(server) -> None:
    with _http(server.url) as owner, _http(server.url) as other:
        sid = owner.post("/reset", json={"env": ONE_SEAT, "seed": 3}).json()["observation"]["session_id"]
        stray = other.post("/step", json={"action": {"action": 1}})
        assert stray.status_code == 404 and "NO_SESSION" in stray.text, stray.text
        assert other.get("/state").status_code == 404
        hijack = other.post("/reset", json={"session_id": sid, "seed": 4})
        assert hijack.status_code == 403 and "SEAT_NOT_HELD" in hijack.text, hijack.text
        assert other.post("/step", json={"action": {"action": 1}, "session_id": sid}).status_code == 403
        refused = owner.post("/reset", json={"session_id": sid, "env": "no/such-env"})
        assert refused.status_code == 422  # a refused reset changes nothing: the session stays the owner's
        # the owner's session was neither stepped nor restarted
        mine = owner.post("/step", json={"action": {"action": 1}, "session_id": sid})
        assert mine.status_code == 200 and mine.json()["observation"]["session_id"] == sid
        assert owner.get("/state").json()["step_count"] == 1
        # the key travels as a header too, for clients without a cookie jar
        key = owner.cookies["nonstop_key"]
        keyed = other.post("/step", json={"action": {"action": 1}}, headers={"X-Nonstop-Key": key})
        assert keyed.status_code == 200 and keyed.json()["observation"]["session_id"] == sid


# ---------------------------------------------------------------- 5: waits


def test_waits_are_bounded_per_connection_and_dropped_when_their_caller_goes(server) -> None:
    """An MCP client parks long waits: past `MAX_WAITS_PER_CONNECTION` each is refused at once with a
    clear error; when the client goes away its waits go with it, and the other seat steps freely."""
    from mcp import Client as McpClient

    url = server.url.replace("ws://", "http://") + "/mcp"
    extra = 3

    async def park() -> str:
        async with McpClient(url) as llm:
            sid = (await llm.call_tool("start_session", {"env": DUEL, "seed": 5})).structured_content["session_id"]
            calls = [
                asyncio.create_task(llm.call_tool("wait", {"session_id": sid, "ticks": 36_000}))
                for _ in range(MAX_WAITS_PER_CONNECTION + extra)
            ]
            done, pending = await asyncio.wait(calls, timeout=10)
            refused = [t.result() for t in done]
            assert len(refused) == extra and len(pending) == MAX_WAITS_PER_CONNECTION
            assert all(r.is_error and "waits pending" in r.content[0].text for r in refused), refused[0].content
            session = server.manager.get(sid)
            assert session is not None and len(session._waiters) == MAX_WAITS_PER_CONNECTION
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            return sid

    sid = asyncio.run(park())
    # the client hung up: its waits are gone (its seat is given up when it expires; its world may end)
    wait_for(lambda: (s := server.manager.get(sid)) is None or not s._waiters, timeout=15, what="waits dropped")


def test_spectators_waits_never_refuse_a_players_step(no_shm_leak) -> None:
    """Waits parked by others (spectators, up to the session's ``max_waiters``) leave a seated
    player's ``step`` and ``wait`` alone: its waits are bounded per connection instead."""
    import websockets

    with ServerThread(envs=[ONE_SEAT], idle_timeout=30.0, max_waiters=2) as srv:
        with Client(srv.url, retry_deadline=0.0) as player:
            sid = player.reset(seed=0).info["session_id"]

            async def crowd_then_step() -> tuple[str, int]:
                watchers = [await websockets.connect(f"{srv.url}/ws/watch/{sid}") for _ in range(3)]
                try:
                    for ws in watchers:
                        await ws.send(json.dumps({"type": "wait", "data": {"ticks": 36_000}}))
                    replies = [asyncio.ensure_future(ws.recv()) for ws in watchers]
                    done, pending = await asyncio.wait(replies, timeout=10, return_when=asyncio.FIRST_COMPLETED)
                    for task in pending:
                        task.cancel()
                    assert len(done) == 1  # two waits park, the one over the cap is refused
                    refused = json.loads(done.pop().result())
                    stepped = await asyncio.get_running_loop().run_in_executor(None, player.step, 1)
                    return refused["data"]["code"], stepped.info["agent_ticks"]
                finally:
                    for ws in watchers:
                        await ws.close()

            code, acted = asyncio.run(crowd_then_step())
            assert code == "BACKPRESSURE" and acted == 1
            assert player.wait(2).info["lifecycle"] == "running"


def test_a_cancelled_wait_leaves_the_session(server) -> None:
    """A wait whose caller is cancelled is removed from the session at once (not at its target tick)."""
    from nonstop.server.connection import Connection
    from nonstop.server.protocol import ResetData, ResetMessage, WaitData, WaitMessage

    async def run() -> None:
        conn = Connection(None, server.manager, 30.0)
        await conn.handle(ResetMessage(data=ResetData(env=ONE_SEAT, seed=0)))
        session = conn.current()
        task = asyncio.create_task(conn.handle(WaitMessage(data=WaitData(ticks=36_000))))
        for _ in range(200):
            if session._waiters:
                break
            await asyncio.sleep(0.01)
        assert len(session._waiters) == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not session._waiters
        conn.close("test done")

    asyncio.run(run())


def test_a_wait_longer_than_the_idle_timeout_is_activity(no_shm_leak) -> None:
    with ServerThread(envs=[ONE_SEAT], idle_timeout=0.5) as srv:
        with Client(srv.url) as client:
            client.reset(seed=0)
            seen = client.wait(120)  # 2 s of a 60 Hz world, four idle timeouts
            assert seen.info["lifecycle"] == "running" and seen.tick >= 120
            assert client.act(1)["seq"] >= 0


# ---------------------------------------------------------------- 6: a socket whose session ended is closed


def test_a_socket_whose_session_was_reaped_is_closed(no_shm_leak) -> None:
    import websockets

    with ServerThread(envs=[ONE_SEAT], idle_timeout=0.5, connect_timeout=1.0) as srv:

        async def idle() -> int | None:
            async with websockets.connect(srv.url + "/ws") as ws:
                await ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
                assert json.loads(await ws.recv())["type"] == "observation"
                try:
                    await asyncio.wait_for(ws.recv(), timeout=15)  # silent: reaped, then closed
                except websockets.ConnectionClosed as exc:
                    return exc.rcvd.code if exc.rcvd is not None else None
                return None

        assert asyncio.run(idle()) == 1008
        assert srv.app.state.connections == 0


# ---------------------------------------------------------------- 8: overflowing numbers are bad actions


@pytest.mark.parametrize(
    ("action", "code"),
    [
        (HUGE, "ACTION_OUT_OF_RANGE"),
        ([HUGE], "ACTION_OUT_OF_RANGE"),
        ([-HUGE], "ACTION_OUT_OF_RANGE"),
        ([2**64], "ACTION_OUT_OF_RANGE"),
        ([float("inf")], "INVALID_JSON"),  # travels as Infinity, which is not JSON
        ([float("nan")], "INVALID_JSON"),
    ],
    ids=["huge", "[huge]", "[-huge]", "[2**64]", "[inf]", "[nan]"],
)
def test_an_overflowing_action_is_a_bad_action(server, action, code) -> None:
    with Client(server.url) as client:
        client.reset(env=BOX, seed=0, default="random")
        assert _code(lambda: client.act(action)) == code
        assert client.act([0.5])["seq"] >= 0  # the connection and its session carry on


def test_an_overflowing_action_is_out_of_range_over_http_and_for_a_team(server) -> None:
    with _http(server.url) as http:
        http.post("/reset", json={"env": BOX, "seed": 0, "default": "random"})
        as_json = {"Content-Type": "application/json"}  # raw bodies: json= would refuse to write them
        stepped = http.post("/step", content=json.dumps({"action": {"action": [HUGE]}}), headers=as_json)
        assert stepped.status_code == 422 and "ACTION_OUT_OF_RANGE" in stepped.text, stepped.text
        past_float = http.post("/step", content=b'{"action": {"action": [1e400]}}', headers=as_json)  # read as inf
        assert past_float.status_code == 422 and "INVALID_JSON" in past_float.text, past_float.text
        assert http.post("/step", json={"action": {"action": [0.5]}}).status_code == 200
    with Client(server.url) as client:
        client.reset_team("first", env=BOX_SEATS, seed=0)
        assert _code(lambda: client.act_team({"first_0": [HUGE]})) == "ACTION_OUT_OF_RANGE"
        assert _code(lambda: client.act_team({"first_0": [-HUGE], "second_0": [0.0]})) == "ACTION_OUT_OF_RANGE"
        assert client.act_team({"first_0": [0.5]})["seats"] == 1


# ---------------------------------------------------------------- 9: vanished holders give their seats up


def test_a_silent_mcp_holder_gives_its_seat_up_after_the_idle_timeout(no_shm_leak) -> None:
    from mcp import Client as McpClient

    with ServerThread(envs=[DUEL], idle_timeout=1.0) as srv:
        url = srv.url.replace("ws://", "http://") + "/mcp"
        with Client(srv.url) as bot:
            sid = bot.reset(env=DUEL, seed=0).info["session_id"]

            async def join_then_fall_silent() -> None:
                async with McpClient(url) as llm:
                    joined = (await llm.call_tool("join_session", {"session_id": sid})).structured_content
                    assert joined["seat"] == "second_0"

            asyncio.run(join_then_fall_silent())

            def seat_freed() -> bool:
                bot.act(0)  # the bot stays active: the session lives on
                return [s["held"] for s in bot.state(seats="all")["seats"]] == [True, False]

            wait_for(seat_freed, timeout=15, what="the silent MCP holder's seat freed")
            with Client(srv.url) as newcomer:
                assert newcomer.join(sid).info["seat"] == "second_0"


def test_an_ended_session_shows_no_seat_held(server) -> None:
    with Client(server.url) as first, Client(server.url) as second:
        sid = first.reset(env=DUEL, seed=0, max_ticks=20).info["session_id"]
        second.join(sid)
        closed = wait_for(lambda: (s := _info(server.url, sid))["lifecycle"] == "closed" and s, what="closed")
        assert [s["held"] for s in closed["seats"]] == [False, False]
        assert [s["held"] for s in first.state(seats="all")["seats"]] == [False, False]
