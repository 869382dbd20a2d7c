"""The server end to end: a real uvicorn server on 127.0.0.1 (random free port), played by
OpenEnv's own published client, by nonstop's clients and by the Gymnasium adapter.

These tests run on the wall clock (a server is realtime by nature) with a tiny 60 Hz world, and
assert only what holds however loaded the machine is: ordering of ticks, counts, codes, states.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.server.app import ServerThread, free_port
from nonstop.server.client import AsyncClient, Client, RemoteEnv, ServerError, http_get
from nonstop.server.replay import Replay, verify
from nonstop.server.sessions import TRANSITIONS, Lifecycle

pytestmark = pytest.mark.wall
WORLD = "theory/inaction"  # 60 Hz, Discrete(3), acting earns 1 per tick, β's noop 0


def _session(url: str, sid: str, token: str | None = None) -> dict:
    return next(s for s in http_get(url, "/sessions", token=token) if s["session_id"] == sid)


def _descendants(pid: int) -> set[int]:
    """Live descendants of process ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def _gone(pid: int) -> bool:
    try:
        return "(zombie)" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


#: the tick pool on threads of the server process, and on one worker process
TICK_PROCS = pytest.mark.parametrize("tick_procs", [0, 1], ids=["threads", "procs"])


@pytest.fixture
def server(request, tmp_path, no_shm_leak):
    tick_procs = getattr(request, "param", 0)
    with ServerThread(
        envs=[WORLD, "CartPole"], replay_dir=tmp_path / "replays", idle_timeout=30.0, tick_procs=tick_procs
    ) as srv:
        yield srv
    if tick_procs:
        assert all(p.process.exitcode is not None for p in srv.manager.procs.procs)  # every worker reaped


@pytest.mark.slow
def test_openenv_published_client_plays_unmodified(server) -> None:
    """OpenEnv's GenericEnvClient (openenv-core, as published) connects, resets, steps, reads state."""
    generic = pytest.importorskip("openenv.core.generic_client")
    with generic.GenericEnvClient(base_url=server.url.replace("ws://", "http://")).sync() as env:
        first = env.reset(seed=7)
        assert first.done is False and first.observation["tick"] == 0
        ticks = []
        for _ in range(5):
            result = env.step({"action": 1})
            ticks.append(result.observation["tick"])
            assert result.reward >= 1.0  # our action was applied on that tick: it earned 1
        assert ticks == sorted(ticks) and len(set(ticks)) == 5
        state = env.state()
        assert state["step_count"] == 5 and state["lifecycle"] == "running" and state["agent_ticks"] == 5
        with pytest.raises(RuntimeError, match="ACTION_OUT_OF_RANGE"):
            env.step({"action": 7})
        assert env.step({"action": 0}).observation["tick"] > ticks[-1]  # the connection survived


@pytest.mark.parametrize("server", [0, 1], indirect=True, ids=["threads", "procs"])
def test_realtime_verbs(server) -> None:
    with Client(server.url) as client:
        first = client.reset(seed=0)
        assert isinstance(first.obs, np.ndarray) and first.tick == 0 and first.info["lifecycle"] == "running"
        ack = client.act(1)
        assert ack["seq"] == 0 and ack["tick"] >= 0
        later = client.wait(6)
        assert later.tick >= ack["tick"] + 6
        assert later.info["agent_ticks"] == 1 and later.info["inaction_ticks"] == later.tick - 1
        assert later.reward == pytest.approx(1.0)  # one agent tick earned 1; β's ticks earned 0
        now = client.observe()
        assert now.tick >= later.tick and now.reward == 0.0
        until = client.wait(until=now.tick + 3)
        assert until.tick >= now.tick + 3
        client.subscribe(4)
        pushes = [client.next_push(timeout=5) for _ in range(3)]
        ticks = [p.tick for p in pushes]
        assert all(b - a >= 4 for a, b in zip(ticks, ticks[1:])), ticks
        client.subscribe(0)
        sid = now.info["session_id"]
        assert _session(server.url, sid)["lifecycle"] == "running"
    info = wait_for(lambda: (s := _session(server.url, sid))["lifecycle"] == "closed" and s, what="closed")
    assert info["end_reason"] == "closed by client"
    assert Path(info["replay"]).exists()


