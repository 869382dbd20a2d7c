"""OpenEnv's published clients and MCP clients against a nonstop server, unmodified.

* OpenEnv 0.10 (the ``openenv`` package): its ``GenericEnvClient`` (WebSocket) and its
  ``MCPToolClient`` (HTTP ``/mcp`` in OpenEnv's JSON-RPC dialect, plus the WebSocket). That
  package cannot live in one environment with nonstop's MCP server: it pins ``fastmcp<4``, which
  pins ``mcp<2`` (nonstop's tools use ``mcp`` 2's ``MCPServer``), and it installs the same
  top-level ``openenv`` package as ``openenv-core`` (the test extra's). So the test installs it
  once, without dependencies, into pytest's cache and runs the clients in a subprocess whose path
  puts it first: the clients are OpenEnv's code as published, only their own imports resolved to
  the installed httpx, websockets and pydantic.
* OpenEnv's HTTP routes (``POST /reset``, ``POST /step``, ``GET /state``) with its request shapes.
* The official MCP SDK's streamable-HTTP client on ``/mcp`` (what MCP Inspector and LLM hosts use).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from nonstop.server.app import ServerThread

pytestmark = pytest.mark.wall
WORLD = "theory/inaction"  # 60 Hz, Discrete(3), acting earns 1 per tick, β's noop 0
OPENENV_VERSION = "0.10.0"


@pytest.fixture(scope="module")
def server(tmp_path_factory, no_shm_leak_module):
    with ServerThread(envs=[WORLD, "CartPole"], idle_timeout=30.0) as srv:
        yield srv
    assert srv.manager.live_count() == 0


@pytest.fixture(scope="module")
def no_shm_leak_module():
    from conftest import our_segments

    before = our_segments()
    yield
    left = our_segments() - before
    assert not left, f"shared-memory segments left behind: {sorted(left)}"


#: what pip says when it cannot reach the registry (each retry's warning, then no version at all)
NO_REGISTRY = (
    "NewConnectionError",
    "ConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "timed out",
    "ProxyError",
    "(from versions: none)",
)


def install_openenv(target: Path, *pip_args: str, env: dict[str, str] | None = None) -> str | None:
    """Install ``openenv`` 0.10.0 as published into ``target``, without dependencies; None when it is
    there, else why the registry could not be reached (any other failure fails the test)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--retries",
        "1",
        "--timeout",
        "15",
        "--target",
        str(target),
        *pip_args,
        f"openenv=={OPENENV_VERSION}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if done.returncode == 0:
        return None
    clues = [line.strip() for line in done.stderr.splitlines() if any(sign in line for sign in NO_REGISTRY)]
    if clues:
        return f"network: the package registry is unreachable, so openenv {OPENENV_VERSION} cannot be installed ({clues[0][:200]})"
    raise AssertionError(f"could not install openenv {OPENENV_VERSION}: {done.stderr[-2000:]}")


def _installed(target: Path) -> bool:
    return (target / "openenv" / "core" / "mcp_client.py").exists()


@pytest.fixture(scope="session")
def openenv_010(request, tmp_path_factory) -> Path:
    """A directory holding ``openenv`` 0.10.0 as published (installed once per pytest cache, from the
    registry: the tests that use it are marked ``network``). Without a registry they skip, saying so;
    in CI (``CI=true``, as .ci/run sets), which has PyPI, they fail instead."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    name = f"openenv-{OPENENV_VERSION}"
    target = Path(cache.mkdir(name)) if cache is not None else tmp_path_factory.mktemp(name)
    if not _installed(target):
        # installed beside the cache's directory and moved in whole: another pytest process (an xdist worker)
        # may be installing it at the same time, and neither may see half of the other's
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=target.parent))
        unreachable = install_openenv(staging)
        if unreachable is not None:
            shutil.rmtree(staging, ignore_errors=True)
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI must run the OpenEnv compatibility tests: {unreachable}")
            pytest.skip(unreachable)
        try:
            staging.rename(target)  # over the cache's empty directory
        except OSError:  # not empty: another process's whole install (kept), or a killed pytest's half (replaced)
            if not _installed(target):
                shutil.rmtree(target)
                staging.rename(target)
        shutil.rmtree(staging, ignore_errors=True)
    return target


def test_no_registry_is_told_apart_from_a_broken_install(tmp_path):
    """The skip above is for a registry that cannot be reached, nothing else: a dead index (a closed
    port, no config files, no local wheels) reads as unreachable."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}
    reason = install_openenv(tmp_path, "--index-url", "http://127.0.0.1:9/simple", env=env)
    assert reason is not None and reason.startswith("network: the package registry is unreachable"), reason


