"""A self-healing server (issue 14): what survives a killed or stopped tick worker, idle and excess
connections, a reset storm, a crowd of clients starting at once, and where the token may leak.

Wall-clock tests with a tiny 60 Hz world; bounds are generous (the machine is shared) and every
assertion is about what happened (codes, counts, files, processes), not about speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.server.app import RedactToken, ServerThread, resolve_token
from nonstop.server.client import AsyncClient, Client, ServerError, http_get
from nonstop.server.replay import Replay, verify

pytestmark = pytest.mark.wall
WORLD = "theory/inaction"  # 60 Hz, Discrete(3)


# ----------------------------------------------------------------------------- secrets


def test_token_from_file_env_or_command_line(tmp_path, monkeypatch) -> None:
    path = tmp_path / "token"
    path.write_text("file-token-123\n")
    assert resolve_token(None, path, environ={}) == "file-token-123"
    assert resolve_token(None, None, environ={"NONSTOP_TOKEN": "env-token-123"}) == "env-token-123"
    assert resolve_token("cli-token-123", None, environ={"NONSTOP_TOKEN": "env-token-123"}) == "cli-token-123"
    assert resolve_token(None, None, environ={}) is None
    with pytest.raises(ValueError, match="not both"):
        resolve_token("cli-token-123", path)
    with pytest.raises(ValueError, match="cannot read the token file"):
        resolve_token(None, tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        resolve_token(None, tmp_path / "empty")
    # the command line: a missing token file is one clear line, exit code 2
    from nonstop.cli import main

    assert main(["serve", "--env", WORLD, "--token-file", str(tmp_path / "missing")]) == 2


def test_access_log_never_holds_the_token(no_shm_leak) -> None:
    """A WebSocket client passing ``?token=`` (and one passing a wrong one): uvicorn's access log
    names the path, with the token redacted."""
    from websockets.exceptions import InvalidHandshake
    from websockets.sync.client import connect

    secret = "very-secret-token-4711"
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    access = logging.getLogger("uvicorn.access")
    with ServerThread(envs=[WORLD], token=secret, log_level="info") as srv:
        for name in RedactToken.LOGGERS:
            logging.getLogger(name).addHandler(handler)
        try:
            with connect(f"{srv.url}/ws?token={secret}") as ws:
                ws.send('{"type": "state"}')
                assert "NO_SESSION" in ws.recv(timeout=10)
            with pytest.raises(InvalidHandshake):  # a wrong token: refused, and its attempt logged too
                with connect(f"{srv.url}/ws?token=wrong-{secret}") as ws:
                    ws.recv(timeout=10)
            http_get(srv.url, "/health?token=" + secret, token=secret)
            wait_for(lambda: sum("token=***" in line for line in lines) >= 2, what="the access log lines")
        finally:
            for name in RedactToken.LOGGERS:
                logging.getLogger(name).removeHandler(handler)
    assert access.level <= logging.INFO
    assert not [line for line in lines if secret in line], lines
    assert any("/ws?token=***" in line for line in lines), lines


@pytest.mark.parametrize("source", ["file", "env"])
def test_nonstop_serve_takes_the_token_from_a_file_or_env_and_never_logs_it(tmp_path, source) -> None:
    """The real command, with uvicorn's own logging set-up and access log on: a client that passes
    the token in the query string is let in, and no line of the server's output holds the token."""
    from websockets.exceptions import InvalidHandshake
    from websockets.sync.client import connect

    from nonstop.server.app import free_port

    secret = f"token-from-{source}-0815"
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    env.pop("NONSTOP_TOKEN", None)
    args = [
        sys.executable,
        "-m",
        "nonstop.cli",
        "serve",
        "--env",
        WORLD,
        "--port",
        str(port),
        "--log-level",
        "info",
        "--tick-procs",
        "0",
    ]
    if source == "file":
        (tmp_path / "token").write_text(secret + "\n")
        args += ["--token-file", str(tmp_path / "token")]
    else:
        env["NONSTOP_TOKEN"] = secret
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"ws://127.0.0.1:{port}"

        def up():
            try:
                return http_get(url, "/health", token=secret, timeout=1)["status"] == "healthy"
            except Exception:
                return False

        wait_for(up, timeout=60, what="server up")
        assert secret not in " ".join(open(f"/proc/{proc.pid}/cmdline").read().split("\0"))  # not in ps
        with connect(f"{url}/ws?token={secret}") as ws:
            ws.send('{"type": "reset", "data": {"seed": 1}}')
            assert '"observation"' in ws.recv(timeout=30)
        with pytest.raises(InvalidHandshake):
            with connect(f"{url}/ws") as ws:  # no token: refused
                ws.recv(timeout=10)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert "/ws?token=***" in out, out  # the access log names the socket...
    assert secret not in out  # ...and never the token


