"""The server's edge (issue 40): what a web page the user visits can make a server on 127.0.0.1 do.

Every probe goes to a real uvicorn server on 127.0.0.1 with the real clients (httpx, websockets,
the MCP SDK); a "foreign" Host or Origin is only a header: nothing leaves the loopback interface.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time

import pytest
from conftest import wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from nonstop.server.app import ServerThread, create_app, free_port
from nonstop.server.auth import RedactToken, resolve_token
from nonstop.server.guard import EdgePolicy, normal_origin, split_host

pytestmark = pytest.mark.wall
WORLD = "theory/inaction"  # 60 Hz, Discrete(3)
EVIL = "http://evil.example"
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


@pytest.fixture
def srv(tmp_path, no_shm_leak):
    with ServerThread(envs=[WORLD], tick_procs=0, idle_timeout=30.0, replay_dir=tmp_path / "replays") as server:
        yield server


def _http(server: ServerThread) -> str:
    return f"http://127.0.0.1:{server.port}"


def _refused_socket(url: str, **kwargs) -> tuple[int, dict]:
    """Open a WebSocket that must be refused: (HTTP status, JSON body) of the refusal."""
    with pytest.raises(InvalidStatus) as refused:
        connect(url, open_timeout=10, **kwargs)
    response = refused.value.response
    return response.status_code, json.loads(bytes(response.body))


def _start_session(server: ServerThread) -> str:
    with connect(server.url + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        return json.loads(ws.recv(timeout=30))["data"]["observation"]["session_id"]


# ----------------------------------------------------------------------------- finding 1: Origin


def test_a_foreign_origin_cannot_open_a_socket_or_watch_one(srv) -> None:
    status, body = _refused_socket(srv.url + "/ws", origin=EVIL)
    assert status == 403 and body["data"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert f"--allow-origin {EVIL}" in body["data"]["message"]
    assert srv.manager.list_sessions() == []  # no session was created

    with connect(srv.url + "/ws", origin=f"http://127.0.0.1:{srv.port}", open_timeout=10) as ws:  # its own page
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        sid = json.loads(ws.recv(timeout=30))["data"]["observation"]["session_id"]
        status, body = _refused_socket(f"{srv.url}/ws/watch/{sid}", origin=EVIL, subprotocols=["nonstop"])
        assert status == 403 and body["data"]["code"] == "ORIGIN_NOT_ALLOWED"
        # the page's own origin, under either loopback name, may watch
        for origin in (f"http://127.0.0.1:{srv.port}", f"http://localhost:{srv.port}"):
            with connect(f"{srv.url}/ws/watch/{sid}", origin=origin, subprotocols=["nonstop"], open_timeout=10) as w:
                w.send(json.dumps({"type": "state"}))
                assert json.loads(w.recv(timeout=30))["type"] == "state"
    # another local port is another site (a dev server, a notebook): refused
    status, _ = _refused_socket(srv.url + "/ws", origin=f"http://127.0.0.1:{free_port()}")
    assert status == 403
    status, _ = _refused_socket(srv.url + "/ws", origin="null")  # a sandboxed frame or a file:// page
    assert status == 403


def test_a_foreign_origin_gets_403_on_http(srv) -> None:
    http = _http(srv)
    reset = httpx.post(http + "/reset", json={"seed": 1}, headers={"Origin": EVIL}, timeout=30)
    assert reset.status_code == 403 and reset.json()["data"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert httpx.get(http + "/sessions", headers={"Origin": EVIL}, timeout=30).status_code == 403
    assert srv.manager.list_sessions() == []
    own = httpx.post(http + "/reset", json={"seed": 1}, headers={"Origin": http}, timeout=30)
    assert own.status_code == 200


def test_allow_origin_lets_one_more_page_in(no_shm_leak) -> None:
    with ServerThread(envs=[WORLD], tick_procs=0, allow_origins=["https://Game.Example:443"]) as srv:
        with connect(srv.url + "/ws", origin="https://game.example", open_timeout=10) as ws:
            ws.send(json.dumps({"type": "state"}))
            assert json.loads(ws.recv(timeout=30))["type"] == "error"  # NO_SESSION: in, and answered
        assert _refused_socket(srv.url + "/ws", origin=EVIL)[0] == 403


# ----------------------------------------------------------------------------- finding 1: Host


def test_a_foreign_host_is_refused_everywhere(srv) -> None:
    http = _http(srv)
    foreign = {"Host": "evil.example"}
    for path in ("/sessions", "/replays", "/metadata", "/live/sessions"):
        response = httpx.get(http + path, headers=foreign, timeout=30)
        assert response.status_code == 421, path
        assert response.json()["data"]["code"] == "HOST_NOT_ALLOWED"
        assert "--allow-host evil.example" in response.json()["data"]["message"]
    for host in ("127.0.0.1", f"127.0.0.1:{srv.port}", f"localhost:{srv.port}", f"[::1]:{srv.port}", "LOCALHOST."):
        assert httpx.get(http + "/sessions", headers={"Host": host}, timeout=30).status_code == 200, host
    # a socket addressed to a rebound name: the handshake carries that name as its Host
    sid = _start_session(srv)
    for path in ("/ws", f"/ws/watch/{sid}"):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            status, body = _refused_socket(f"ws://evil.example:{srv.port}{path}", sock=sock)
        assert status == 421 and body["data"]["code"] == "HOST_NOT_ALLOWED", path


def test_both_mcp_dialects_refuse_a_foreign_host_alike(srv) -> None:
    http = _http(srv) + "/mcp"
    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"session_id": "x", "name": "start_session", "arguments": {"seed": 0}},
    }
    for request in (create, call, INITIALIZE):
        response = httpx.post(http, json=request, headers={"Host": "evil.example", **MCP_ACCEPT}, timeout=30)
        assert response.status_code == 421, request["method"]
        assert response.json()["data"]["code"] == "HOST_NOT_ALLOWED"
        response = httpx.post(http, json=request, headers={"Origin": EVIL, **MCP_ACCEPT}, timeout=30)
        assert response.status_code == 403, request["method"]
    assert srv.manager.list_sessions() == []
    # from this machine both dialects answer
    assert "session_id" in httpx.post(http, json=create, timeout=30).json()["result"]
    assert httpx.post(http, json=INITIALIZE, headers=MCP_ACCEPT, timeout=30).status_code == 200


def test_allow_host_admits_a_proxy_name_on_both_mcp_dialects(no_shm_leak) -> None:
    with ServerThread(envs=[WORLD], tick_procs=0, allow_hosts=["game.example"]) as srv:
        http = _http(srv)
        named = {"Host": "game.example", **MCP_ACCEPT}
        assert httpx.get(http + "/sessions", headers=named, timeout=30).status_code == 200
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        assert httpx.post(http + "/mcp", json=create, headers=named, timeout=30).status_code == 200
        # the MCP SDK's own route too: one check for both dialects, which knows the flag
        assert httpx.post(http + "/mcp", json=INITIALIZE, headers=named, timeout=30).status_code == 200
        assert httpx.get(http + "/sessions", headers={"Host": "evil.example"}, timeout=30).status_code == 421


def test_replays_lists_names_not_where_the_server_keeps_them(srv, tmp_path) -> None:
    sid = _start_session(srv)
    wait_for(lambda: srv.manager.list_replays(), what=f"the replay of {sid}")
    listed = httpx.get(_http(srv) + "/replays", timeout=30)
    assert listed.status_code == 200 and listed.json()
    assert str(tmp_path) not in listed.text
    assert all("/" not in entry["name"] for entry in listed.json())
    assert {entry["name"] for entry in listed.json()} == {r["name"] for r in srv.manager.list_replays()}


# ----------------------------------------------------------------------------- finding 1: JSON only


@pytest.mark.parametrize(
    "headers, body",
    [
        ({"Content-Type": "text/plain"}, b'{"seed": 1}'),  # fetch(..., {mode: "no-cors"}) with a string
        ({"Content-Type": "text/plain;charset=UTF-8"}, b""),  # an empty text/plain form
        ({"Content-Type": "application/x-www-form-urlencoded"}, b"seed=1"),  # a cross-site form
        ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--"),
        ({}, b'{"seed": 1}'),  # a Blob body: no Content-Type at all
    ],
    ids=["text", "empty-text", "form", "multipart", "no-type"],
)
def test_a_body_that_is_not_json_gets_415(srv, headers, body) -> None:
    for path in ("/reset", "/step", "/mcp"):
        response = httpx.post(_http(srv) + path, content=body, headers=headers, timeout=30)
        assert response.status_code == 415, (path, response.text)
        assert response.json()["data"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
    assert srv.manager.list_sessions() == []


def test_json_bodies_and_empty_posts_still_play(srv) -> None:
    with httpx.Client(base_url=_http(srv), timeout=30) as http:  # one client: its session's key is its cookie
        assert http.post("/reset").status_code == 200  # curl -X POST: no body, no type
        assert http.get("/sessions", headers={"Content-Type": "text/plain"}).status_code == 200
        charset = {"Content-Type": "application/json; charset=utf-8"}
        response = http.post("/step", content=b'{"action": {"action": 1}}', headers=charset)
        assert response.status_code == 200


def test_the_mcp_sdk_client_still_plays(srv) -> None:
    import asyncio

    from mcp import Client

    async def play() -> None:
        async with Client(_http(srv) + "/mcp") as client:
            started = await client.call_tool("start_session", {"seed": 0})
            sid = started.structured_content["session_id"]
            await client.call_tool("stop_session", {"session_id": sid})

    asyncio.run(asyncio.wait_for(play(), 60))


# ----------------------------------------------------------------------------- finding 7: no silent open bind


def test_a_non_loopback_bind_without_a_token_is_refused() -> None:
    with pytest.raises(ValueError, match="--insecure-no-token"):
        create_app(host="0.0.0.0", envs=[WORLD])
    create_app(host="0.0.0.0", token="a-long-token", envs=[WORLD])  # nothing is bound: the app only
    create_app(host="0.0.0.0", insecure_no_token=True, envs=[WORLD])


def _nonstop(*args: str) -> list[str]:
    return [sys.executable, "-c", "from nonstop.cli import entry; entry()", "serve", *args]


def test_serve_on_every_interface_without_a_token_exits_with_one_line() -> None:
    # the port is held on loopback: a server that tried to bind would fail with "address in use"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            _nonstop("--host", "0.0.0.0", "--port", str(port), "--env", WORLD, "--tick-procs", "0"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "without a token" in lines[0] and "--token generate" in lines[0] and "--insecure-no-token" in lines[0]


def test_token_generate_prints_the_page_address_with_a_working_token() -> None:
    port = free_port()
    args = _nonstop("--token", "generate", "--port", str(port), "--env", WORLD, "--tick-procs", "0", "--warm-envs", "0")
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "#token=" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline() if proc.stderr is not None else ""
            if not line and proc.poll() is not None:
                break
        assert f"http://127.0.0.1:{port}/#token=" in line, line
        token = line.strip().rsplit("#token=", 1)[1]
        assert len(token) >= 40  # 32 random bytes
        http = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            try:
                return httpx.get(http + "/sessions", headers={"Authorization": f"Bearer {token}"}, timeout=5).is_success
            except httpx.TransportError:
                return False

        wait_for(answers, timeout=60, what="the server to answer with its generated token")
        assert httpx.get(http + "/sessions", timeout=10).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()


# ----------------------------------------------------------------------------- finding 11: the token in logs


@pytest.mark.parametrize("key", ["token", "tok%65n", "TOK%65N", "%74%6F%6B%65%6E", "to%6Ben"])
def test_every_spelling_of_the_token_key_is_redacted(key) -> None:
    text = RedactToken.redact(f'127.0.0.1:5 - "GET /ws?a=1&{key}=s3cret-token&b=2 HTTP/1.1" 101')
    assert "s3cret-token" not in text and "a=1" in text and "b=2" in text


def test_a_percent_encoded_token_key_authenticates_but_never_reaches_the_log(no_shm_leak) -> None:
    token = "s3cret-token-value"
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    loggers = [logging.getLogger(name) for name in ("uvicorn.access", "uvicorn.error")]
    with ServerThread(envs=[WORLD], tick_procs=0, token=token, log_level="info") as srv:
        for logger in loggers:
            logger.addHandler(handler)
        try:
            with connect(f"{srv.url}/ws?tok%65n={token}", open_timeout=10) as ws:  # the server reads it as token
                ws.send(json.dumps({"type": "state"}))
                ws.recv(timeout=30)
            assert httpx.get(f"http://127.0.0.1:{srv.port}/health?tok%65n={token}", timeout=30).status_code == 401
            wait_for(lambda: any("tok%65n" in line for line in seen), timeout=10, what="the access log lines")
        finally:
            for logger in loggers:
                logger.removeHandler(handler)
    assert not [line for line in seen if token in line], seen


def test_only_the_first_line_of_a_token_file_is_the_token(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text("first-line-token\n# rotated 2026-01-01 by ops\n")
    assert resolve_token(token_file=path) == "first-line-token"
    path.write_text("\nsecond-line-token\n")
    with pytest.raises(ValueError, match="first line"):
        resolve_token(token_file=path)


# ----------------------------------------------------------------------------- the policy, pure


NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z][a-z0-9-]{0,12}){0,3}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(name=NAMES, port=st.one_of(st.none(), st.integers(1, 65535)))
def test_no_name_but_localhost_and_the_allowed_ones_reaches_a_loopback_server(name: str, port: int | None) -> None:
    host = name if port is None else f"{name}:{port}"
    assert EdgePolicy.build("127.0.0.1").host_allowed(host) == (name == "localhost")
    assert EdgePolicy.build("127.0.0.1", allow_hosts=[name]).host_allowed(host)
    assert split_host(host) == (name, port)


def test_the_policy_reads_addresses_and_origins_as_browsers_send_them() -> None:
    loopback = EdgePolicy.build("127.0.0.1")
    assert loopback.host_allowed("127.0.0.2:80") and loopback.host_allowed("[::1]")
    assert not loopback.host_allowed("192.168.1.5:8000")  # a loopback server has no LAN address
    lan = EdgePolicy.build("0.0.0.0")
    assert lan.host_allowed("192.168.1.5:8000") and not lan.host_allowed("evil.example")
    assert EdgePolicy.build("game.example").host_allowed("GAME.example:8000")
    assert normal_origin("http://[::1]:80") == "http://[::1]"
    for bad in ("game.example", "ftp://game.example", "https://game.example/path", "https://game.example:x"):
        with pytest.raises(ValueError, match="--allow-origin"):
            normal_origin(bad)
    for bad in ("https://game.example", "game.example:8000", ""):
        with pytest.raises(ValueError, match="--allow-host"):
            EdgePolicy.build("127.0.0.1", allow_hosts=[bad])
    # same origin behind a TLS proxy that forwards the Host
    proxied = EdgePolicy.build("127.0.0.1", allow_hosts=["game.example"])
    assert proxied.origin_allowed("https://game.example", "game.example", 8000)
    assert not proxied.origin_allowed("https://evil.example", "game.example", 8000)
