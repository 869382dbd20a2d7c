"""The WebSocket edge keeps reading while it handles a message: a client that hangs up in the middle
of a long wait leaves at once (its wait and its seat with it), and one remote address cannot take
every socket. Real server on 127.0.0.1 (the hang-up), Starlette's test client (a remote address)."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.server.app import ServerThread, create_app
from nonstop.server.client import http_get

ONE_SEAT = "theory/inaction"  # 60 Hz, Discrete(3)


@pytest.mark.wall
def test_a_client_that_hangs_up_mid_wait_leaves_its_wait_and_seat_at_once(no_shm_leak) -> None:
    import websockets

    with ServerThread(envs=[ONE_SEAT], idle_timeout=60.0) as srv:

        async def hang_up_mid_wait() -> str:
            async with websockets.connect(srv.url + "/ws") as ws:
                await ws.send(json.dumps({"type": "reset", "data": {"env": ONE_SEAT, "seed": 0}}))
                sid = json.loads(await ws.recv())["data"]["observation"]["session_id"]
                await ws.send(json.dumps({"type": "wait", "data": {"ticks": 36_000}}))  # ten minutes
                session = srv.manager.sessions[sid]
                for _ in range(300):  # bounded: the wait reaches the session
                    if session._waiters:
                        break
                    await asyncio.sleep(0.01)
                assert len(session._waiters) == 1
            return sid  # the socket closed here, the wait still pending

        sid = asyncio.run(hang_up_mid_wait())
        session = srv.manager.sessions.get(sid)
        assert wait_for(lambda: session is None or not session._waiters, timeout=5.0)
        seats = next(s for s in http_get(srv.url, "/sessions") if s["session_id"] == sid)["seats"] if session else []
        assert not any(seat["held"] for seat in seats)


def test_one_remote_address_cannot_take_every_socket(no_shm_leak) -> None:
    from starlette.testclient import TestClient
    from starlette.testclient import WebSocketDenialResponse

    app = create_app(envs=[ONE_SEAT], max_connections=16, allow_hosts=["testserver"])  # 2 a remote address
    with TestClient(app) as client:  # its sockets come from "testclient", not a loopback address
        with client.websocket_connect("/ws"), client.websocket_connect("/ws"):
            with pytest.raises(WebSocketDenialResponse) as refused:
                with client.websocket_connect("/ws"):
                    pass
            assert refused.value.status_code == 503
            assert "too many open connections from testclient (2)" in refused.value.json()["data"]["message"]
        with client.websocket_connect("/ws"):  # closed ones free their place
            pass