# ----------------------------------------------------------------------------- replay retention


def test_replay_retention_survives_a_reset_storm(tmp_path, no_shm_leak) -> None:
    """Every seeded reset ends a session and writes its replay; the directory keeps the newest
    ``replay_keep`` of them (and at start prunes what an earlier run left)."""
    old = tmp_path / "000-old.npz"
    for i in range(5):
        (tmp_path / f"older-{i}.npz").write_bytes(b"x" * 10)
    old.write_bytes(b"x" * 10)
    os.utime(old, ns=(1, 1))  # the oldest of all
    with ServerThread(envs=[WORLD], replay_dir=tmp_path, replay_keep=4) as srv:
        assert not old.exists() and len(list(tmp_path.glob("*.npz"))) == 4  # pruned at start
        with Client(srv.url) as client:
            for seed in range(12):
                client.reset(seed=seed)
                client.step(1)
            last_sid = client.last.info["session_id"]
        wait_for(lambda: srv.manager.get(last_sid) is None, what="the last session to finalize")
        replays = sorted(p.name for p in tmp_path.glob("*.npz"))
        assert len(replays) == 4, replays
        assert f"{last_sid}.npz" in replays  # the newest is kept
        assert srv.manager.replays_pruned >= 12 + 2 - 4
        assert not any(name.startswith("older-") for name in replays)


def test_replay_retention_by_size(tmp_path, no_shm_leak) -> None:
    for i in range(6):
        path = tmp_path / f"r{i}.npz"
        path.write_bytes(b"x" * 400_000)
        os.utime(path, ns=(i * 10**9, i * 10**9))
    with ServerThread(envs=[WORLD], replay_dir=tmp_path, replay_keep=0, replay_max_mb=1.0):
        assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["r4.npz", "r5.npz"]  # 0.8 MB <= 1 MB
    with pytest.raises(ValueError, match="replay_keep"):
        ServerThread(envs=[WORLD], replay_dir=tmp_path, replay_keep=-1)
    with pytest.raises(ValueError, match="replay_max_mb"):
        ServerThread(envs=[WORLD], replay_dir=tmp_path, replay_max_mb=-2)


# ----------------------------------------------------------------------------- connections


def test_idle_connections_close_and_connections_are_capped(no_shm_leak) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], connect_timeout=1.0, max_connections=3) as srv, contextlib.ExitStack() as stack:
        idle = [stack.enter_context(connect(f"{srv.url}/ws")) for _ in range(3)]
        refused = Client(srv.url, retry_deadline=0)
        stack.callback(refused.close)
        with pytest.raises(ServerError) as err:  # one more than the cap: refused before the handshake
            refused.reset()
        assert err.value.code == "CAPACITY_REACHED"
        t0 = time.monotonic()
        for ws in idle:  # none starts a session: each is closed by the server
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd.code == 1008 and "no session started" in closed.value.rcvd.reason
        assert time.monotonic() - t0 < 25
        wait_for(lambda: http_get(srv.url, "/health")["connections"] == 0, what="the connection count to drop")
        with Client(srv.url) as client:  # room again; a connection with a session outlives the timeout
            client.reset(seed=1)
            time.sleep(1.5)
            assert client.step(1).tick >= 1
    with pytest.raises(ValueError, match="max_connections"):
        ServerThread(envs=[WORLD], max_connections=0)
    with pytest.raises(ValueError, match="connect_timeout"):
        ServerThread(envs=[WORLD], connect_timeout=0)


# ----------------------------------------------------------------------------- client retries