OPENENV_CLIENTS = r"""
import asyncio, json, sys
from importlib.metadata import version
import openenv
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

url = sys.argv[1]
out = {"version": version("openenv"), "module": openenv.__file__}

with GenericEnvClient(base_url=url).sync() as env:
    first = env.reset(seed=7)
    steps = [env.step({"action": 1}) for _ in range(4)]
    state = env.state()
    try:
        env.step({"action": 7})
        bad = None
    except Exception as exc:
        bad = str(exc)
    out["generic"] = {"first_tick": first.observation["tick"], "first_done": first.done,
                      "ticks": [s.observation["tick"] for s in steps], "rewards": [s.reward for s in steps],
                      "step_count": state["step_count"], "agent_ticks": state["agent_ticks"], "bad": bad}

async def tools():
    async with MCPToolClient(base_url=url) as env:
        listed = await env.list_tools()
        schemas = {t.name: t.input_schema for t in listed}
        started = await env.call_tool("start_session", seed=3)
        sid = started["session_id"]
        ack = await env.call_tool("act", session_id=sid, action=1)
        seen = await env.call_tool("wait", session_id=sid, ticks=3)
        errors = {}
        for name, kwargs in [("wait", {"session_id": sid, "ticks": 0}), ("start_session", {"seed": -1}),
                             ("observe", {"session_id": "nope"}), ("act", {"session_id": sid, "action": 9})]:
            try:
                await env.call_tool(name, **kwargs)
                errors[name] = None
            except RuntimeError as exc:
                errors[name] = str(exc)
        reset = await env.reset(seed=1)  # over the WebSocket the client opened beside /mcp
        stats = await env.call_tool("stats", session_id=sid)
        return {"tools": sorted(schemas), "wait_schema": schemas["wait"]["properties"]["ticks"],
                "ack_tick": ack["tick"], "seen_tick": seen["tick"], "seen_agent_ticks": seen["agent_ticks"],
                "errors": errors, "reset_tick": reset.observation.tick, "stats_lifecycle": stats["lifecycle"],
                "sid": sid}

out["mcp"] = asyncio.run(tools())
print(json.dumps(out))
"""