def test_async_client_and_reset_semantics(server) -> None:
    async def play() -> None:
        async with AsyncClient(server.url) as client:
            await client.reset(env="CartPole", seed=3, encoding="list")
            episodes = set()
            for _ in range(200):  # push left until the pole falls; the world resets on its own
                result = await client.step(0)
                episodes.add(result.info["episode"])
                if result.done:
                    break
            # the reply that says done carries the terminal observation of episode 0 and how it ended
            assert result.done and result.info["episode"] == 0 and result.info["terminated"]
            assert abs(result.obs[2]) > 0.2  # the pole angle past CartPole's ±0.2095 rad limit
            again = await client.reset()  # the episode already ended: no second reset is requested
            assert again.info["episode"] == 1
            mid = await client.reset()  # mid-episode: the world ends it at its next tick
            assert mid.info["episode"] == 2
            with pytest.raises(ServerError) as err:
                await client.request({"type": "wait", "data": {"ticks": 0}})
            assert err.value.code == "VALIDATION_ERROR"

    asyncio.run(play())


def test_gymnasium_adapter_suffers_inaction_when_slow(server) -> None:
    env = RemoteEnv(server.url.replace("ws://", "http://"), env=WORLD)
    try:
        obs, info = env.reset(seed=1)
        assert env.observation_space.contains(obs.astype(env.observation_space.dtype))
        obs, reward, terminated, truncated, info = env.step(1)
        assert reward == 1.0 and info["nonstop_ticks_elapsed"] >= 1
        assert isinstance(info["nonstop_delay"], np.int64)  # the local view's keys and types
        time.sleep(0.2)  # a slow agent: ~12 ticks pass while it "thinks"
        obs, reward, terminated, truncated, info = env.step(1)
        assert info["nonstop_ticks_elapsed"] >= 6 and info["nonstop_inaction_ticks"] >= 5
    finally:
        env.close()


@pytest.mark.slow
def test_capacity_full_is_an_error_and_frees_up(tmp_path, no_shm_leak) -> None:
    with ServerThread(envs=[WORLD], max_sessions=2) as srv:
        a, b, c = Client(srv.url), Client(srv.url), Client(srv.url)
        try:
            a.reset(), b.reset()
            with pytest.raises(ServerError) as err:
                c.reset()
            assert err.value.code == "CAPACITY_REACHED"
            with pytest.raises(ServerError) as err:
                c.observe()
            assert err.value.code == "NO_SESSION"
            a.close()
            wait_for(lambda: srv.manager.live_count() == 1, what="a's session to close")
            assert c.reset().tick == 0
        finally:
            for cl in (b, c):
                cl.close()