async def _crowd(url: str, n: int, retry_deadline: float) -> list:
    """``n`` clients reset at once; each one's reply (or refusal) and its retry count."""
    clients = [AsyncClient(url, retry_deadline=retry_deadline, timeout=60) for _ in range(n)]

    async def one(client: AsyncClient):
        try:
            return await client.reset(seed=7)
        except ServerError as exc:
            return exc
        finally:
            await client.close()

    results = await asyncio.gather(*(one(c) for c in clients))
    return [(r, c.retries) for r, c in zip(results, clients)]


def test_32_clients_at_once_all_get_sessions(no_shm_leak) -> None:
    """The issue's case, with `nonstop serve`'s defaults (2 tick workers, an admission queue of 16)
    and the client's default retry deadline."""
    with ServerThread(envs=[WORLD], tick_procs=2) as srv:
        results = asyncio.run(_crowd(srv.url, 32, retry_deadline=5.0))
        assert not [r for r, _ in results if isinstance(r, Exception)]
        assert len({r.info["session_id"] for r, _ in results}) == 32
        assert sum(k for _, k in results) >= srv.manager.work.refused  # every refusal was retried


def test_crowd_of_clients_all_get_sessions_through_backpressure(no_shm_leak) -> None:
    """16 clients start at once against an admission queue of 2: the server refuses many with
    BACKPRESSURE, the clients back off with jitter and every one gets its session. Without retries
    the same crowd sees refusals."""
    n = 16
    with ServerThread(envs=[WORLD], max_pending_work=2, work_workers=1, max_sessions=64) as srv:
        results = asyncio.run(_crowd(srv.url, n, retry_deadline=20.0))
        errors = [r for r, _ in results if isinstance(r, Exception)]
        assert not errors, errors
        assert len({r.info["session_id"] for r, _ in results}) == n  # n sessions, one each
        assert srv.manager.work.refused > 0 and sum(k for _, k in results) >= srv.manager.work.refused
        refused_before = srv.manager.work.refused
        results = asyncio.run(_crowd(srv.url, n, retry_deadline=0))
        codes = {r.code for r, _ in results if isinstance(r, ServerError)}
        assert codes == {"BACKPRESSURE"} and srv.manager.work.refused > refused_before


def test_client_retries_capacity_until_a_session_frees(no_shm_leak) -> None:
    with ServerThread(envs=[WORLD], max_sessions=1) as srv:
        first = Client(srv.url)
        first.reset()
        hasty = Client(srv.url, retry_deadline=0.3)
        with pytest.raises(ServerError) as err:
            hasty.reset()
        hasty.close()
        assert err.value.code == "CAPACITY_REACHED" and hasty.retries >= 1
        later = Client(srv.url, retry_deadline=30.0)
        try:
            import threading

            threading.Timer(1.0, first.close).start()
            assert later.reset().tick == 0
            assert later.retries >= 1
        finally:
            later.close()


# ----------------------------------------------------------------------------- a stopped tick worker


def http_get_any(url: str, path: str) -> dict:
    """GET as JSON whatever the status (``/health`` answers 503 with its report)."""
    import httpx

    return httpx.get(url.replace("ws://", "http://") + path, timeout=10).json()


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.monotonic()
    try:
        out = fn(*args, **kwargs)
    except ServerError as exc:
        out = exc
    return time.monotonic() - t0, out


def test_request_loop_never_waits_on_a_lock_a_worker_holds(no_shm_leak) -> None:
    """A worker stopped inside ``take()`` holds its session's action-queue lock. Here the test holds
    that lock itself (the same state, exactly timed): the other session answers promptly, the
    affected one gets a clear BACKPRESSURE within about a second, and recovers once it is free."""
    with ServerThread(envs=[WORLD], tick_procs=2, idle_timeout=60.0) as srv:
        with Client(srv.url, retry_deadline=0) as held, Client(srv.url, retry_deadline=0) as other:
            held.reset(seed=1)
            other.reset(seed=2)
            session = srv.manager.get(held.last.info["session_id"])
            assert session.proc is not srv.manager.get(other.last.info["session_id"]).proc
            lock = session.queue._lock
            assert lock.acquire(timeout=5)
            try:
                elapsed, out = _timed(held.act, 1)
                assert isinstance(out, ServerError) and out.code == "BACKPRESSURE", out
                assert "action queue" in out.message and elapsed < 10
                for _ in range(10):  # the other session is not slowed by the held lock
                    elapsed, out = _timed(other.step, 1)
                    assert not isinstance(out, Exception) and elapsed < 2.0, (elapsed, out)
                assert held.observe().tick >= 0  # reads take no lock
            finally:
                lock.release()
            assert held.act(2)["seq"] >= 0


