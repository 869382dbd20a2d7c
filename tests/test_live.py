"""The live view of `nonstop serve`: read-only spectator sockets, the page's token rules, and the
page itself in a real headless browser (Debian's chromium driven by Playwright).

Wall-clock tests (a server is realtime by nature): they assert orderings, codes and states, and
bounds that only get safer when the machine is loaded (a loaded client acts less often).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import wait_for

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.server.app import ServerThread, free_port
from nonstop.server.client import Client, http_get
from nonstop.server.live import MAX_SPECTATORS, token_subprotocol

pytestmark = pytest.mark.wall
WORLD = "theory/inaction"  # 60 Hz, Discrete(3), acting earns 1 per tick, β's noop 0
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _session(url: str, sid: str, token: str | None = None) -> dict:
    return next(s for s in http_get(url, "/sessions", token=token) if s["session_id"] == sid)


def _send(ws, kind: str, data: dict | None = None) -> dict:
    ws.send(json.dumps({"type": kind, **({"data": data} if data is not None else {})}))
    return json.loads(ws.recv(timeout=30))


# ----------------------------------------------------------------------------- spectator sockets


def test_spectator_watches_but_cannot_play_or_end_the_session(no_shm_leak) -> None:
    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], tick_procs=0, idle_timeout=30.0) as srv, Client(srv.url) as owner:
        sid = owner.reset(seed=1).info["session_id"]
        with connect(f"{srv.url}/ws/watch/{sid}", subprotocols=["nonstop"]) as ws:
            assert ws.subprotocol == "nonstop"
            seen = _send(ws, "observe")
            assert seen["type"] == "observation" and seen["data"]["observation"]["session_id"] == sid
            for kind, data in (("reset", {}), ("step", {"action": 1}), ("act", {"action": 1})):
                reply = _send(ws, kind, data)
                assert reply["type"] == "error" and reply["data"]["code"] == "READ_ONLY", reply
            assert _send(ws, "state")["data"]["agent_ticks"] == 0  # nothing the spectator sent was applied

            assert _send(ws, "subscribe", {"every": 2})["type"] == "ack"
            owner.act(1)
            applied = owner.wait(3)
            assert applied.info["agent_ticks"] == 1  # the owner still plays
            pushes = []
            while not pushes or pushes[-1]["agent_ticks"] < 1 or len(pushes) < 4:
                msg = json.loads(ws.recv(timeout=30))
                assert msg["type"] == "push", msg
                pushes.append(msg["data"]["observation"])
            ticks = [p["tick"] for p in pushes]
            assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)  # newest wins, never backwards
            assert all(p["session_id"] == sid for p in pushes)
            ws.send(json.dumps({"type": "close"}))
        # the spectator left: the owner's session runs on and still takes actions
        owner.act(2)
        assert owner.wait(3).info["agent_ticks"] == 2
        assert _session(srv.url, sid)["lifecycle"] == "running"

        with connect(f"{srv.url}/ws/watch/no-such-session") as ws:
            assert json.loads(ws.recv(timeout=30))["data"]["code"] == "NO_SESSION"


def test_watching_is_not_activity_and_the_spectator_hears_the_end(no_shm_leak) -> None:
    """An owner who goes silent is reaped even while watched; the subscribed spectator is told and
    its socket closed."""
    from websockets.exceptions import ConnectionClosedOK
    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], tick_procs=0, idle_timeout=0.5) as srv, connect(srv.url + "/ws") as owner:
        owner.send(json.dumps({"type": "reset", "data": {"seed": 2}}))
        sid = json.loads(owner.recv(timeout=30))["data"]["observation"]["session_id"]
        with connect(f"{srv.url}/ws/watch/{sid}") as ws:
            assert _send(ws, "subscribe", {"every": 1})["type"] == "ack"
            pushes, end = 0, None
            while end is None:
                msg = json.loads(ws.recv(timeout=30))
                if msg["type"] == "push":
                    pushes += 1
                else:
                    end = msg
            assert pushes >= 1
            assert end["data"]["code"] == "SESSION_ENDED" and "idle timeout" in end["data"]["message"]
            with pytest.raises(ConnectionClosedOK):
                ws.recv(timeout=30)
        assert _session(srv.url, sid)["end_reason"].startswith("idle timeout")


@pytest.mark.slow
def test_a_spectator_that_never_subscribed_hears_the_end(no_shm_leak) -> None:
    from websockets.exceptions import ConnectionClosedOK
    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], tick_procs=0) as srv, connect(f"{srv.url}/ws") as owner:
        owner.send(json.dumps({"type": "reset"}))
        sid = json.loads(owner.recv(timeout=30))["data"]["observation"]["session_id"]
        with connect(f"{srv.url}/ws/watch/{sid}") as ws:
            assert _send(ws, "observe")["type"] == "observation"
            owner.send(json.dumps({"type": "close"}))
            end = json.loads(ws.recv(timeout=30))  # within SPECTATOR_CHECK_S, unasked
            assert end["data"]["code"] == "SESSION_ENDED" and "closed by client" in end["data"]["message"]
            with pytest.raises(ConnectionClosedOK):
                ws.recv(timeout=30)
        wait_for(lambda: http_get(srv.url, "/health")["connections"] == 0, what="both sockets counted out")


def test_spectator_sockets_count_toward_max_connections(no_shm_leak) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], tick_procs=0, max_connections=2) as srv, Client(srv.url) as owner:
        sid = owner.reset().info["session_id"]
        with connect(f"{srv.url}/ws/watch/{sid}") as ws:
            assert _send(ws, "observe")["type"] == "observation"
            with pytest.raises(InvalidStatus) as refused:  # the owner and this spectator fill the server
                connect(f"{srv.url}/ws/watch/{sid}")
            assert refused.value.response.status_code == 503
        wait_for(lambda: http_get(srv.url, "/health")["connections"] == 1, what="the spectator counted out")
        with connect(f"{srv.url}/ws/watch/{sid}") as again:
            assert _send(again, "observe")["type"] == "observation"


def test_spectators_per_session_are_bounded(no_shm_leak) -> None:
    from contextlib import ExitStack

    from websockets.sync.client import connect

    with ServerThread(envs=[WORLD], tick_procs=0) as srv, Client(srv.url) as owner, ExitStack() as stack:
        sid = owner.reset().info["session_id"]
        watchers = [stack.enter_context(connect(f"{srv.url}/ws/watch/{sid}")) for _ in range(MAX_SPECTATORS)]
        for ws in watchers:
            assert _send(ws, "observe")["type"] == "observation"
        with connect(f"{srv.url}/ws/watch/{sid}") as extra:
            assert json.loads(extra.recv(timeout=30))["data"]["code"] == "BACKPRESSURE"
        watchers[0].close()
        wait_for(
            lambda: http_get(srv.url, "/live/sessions")["spectators"].get(sid) == MAX_SPECTATORS - 1,
            what="the spectator to be counted out",
        )
        with connect(f"{srv.url}/ws/watch/{sid}") as again:
            assert _send(again, "observe")["type"] == "observation"


def test_live_page_is_public_its_data_needs_the_token(no_shm_leak) -> None:
    import httpx
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    token = "s3cret-token"
    with ServerThread(envs=[WORLD], token=token, tick_procs=0) as srv:
        http = srv.url.replace("ws://", "http://")
        page = httpx.get(http + "/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert '<script src="/live/static/live.js"' in page.text and "http" not in page.text.split("<body>")[1]
        for name in ("live.js", "live.css"):
            assert httpx.get(f"{http}/live/static/{name}").status_code == 200
        assert httpx.get(f"{http}/live/static/../sessions").status_code != 200  # no way round the token
        assert httpx.get(http + "/live/sessions").status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        with Client(srv.url, token=token) as owner:
            sid = owner.reset().info["session_id"]
            owner.act(1)
            owner.wait(2)
            listing = httpx.get(http + "/live/sessions", headers=auth).json()
            row = next(r for r in listing["sessions"] if r["session_id"] == sid)
            assert row["env"] == WORLD and row["lifecycle"] == "running" and row["tick"] >= 2
            (seat,) = row["seats"]
            assert seat["seat"] == "agent" and seat["agent_ticks"] == 1
            assert seat["inaction_ticks"] >= 1 and 0 < seat["inaction_fraction"] < 1

            with pytest.raises(InvalidStatus):
                connect(f"{srv.url}/ws/watch/{sid}")
            with pytest.raises(InvalidStatus):
                connect(f"{srv.url}/ws/watch/{sid}", subprotocols=["nonstop", token_subprotocol("wrong-token")])
            with connect(f"{srv.url}/ws/watch/{sid}", subprotocols=["nonstop", token_subprotocol(token)]) as ws:
                assert ws.subprotocol == "nonstop"
                assert _send(ws, "observe")["data"]["observation"]["agent_ticks"] == 1
            with connect(f"{srv.url}/ws/watch/{sid}", additional_headers=auth) as ws:
                assert _send(ws, "state")["data"]["session_id"] == sid


# ----------------------------------------------------------------------------- the page in a real browser


def _browser_or_reason() -> None:
    """Skip (locally) or fail (in CI, ``CI=true``) when there is no browser to drive."""
    reason = None
    if not CHROMIUM.exists():
        reason = f"Debian's chromium is not at {CHROMIUM} (apt-get install -y chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed (pip install -e '.[test]')"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must test the live page in a browser: {reason}")
        pytest.skip(reason)


def test_live_page_in_a_headless_browser(tmp_path) -> None:
    """`nonstop serve` with a token; a slow client plays Boxing; the page, given the token in its
    URL fragment, lists the session, draws frames that change, a strip that grows and shows the
    slow agent's inaction; the token never reaches the server's log."""
    _browser_or_reason()
    from playwright.sync_api import sync_playwright

    token = "live-view-token-" + "".join(random.choices("abcdefghijklmnop", k=12))
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    server_log = tmp_path / "server.log"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"), NONSTOP_TOKEN=token)
    with server_log.open("w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nonstop.cli",
                "serve",
                "--env",
                "Boxing",
                "--port",
                str(port),
                "--tick-procs",
                "0",
                "--warm-envs",
                "0",
                "--log-level",
                "info",
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    stop = threading.Event()
    player = None
    try:

        def up() -> bool:
            try:
                return http_get(url, "/health", token=token, timeout=1)["status"] == "healthy"
            except Exception:  # not listening yet
                return False

        wait_for(up, timeout=90, what="the server to come up")
        started = threading.Event()
        sid_box: list[str] = []
        failures: list[BaseException] = []

        def play() -> None:  # a slow agent: one action, then 8 ticks of thinking
            try:
                with Client(url, token=token) as client:
                    sid_box.append(client.reset(seed=3).info["session_id"])
                    started.set()
                    rng = random.Random(0)
                    while not stop.is_set():
                        client.act(rng.randrange(18))
                        client.wait(8)
            except BaseException as exc:  # reported by the test
                failures.append(exc)
                started.set()

        player = threading.Thread(target=play, name="slow-agent", daemon=True)
        player.start()
        assert started.wait(60) and sid_box, f"the client did not start a session: {failures}"
        sid = sid_box[0]

        errors: list[str] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(f"http://127.0.0.1:{port}/#token={token}")
                page.locator(f'#sessions tr[data-session="{sid}"]').wait_for(timeout=60_000)
                assert token not in page.url  # the page took it out of the address bar
                view = f'article.view[data-session="{sid}"]'
                state_js = """sel => { const v = document.querySelector(sel); if (!v) return null;
                    return {tick: Number(v.dataset.tick || -1),
                            hash: v.querySelector('canvas.frame').dataset.hash || '',
                            columns: Number(v.querySelector('canvas.strip').dataset.columns || 0),
                            inaction: v.querySelector('.inaction').textContent}; }"""
                page.wait_for_function(f"() => ({state_js})('{view}')?.columns >= 3", timeout=60_000)
                first = page.evaluate(state_js, view)
                page.wait_for_function(
                    f"""first => {{ const s = ({state_js})('{view}');
                        return s.tick >= first.tick + 60 && s.columns > first.columns + 5
                            && s.hash !== first.hash; }}""",
                    arg=first,
                    timeout=60_000,
                )
                later = page.evaluate(state_js, view)
                assert later["tick"] > first["tick"] and later["columns"] > first["columns"]
                assert later["hash"] != first["hash"]  # the frames drawn changed
                # one action per 8 ticks: the strip counts most ticks as β's (load only slows the agent)
                assert later["inaction"].endswith("%") and int(later["inaction"][:-1]) >= 50, later
                row = page.locator(f'#sessions tr[data-session="{sid}"] td')
                assert row.nth(1).inner_text() == "Boxing" and row.nth(2).inner_text() == "agent"
                assert row.nth(3).inner_text() == "running"
                shot = tmp_path / "live.png"
                page.screenshot(path=str(shot), full_page=True)
                print(f"live page screenshot: {shot}")
                assert shot.stat().st_size > 10_000
            finally:
                browser.close()
        assert not errors, f"the page raised: {errors}"
        assert not failures, f"the client failed: {failures}"
    finally:
        stop.set()
        if player is not None:
            player.join(timeout=30)
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = server_log.read_text()
    assert '"GET / HTTP/1.1" 200' in text and "/ws/watch/" in text  # the log was written; the page was served
    assert token not in text, "the token reached the server's log"
