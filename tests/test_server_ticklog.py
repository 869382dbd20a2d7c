"""A server session's memory stays bounded however long it runs (issue 14 part 1): its tick log
streams in chunks to ``REPLAYS/ticklogs/<sid>/`` while it runs, the tick worker keeps no rows it
has sent, and once the replay is written the directory is gone. Both session kinds: thread pool
(``tick_procs=0``) and tick workers (``tick_procs=2``). Wall-clock, with generous bounds: every
assertion is about files, counts and ticks, not speed."""

from __future__ import annotations

import time

import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.realtime.ticklog import TickLog
from nonstop.server import session as server_session
from nonstop.server.app import ServerThread
from nonstop.server.client import Client, http_get
from nonstop.server.replay import Replay, verify

pytestmark = pytest.mark.wall
WORLD = "theory/inaction"  # 60 Hz
CHUNK = 16  # rows per chunk here: a chunk every ~0.27 s


def _listed(url: str, sid: str) -> dict:
    return next(x for x in http_get(url, "/sessions") if x["session_id"] == sid)


@pytest.mark.parametrize("tick_procs", [0, 2])
def test_a_session_tick_log_streams_to_disk_and_is_removed_after_its_replay(
    tmp_path, monkeypatch, no_shm_leak, tick_procs
) -> None:
    monkeypatch.setattr(server_session, "SESSION_CHUNK_ROWS", CHUNK)
    with ServerThread(envs=[WORLD], replay_dir=tmp_path, tick_procs=tick_procs, idle_timeout=60.0) as srv:
        client = Client(srv.url, retry_deadline=0)
        client.reset(seed=3)
        for i in range(10):
            client.step(i % 3)
        sid = client.last.info["session_id"]
        directory = tmp_path / "ticklogs" / sid
        wait_for(lambda: len(list(directory.glob("chunk-*.npz"))) >= 4, what="4 chunks on disk")
        live = TickLog.open(directory)  # another process's view of a log still being written
        assert not live.complete and len(live) >= 3 * CHUNK and len(live) % CHUNK == 0
        assert live["tick"].tolist() == list(range(1, len(live) + 1))
        if tick_procs:  # the worker holds at most the open chunk: the server has the rest
            held = [_listed(srv.url, sid)["worker_held_rows"] for _ in range(5) if not time.sleep(0.25)]
            assert max(held) <= CHUNK, held
            assert client.observe().tick > 4 * CHUNK
        client.step(1)
        client.close()
        info = wait_for(
            lambda: (s := _listed(srv.url, sid))["lifecycle"] == "closed" and s, what="the session to close"
        )
        assert not directory.exists()
        replay = Replay.load(info["replay"])
        assert replay.ticks == info["summary"]["ticks"] > 4 * CHUNK
        result = verify(replay)
        assert result.ok and result.checked == replay.ticks + len(replay.reset_steps)


def test_release_keeps_the_count_and_drops_what_was_sent() -> None:
    log = TickLog(0.5, chunk_rows=4)
    for t in range(1, 11):
        log.append(tick=t, deadline=t / 2, time=t / 2, source=0)
    sent = log.rows(0)
    log.release(len(sent))
    assert len(log) == 10 and log.held_rows == 2  # the open chunk
    log.append(tick=11, deadline=5.5, time=5.5, source=0)
    assert log.rows(10)[:, 0].tolist() == [11.0]
    with pytest.raises(ValueError, match="released"):
        log.rows(0)
    back = TickLog(0.5, chunk_rows=3)
    back.append_rows(sent)
    back.append_rows(log.rows(10))
    assert back["tick"].tolist() == list(range(1, 12)) and back.tail("tick", 4).tolist() == [8, 9, 10, 11]
    with pytest.raises(ValueError, match="shape"):
        back.append_rows(sent[:, :3])