def test_a_stopped_tick_worker_freezes_only_its_own_sessions(no_shm_leak) -> None:
    """SIGSTOP one tick worker: the sessions on the other worker keep answering promptly; the
    stopped one's requests answer too (an observation or a clear error), never hang; a new session
    goes to the worker that answers; /health says unhealthy, then healthy again after SIGCONT."""
    with ServerThread(envs=[WORLD], tick_procs=2, idle_timeout=60.0) as srv:
        with Client(srv.url, retry_deadline=0) as frozen, Client(srv.url, retry_deadline=0) as other:
            frozen.reset(seed=1)
            other.reset(seed=2)
            session = srv.manager.get(frozen.last.info["session_id"])
            pid = session.proc.process.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                worst = 0.0
                for _ in range(20):
                    elapsed, out = _timed(other.step, 1)
                    assert not isinstance(out, Exception), out
                    worst = max(worst, elapsed)
                    elapsed, out = _timed(frozen.act, 1)
                    assert elapsed < 5.0 and (isinstance(out, dict) or out.code == "BACKPRESSURE"), (elapsed, out)
                    elapsed, out = _timed(frozen.observe)
                    assert elapsed < 5.0 and (not isinstance(out, Exception) or out.code == "BACKPRESSURE")
                assert worst < 2.0, worst
                wait_for(lambda: http_get_any(srv.url, "/health")["tick_procs_silent"], what="/health to see it")
                with Client(srv.url, retry_deadline=0) as fresh:  # admitted on the worker that answers
                    assert fresh.reset(seed=3).tick == 0
                    assert srv.manager.get(fresh.last.info["session_id"]).proc.process.pid != pid
            finally:
                os.kill(pid, signal.SIGCONT)
            wait_for(lambda: srv.manager.health()["status"] == "healthy", what="/health to recover")
            assert frozen.step(1).tick > 0


# ----------------------------------------------------------------------------- a killed tick worker


def test_a_killed_tick_worker_is_replaced_and_its_replays_kept(tmp_path, no_shm_leak) -> None:
    """SIGKILL the tick worker under a session: a new worker takes its place, /health is 200 again,
    the affected client gets a clear SESSION_ENDED naming the cause, a new session works, and the
    dead session's replay is written from what the worker streamed: its ticks re-simulate exactly."""
    with ServerThread(envs=[WORLD], replay_dir=tmp_path, tick_procs=2, idle_timeout=60.0) as srv:
        with Client(srv.url, retry_deadline=0) as victim, Client(srv.url, retry_deadline=0) as bystander:
            victim.reset(seed=5)
            bystander.reset(seed=6)
            for i in range(30):
                victim.step(i % 3)
            sid = victim.last.info["session_id"]
            dead = srv.manager.get(sid).proc
            time.sleep(0.6)  # a few record notes reach the server
            ticks_before = victim.observe().tick
            os.kill(dead.process.pid, signal.SIGKILL)
            wait_for(lambda: dead not in srv.manager.procs.procs, what="a replacement worker")
            with pytest.raises(ServerError) as err:
                victim.step(1)
            assert err.value.code == "SESSION_ENDED" and "tick worker died (killed by signal 9)" in err.value.message
            assert dead.process.exitcode == -signal.SIGKILL  # reaped
            health = wait_for(
                lambda: (h := http_get_any(srv.url, "/health"))["status"] == "healthy" and h,
                60,
                "/health to be 200 again",
            )
            assert health["tick_procs_replaced"] == 1 and health["tick_procs_silent"] == []
            assert http_get(srv.url, "/health")["ticks_advancing"]  # raises unless 200
            info = wait_for(
                lambda: (
                    (s := next(x for x in http_get(srv.url, "/sessions") if x["session_id"] == sid))["lifecycle"]
                    == "closed"
                    and s
                ),
                what="the dead session to close",
            )
            assert info["summary"]["complete"] is False and info["summary"]["ticks"] >= ticks_before - 15
            replay = Replay.load(info["replay"])
            assert replay.header["complete"] is False and replay.ticks >= 30
            result = verify(replay)
            assert result.ok and result.checked == replay.ticks + len(replay.reset_steps)
            assert bystander.step(1).tick > 0  # the other worker's session never noticed
            victim.reset(seed=7)  # the same client starts again, on a live worker
            assert victim.step(1).tick >= 1
            assert srv.manager.get(victim.last.info["session_id"]).proc.process.is_alive()
            with Client(srv.url) as newcomer:
                assert newcomer.reset(seed=8).tick == 0
    assert all(p.process.exitcode is not None for p in srv.manager.procs.procs)