def test_vanished_client_ends_by_timeout_with_replay(tmp_path, no_shm_leak) -> None:
    """A client that stops talking but never closes its socket: the idle reaper ends its session
    and the replay is finalized and verifies."""
    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], replay_dir=tmp_path, idle_timeout=0.5) as srv:
        with connect(srv.url + "/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 5}}))
            sid = json.loads(ws.recv())["data"]["observation"]["session_id"]
            ws.send(json.dumps({"type": "act", "data": {"action": 2}}))
            ws.recv()
            info = wait_for(lambda: (s := _session(srv.url, sid))["lifecycle"] == "closed" and s, what="reaped")
            assert info["end_reason"].startswith("idle timeout")
            replay = Replay.load(info["replay"])
            assert replay.ticks >= 20 and replay.summary()["agent_ticks"] == 1
            assert verify(replay).ok
            ws.send(json.dumps({"type": "observe"}))  # the socket is open; the session is not
            assert json.loads(ws.recv())["data"]["code"] == "SESSION_ENDED"


def test_connection_lost_ends_session(server) -> None:
    from websockets.sync.client import connect

    with connect(server.url + "/ws") as ws:
        ws.send(json.dumps({"type": "reset"}))
        sid = json.loads(ws.recv())["data"]["observation"]["session_id"]
        ws.socket.close()  # no close frame: the connection is simply lost
    info = wait_for(lambda: (s := _session(server.url, sid))["lifecycle"] == "closed" and s, what="closed")
    assert info["end_reason"] == "connection lost"


def test_token_auth(no_shm_leak) -> None:
    import httpx
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    token = "s3cret-token"
    with ServerThread(envs=[WORLD], token=token) as srv:
        http = srv.url.replace("ws://", "http://")
        for path in ("/health", "/metadata", "/schema", "/sessions", "/replays"):
            assert httpx.get(http + path).status_code == 401
            assert httpx.get(http + path, headers={"Authorization": "Bearer wrong-token"}).status_code == 401
            assert httpx.get(http + path, headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with pytest.raises(InvalidStatus):
            connect(srv.url + "/ws")
        with pytest.raises(InvalidStatus):
            connect(srv.url + "/ws?token=wrong-token")
        with Client(srv.url, token=token) as client:
            assert client.reset().tick == 0
        with connect(srv.url + f"/ws?token={token}") as ws:
            ws.send(json.dumps({"type": "reset"}))
            assert json.loads(ws.recv())["type"] == "observation"


def test_http_endpoints(server) -> None:
    health = http_get(server.url, "/health")
    assert health["status"] == "healthy" and health["ticks_advancing"]
    meta = http_get(server.url, "/metadata")
    assert meta["default_env"] == WORLD and meta["envs"]["CartPole"]["action"] == {
        "type": "Discrete",
        "n": 2,
        "start": 0,
    }
    schema = http_get(server.url, "/schema")
    assert set(schema["client_messages"]) == {
        "reset",
        "step",
        "state",
        "close",
        "observe",
        "act",
        "wait",
        "subscribe",
        "join",
    }
    assert schema["client_messages"]["act"]["additionalProperties"] is False
    assert set(schema["server_messages"]) == {"observation", "push", "team_observation", "state", "ack", "error"}
    assert http_get(server.url, "/replays") == []


def test_health_reports_stalled_ticks(tmp_path, no_shm_leak) -> None:
    import httpx

    with ServerThread(envs=[WORLD]) as srv:
        http = srv.url.replace("ws://", "http://")
        assert httpx.get(http + "/health").status_code == 200
        srv.manager.pool.close()  # the tick threads stop: nothing ticks any more
        wait_for(lambda: httpx.get(http + "/health").status_code == 503, timeout=5, what="unhealthy")
        assert httpx.get(http + "/health").json()["ticks_advancing"] is False


def test_lifecycle_state_machine() -> None:
    assert TRANSITIONS[Lifecycle.CREATED] == {Lifecycle.STARTING, Lifecycle.ENDED}
    assert TRANSITIONS[Lifecycle.CLOSED] == set()
    reachable = {Lifecycle.CREATED}
    frontier = [Lifecycle.CREATED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    assert reachable == set(Lifecycle)
    for state in Lifecycle:  # every state can still reach closed: no path leaks resources
        seen, todo = set(), [state]
        while todo:
            s = todo.pop()
            seen.add(s)
            todo.extend(TRANSITIONS[s] - seen)
        assert Lifecycle.CLOSED in seen


def test_replay_detects_tampering(server, tmp_path) -> None:
    with Client(server.url) as client:
        client.reset(env="CartPole", seed=11, encoding="none")
        for a in (0, 1, 1, 0, 1):
            client.step(a)
        sid = client.last.info["session_id"]
    info = wait_for(lambda: (s := _session(server.url, sid))["lifecycle"] == "closed" and s, what="closed")
    replay = Replay.load(info["replay"])
    assert verify(replay).ok and replay.summary()["agent_ticks"] == 5
    agent_rows = np.flatnonzero(replay.columns["source"] == 1)
    replay.actions[agent_rows[0], 0] = 1 - replay.actions[agent_rows[0], 0]  # flip one applied action
    bad = verify(replay)
    assert not bad.ok and bad.mismatches[0]["tick"] == int(replay.columns["tick"][agent_rows[0]])
    out = tmp_path / "timeline.png"
    from nonstop.cli import main

    assert main(["replay", "verify", info["replay"]]) == 0
    assert main(["replay", "plot", info["replay"], "--out", str(out)]) == 0 and out.stat().st_size > 1000
    with pytest.raises(ValueError, match="image observations"):
        from nonstop.server.replay import write_video

        write_video(replay, tmp_path / "v.gif")


def test_replay_video_of_atari(tmp_path, no_shm_leak) -> None:
    with ServerThread(envs=["Boxing"], replay_dir=tmp_path) as srv:
        with Client(srv.url) as client:
            client.reset(seed=2, encoding="none")
            client.wait(12)
            sid = client.last.info["session_id"]
        info = wait_for(lambda: (s := _session(srv.url, sid))["lifecycle"] == "closed" and s, what="closed")
    from nonstop.cli import main

    gif = tmp_path / "boxing.gif"
    assert main(["replay", "verify", info["replay"]]) == 0
    assert main(["replay", "video", info["replay"], "--out", str(gif), "--every", "4"]) == 0
    assert gif.read_bytes()[:3] == b"GIF"
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames == Replay.load(info["replay"]).ticks // 4 and image.size == (160, 210)


@TICK_PROCS
def test_sigterm_closes_sessions_and_flushes_replays(tmp_path, tick_procs) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nonstop.cli",
            "serve",
            "--env",
            WORLD,
            "--port",
            str(port),
            "--replay-dir",
            str(tmp_path),
            "--log-level",
            "warning",
            "--tick-procs",
            str(tick_procs),
        ],
        env=env,
    )
    try:
        url = f"ws://127.0.0.1:{port}"

        def up():
            try:
                return http_get(url, "/health", timeout=1)["status"] == "healthy"
            except Exception:
                return False

        wait_for(up, timeout=60, what="server up")
        client = Client(url)
        client.reset(seed=4)
        client.step(1)
        sid = client.last.info["session_id"]
        workers = _descendants(proc.pid)
        assert len(workers) >= tick_procs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        wait_for(lambda: all(_gone(w) for w in workers), 10, "the server's children to exit")
        replay = Replay.load(tmp_path / f"{sid}.npz")
        assert replay.header["end_reason"] in ("server shutdown", "connection lost")
        assert verify(replay).ok
        client.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_work_queue_refuses_with_backpressure() -> None:
    import threading

    from nonstop.server.protocol import ProtocolError
    from nonstop.server.sessions import WorkQueue

    release = threading.Event()
    queue = WorkQueue(workers=1, max_pending=2)
    try:
        first, second = queue.submit(release.wait), queue.submit(release.wait)
        with pytest.raises(ProtocolError) as err:
            queue.submit(release.wait)
        assert err.value.code == "BACKPRESSURE" and queue.refused == 1
        release.set()
        first.result(5), second.result(5)
        wait_for(lambda: queue.pending == 0, what="queue drained")
        assert queue.submit(lambda: 3).result(5) == 3  # room again once the backlog is gone
    finally:
        release.set()
        queue.close()


def test_waits_are_bounded_per_session(tmp_path, no_shm_leak) -> None:
    with ServerThread(envs=[WORLD], max_waiters=2) as srv:
        import asyncio as aio

        async def run() -> None:
            async with AsyncClient(srv.url) as client:
                first = await client.reset()
                session = srv.manager.get(first.info["session_id"])
                loop = aio.get_running_loop()
                futs = [session.wait_tick(10**6, loop) for _ in range(2)]
                with pytest.raises(ProtocolError) as err:
                    session.wait_tick(10**6, loop)
                assert err.value.code == "BACKPRESSURE"
                with pytest.raises(ServerError) as bad:
                    await client.wait(until=first.tick + 10**6)
                assert bad.value.code == "VALIDATION_ERROR"
                srv.manager.end(session, "test over")
                await aio.wait_for(aio.gather(*futs), 5)  # ending a session releases its waiters

        from nonstop.server.protocol import ProtocolError

        aio.run(run())


@TICK_PROCS
def test_warm_env_sessions_replay_exactly(tmp_path, no_shm_leak, tick_procs) -> None:
    """A session the server seeds itself starts on a warm env (built and reset with its seed ahead
    of time, on the tick worker when there is one); its replay records that and still re-simulates
    hash for hash."""
    with ServerThread(envs=["CartPole"], replay_dir=tmp_path, warm_envs=1, tick_procs=tick_procs) as srv:
        wait_for(lambda: http_get(srv.url, "/health")["warm_envs_ready"]["CartPole"] >= 1, 60, "a warm env")
        with Client(srv.url) as client:
            client.reset(encoding="none")  # no seed: the warm env
            for a in (1, 0, 1, 1, 0, 0, 1):
                client.step(a)
            sid = client.last.info["session_id"]
        info = wait_for(lambda: (s := _session(srv.url, sid))["lifecycle"] == "closed" and s, what="closed")
    replay = Replay.load(info["replay"])
    assert replay.header["warm_reset"] is True and isinstance(replay.header["seed"], int)
    assert verify(replay).ok
    replay.header["warm_reset"] = False  # without the warm reset the first observation differs
    assert not verify(replay).ok


class _RawSocket:
    """A minimal WebSocket client on a plain socket with a small receive buffer, so that *not
    reading* really backs the connection up (library clients read eagerly on a thread)."""

    def __init__(self, port: int) -> None:
        import base64
        import socket

        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head

    def send(self, obj: dict) -> None:
        import struct

        data, mask = json.dumps(obj).encode(), os.urandom(4)
        size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + struct.pack(">H", len(data))
        self.sock.sendall(b"\x81" + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            out += self.sock.recv(n - len(out))
        return out

    def recv(self) -> dict:
        import struct

        _, size = self._exact(2)
        if size == 126:
            (size,) = struct.unpack(">H", self._exact(2))
        elif size == 127:
            (size,) = struct.unpack(">Q", self._exact(8))
        return json.loads(self._exact(size))


def test_slow_subscriber_never_slows_its_world(no_shm_leak) -> None:
    """A subscriber that stops reading big frames: its socket backs up, the server buffers nothing
    more, its pushes skip ticks (newest wins), and its world keeps ticking at full rate."""
    with ServerThread(envs=["Boxing"]) as srv:
        ws = _RawSocket(srv.port)
        try:
            ws.send({"type": "reset", "data": {"seed": 0, "encoding": "b64"}})
            sid = ws.recv()["data"]["observation"]["session_id"]
            ws.send({"type": "subscribe", "data": {"every": 1}})
            start = _session(srv.url, sid)["tick"]
            time.sleep(2.0)  # not reading: 120 frames of 134 KB (16 MB) fall due
            ticked = _session(srv.url, sid)["tick"] - start
            assert ticked >= 0.7 * 120, ticked
            ticks = [m["data"]["observation"]["tick"] for m in (ws.recv() for _ in range(40)) if m["type"] == "push"]
            assert ticks == sorted(ticks)
            assert ticks[-1] - ticks[0] > len(ticks) + 30, ticks  # it skipped ahead instead of queueing
        finally:
            ws.sock.close()


def test_tick_workers_end_their_sessions_and_clean_up(tmp_path, no_shm_leak) -> None:
    """Sessions ticked on worker processes: max_ticks ends one there with a replay that verifies; a
    worker that dies ends its sessions (channels unlinked) and is replaced, so /health recovers
    (tests/test_server_heal.py covers what the replay keeps)."""
    with ServerThread(envs=[WORLD], replay_dir=tmp_path, tick_procs=2, idle_timeout=30.0) as srv:
        procs = srv.manager.procs.procs
        with Client(srv.url) as short, Client(srv.url) as other:
            short.reset(seed=3, max_ticks=12)
            other.reset(seed=4)
            short_sid, other_sid = short.last.info["session_id"], other.last.info["session_id"]
            info = wait_for(lambda: (s := _session(srv.url, short_sid))["lifecycle"] == "closed" and s, what="end")
            assert info["end_reason"] == "max_ticks reached" and info["summary"]["ticks"] == 12
            assert verify(Replay.load(info["replay"])).ok
            victim = next(p for p in procs if p is srv.manager.get(other_sid).proc)
            os.kill(victim.process.pid, signal.SIGKILL)
            info = wait_for(lambda: (s := _session(srv.url, other_sid))["lifecycle"] == "closed" and s, what="end")
            assert info["end_reason"].startswith("tick worker died (killed by signal 9)")
            wait_for(lambda: srv.manager.health()["status"] == "healthy", 60, "a replacement worker")
            assert victim not in procs and srv.manager.procs.replaced == 1
    assert all(p.process.exitcode is not None for p in procs)


def test_manager_rejects_bad_tick_pool_settings() -> None:
    from nonstop.server.sessions import SessionManager

    for kwargs, match in (
        ({"tick_procs": -1}, "tick_procs"),
        ({"tick_procs": True}, "tick_procs"),
        ({"tick_sched": "rt"}, "tick_sched"),
    ):
        with pytest.raises(ValueError, match=match):
            SessionManager([WORLD], **kwargs)


def test_tickprocs_doctests(no_shm_leak) -> None:
    import doctest

    from nonstop.server import tickprocs

    failures, tried = doctest.testmod(tickprocs, verbose=False, report=False)
    assert tried > 0 and failures == 0
