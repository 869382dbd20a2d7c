"""The MCP tools, driven in-process by the official SDK's client: a session starts, the world
ticks between tool calls, actions are applied with their delay measured, frames come as PNG."""

from __future__ import annotations

import asyncio
import base64

import pytest

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

from nonstop.server.mcp import build_mcp_server  # noqa: E402
from nonstop.server.sessions import SessionManager  # noqa: E402

pytestmark = pytest.mark.wall


def test_mcp_tools_drive_a_realtime_session(tmp_path, no_shm_leak) -> None:
    manager = SessionManager(["theory/inaction", "Boxing"], replay_dir=tmp_path)
    server = build_mcp_server(manager)

    async def play() -> None:
        async with Client(server) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"start_session", "join_session", "observe", "act", "wait", "stats", "stop_session"}
            started = (await client.call_tool("start_session", {"seed": 0})).structured_content
            sid = started["session_id"]
            assert started["env"] == "theory/inaction" and started["action_space"]["n"] == 3
            ack = (await client.call_tool("act", {"session_id": sid, "action": 1})).structured_content
            waited = await client.call_tool("wait", {"session_id": sid, "ticks": 5})
            seen = waited.structured_content
            assert seen["tick"] >= ack["tick"] + 5 and seen["agent_ticks"] == 1
            assert "inaction" in waited.content[0].text
            bad = await client.call_tool("act", {"session_id": sid, "action": 9})
            assert bad.is_error and "ACTION_OUT_OF_RANGE" in bad.content[0].text
            stats = (await client.call_tool("stats", {"session_id": sid})).structured_content
            assert stats["lifecycle"] == "running" and stats["inaction_ticks"] >= 4

            boxing = (await client.call_tool("start_session", {"env": "Boxing", "seed": 1})).structured_content
            assert "FIRE" in boxing["action_meanings"]
            frame = await client.call_tool("observe", {"session_id": boxing["session_id"], "image": True})
            png = base64.b64decode(frame.content[1].data)
            assert frame.content[1].mime_type == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n"

            for s in (sid, boxing["session_id"]):
                summary = (await client.call_tool("stop_session", {"session_id": s})).structured_content
                assert summary["lifecycle"] == "closed" and summary["replay"]
            missing = await client.call_tool("observe", {"session_id": sid})
            assert missing.is_error

    try:
        asyncio.run(play())
    finally:
        manager.shutdown()


def test_nonstop_mcp_over_stdio() -> None:
    """`nonstop mcp` as an MCP client launches it: a subprocess speaking JSON-RPC on stdio."""
    import os
    import sys
    from pathlib import Path

    from mcp import StdioServerParameters

    src = str(Path(__file__).resolve().parents[1] / "src")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nonstop.cli", "mcp", "--env", "theory/inaction"],
        env={**os.environ, "PYTHONPATH": src},
    )

    async def play() -> None:
        async with Client(params) as client:
            sid = (await client.call_tool("start_session", {"seed": 3})).structured_content["session_id"]
            await client.call_tool("act", {"session_id": sid, "action": 2})
            seen = (await client.call_tool("wait", {"session_id": sid, "ticks": 3})).structured_content
            assert seen["agent_ticks"] == 1 and seen["tick"] >= 3
            stopped = (await client.call_tool("stop_session", {"session_id": sid})).structured_content
            assert stopped["lifecycle"] == "closed"

    asyncio.run(play())


def test_mcp_tools_declare_bounds_and_answer_bad_arguments_with_reasons(no_shm_leak) -> None:
    """Each tool's JSON Schema carries its bounds, and every bad argument (seed -1, wait 0 / -3 /
    10**7 ticks, an unknown session, an action outside the space) is an error that says why."""
    manager = SessionManager(["theory/inaction"])
    server = build_mcp_server(manager)

    async def play() -> None:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            ticks = tools["wait"].input_schema["properties"]["ticks"]
            assert (ticks["minimum"], ticks["maximum"]) == (1, 36_000)
            seed = next(s for s in tools["start_session"].input_schema["properties"]["seed"]["anyOf"] if "minimum" in s)
            assert (seed["minimum"], seed["maximum"]) == (0, 2**31 - 1)
            assert tools["act"].input_schema["properties"]["session_id"]["minLength"] == 1

            async def refused(name: str, args: dict, *reasons: str) -> None:
                answer = await client.call_tool(name, args)
                text = answer.content[0].text
                assert answer.is_error, f"{name}({args}) was accepted"
                assert all(r in text for r in reasons), f"{name}({args}): {text!r} does not say {reasons}"

            await refused("start_session", {"seed": -1}, "seed", "greater than or equal to 0")
            await refused("start_session", {"env": "Pong-nope"}, "VALIDATION_ERROR", "not served here")
            sid = (await client.call_tool("start_session", {"seed": 0})).structured_content["session_id"]
            await refused("wait", {"session_id": sid, "ticks": 0}, "ticks", "greater than or equal to 1")
            await refused("wait", {"session_id": sid, "ticks": -3}, "ticks", "greater than or equal to 1")
            await refused("wait", {"session_id": sid, "ticks": 10**7}, "ticks", "less than or equal to 36000")
            await refused("observe", {"session_id": "nope"}, "NO_SESSION", "'nope'", sid)
            await refused("stop_session", {"session_id": "nope"}, "NO_SESSION", "'nope'")
            await refused("act", {"session_id": sid, "action": 9}, "ACTION_OUT_OF_RANGE", "Discrete(3)")
            await refused("act", {"session_id": sid, "action": "left"}, "action", "valid integer")
            ok = await client.call_tool("wait", {"session_id": sid, "ticks": 2})
            assert not ok.is_error and ok.structured_content["tick"] >= 2  # the session survived every refusal

    try:
        asyncio.run(play())
    finally:
        manager.shutdown()