def test_doctests_of_the_new_parts() -> None:
    import doctest

    from nonstop.server import auth, client, tickprocs

    runner = doctest.DocTestRunner()
    for module, obj in (
        (auth, auth.resolve_token),
        (auth, auth.RedactToken),
        (client, client.Backoff),
        (tickprocs, tickprocs.SessionRecord),
    ):
        for test in doctest.DocTestFinder(recurse=False).find(obj, globs=dict(vars(module))):
            runner.run(test)
    assert runner.failures == 0 and runner.tries >= 6


def test_a_crash_loop_is_not_respawned_forever(no_shm_leak) -> None:
    """Past `MAX_REPLACEMENTS` replacements within a minute, a dead worker stays dead and /health
    stays unhealthy, instead of the server spawning workers in a loop."""
    from nonstop.server import tickprocs

    with ServerThread(envs=[WORLD], tick_procs=1) as srv:
        pool = srv.manager.procs
        pool._replaced_at = [tickprocs._CLOCK.now()] * tickprocs.MAX_REPLACEMENTS  # a crash loop so far
        dead = pool.procs[0]
        os.kill(dead.process.pid, signal.SIGKILL)
        wait_for(lambda: not dead.alive, what="the worker's death to be seen")
        time.sleep(1.0)
        assert pool.procs == [dead] and pool.replaced == 0
        assert http_get_any(srv.url, "/health")["status"] == "unhealthy"
        with Client(srv.url, retry_deadline=0) as client, pytest.raises(ServerError) as err:
            client.reset()
        assert "every tick worker has exited" in err.value.message


def test_channels_bounded_waits_for_a_stopped_peer(no_shm_leak) -> None:
    """The two waits a request loop could get stuck in, bounded: a queue lock held by a stopped
    taker, and an observation whose writer stopped mid-write."""
    import gymnasium as gym
    import numpy as np

    from nonstop.realtime import channels

    queue = channels.ActionQueue.create(gym.spaces.Discrete(3))
    slot = channels.LatestSlot.create(gym.spaces.Box(0, 1, (4,), np.float32))
    try:
        assert queue._lock.acquire(timeout=5)
        try:
            with pytest.raises(TimeoutError, match="action queue"):
                queue.submit(1, obs_tick=0, episode=0, lock_timeout=0)
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                queue.submit(1, obs_tick=0, episode=0, lock_timeout=0.05)
            assert 0.04 <= time.monotonic() - t0 < 5
            assert queue.pending() == 0 and queue.counters()["submitted"] == 0  # nothing half-enqueued
        finally:
            queue._lock.release()
        assert queue.submit(2, obs_tick=0, episode=0, lock_timeout=0) == 0
        slot.publish(np.ones(4, np.float32), tick=3, time=0.05)
        assert slot.read(timeout=0.01).tick == 3
        slot._hdr.fetch_add(channels._SEQ, 1)  # a writer stopped between its two sequence stores
        with pytest.raises(TimeoutError, match="mid-write"):
            slot.read(timeout=0.01)
        slot._hdr.fetch_add(channels._SEQ, 1)
        assert slot.read(timeout=0.01).tick == 3
    finally:
        queue.unlink()
        slot.unlink()