@pytest.mark.network
@pytest.mark.slow
def test_openenv_010_generic_and_mcp_tool_clients_play_unmodified(server, openenv_010) -> None:
    url = server.url.replace("ws://", "http://")
    env = {**os.environ, "PYTHONPATH": str(openenv_010)}
    done = subprocess.run(
        [sys.executable, "-c", OPENENV_CLIENTS, url], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["version"] == OPENENV_VERSION and out["module"].startswith(str(openenv_010))

    generic = out["generic"]
    assert generic["first_tick"] == 0 and generic["first_done"] is False
    assert generic["ticks"] == sorted(generic["ticks"]) and len(set(generic["ticks"])) == 4
    assert all(r >= 1.0 for r in generic["rewards"])  # each action was applied on its tick and earned 1
    assert generic["step_count"] == 4 and generic["agent_ticks"] == 4
    assert "ACTION_OUT_OF_RANGE" in generic["bad"]

    mcp = out["mcp"]
    assert mcp["tools"] == ["act", "join_session", "observe", "start_session", "stats", "stop_session", "wait"]
    assert (mcp["wait_schema"]["minimum"], mcp["wait_schema"]["maximum"]) == (1, 36_000)
    assert mcp["seen_tick"] >= mcp["ack_tick"] + 3 and mcp["seen_agent_ticks"] == 1
    errors = mcp["errors"]
    assert "greater than or equal to 1" in errors["wait"]
    assert "seed" in errors["start_session"] and "greater than or equal to 0" in errors["start_session"]
    assert "NO_SESSION" in errors["observe"] and "ACTION_OUT_OF_RANGE" in errors["act"]
    assert mcp["reset_tick"] == 0 and mcp["stats_lifecycle"] == "running"
    # closing the client closed its MCP session, which stopped the world its tool call started
    session = next(s for s in server.manager.list_sessions() if s["session_id"] == mcp["sid"])
    assert session["lifecycle"] in ("ended", "closed")


def test_openenv_http_routes(server) -> None:
    with httpx.Client(base_url=server.url.replace("ws://", "http://"), timeout=30) as http:
        first = http.post("/reset", json={"seed": 7, "episode_id": "ep-1"})
        assert first.status_code == 200, first.text
        body = first.json()
        assert set(body) == {"observation", "reward", "done"} and body["done"] is False
        sid = body["observation"]["session_id"]
        assert body["observation"]["tick"] == 0 and body["observation"]["time"] == 0.0
        ticks = []
        for _ in range(3):
            step = http.post("/step", json={"action": {"action": 1}, "timeout_s": 5.0})
            assert step.status_code == 200, step.text
            assert step.json()["reward"] >= 1.0
            ticks.append(step.json()["observation"]["tick"])
        assert ticks == sorted(ticks) and len(set(ticks)) == 3
        state = http.get("/state").json()
        assert state["episode_id"] == "ep-1" and state["step_count"] == 3 and state["session_id"] == sid
        assert http.get("/state", params={"session_id": sid}).json()["agent_ticks"] == 3

        # a second HTTP client names its own session; the default stays the most recent one
        other = http.post("/reset", json={"env": "CartPole", "seed": 1}).json()["observation"]["session_id"]
        assert other != sid and http.get("/state").json()["session_id"] == other
        again = http.post("/step", json={"action": {"action": 2}, "session_id": sid})
        assert again.status_code == 200 and again.json()["observation"]["session_id"] == sid

        refusals = [
            (http.post("/step", json={"action": {"action": 7}, "session_id": sid}), 422, "ACTION_OUT_OF_RANGE"),
            (http.post("/step", json={"action": 1}), 422, "VALIDATION_ERROR"),
            (http.post("/reset", json={"seed": -1}), 422, "seed"),
            (http.post("/reset", content=b"{nope", headers={"content-type": "application/json"}), 422, "INVALID_JSON"),
            (http.post("/step", json={"action": {"action": 0}, "session_id": "nope"}), 404, "NO_SESSION"),
            (http.get("/state", params={"session_id": "nope"}), 404, "NO_SESSION"),
        ]
        for response, status, reason in refusals:
            assert response.status_code == status and reason in response.text, (response.status_code, response.text)


def test_official_mcp_client_over_streamable_http(server) -> None:
    from mcp import Client

    async def play() -> None:
        async with Client(server.url.replace("ws://", "http://") + "/mcp") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["wait"].input_schema["properties"]["ticks"]["maximum"] == 36_000
            sid = (await client.call_tool("start_session", {"seed": 2})).structured_content["session_id"]
            await client.call_tool("act", {"session_id": sid, "action": 1})
            seen = (await client.call_tool("wait", {"session_id": sid, "ticks": 2})).structured_content
            assert seen["agent_ticks"] == 1 and seen["tick"] >= 2
            bad = await client.call_tool("wait", {"session_id": sid, "ticks": -3})
            assert bad.is_error and "greater than or equal to 1" in bad.content[0].text
            stopped = (await client.call_tool("stop_session", {"session_id": sid})).structured_content
            assert stopped["lifecycle"] == "closed"

    asyncio.run(play())


def test_http_routes_and_mcp_need_the_token(no_shm_leak) -> None:
    token = "s3cret-token"
    with ServerThread(envs=[WORLD], token=token) as srv:
        base = srv.url.replace("ws://", "http://")
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.post("/reset", json={"seed": 1}).status_code == 401
            assert http.post("/step", json={"action": {"action": 1}}).status_code == 401
            assert http.get("/state").status_code == 401
            rpc = {"jsonrpc": "2.0", "method": "openenv/session/create", "params": {}, "id": 1}
            assert http.post("/mcp", json=rpc).status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            assert http.post("/reset", json={"seed": 1}, headers=auth).status_code == 200
            assert "session_id" in http.post("/mcp", json=rpc, headers=auth).json()["result"]
