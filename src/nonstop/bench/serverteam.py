"""``nonstop bench server --team``: one client plays a whole team of a ~1,000-agent world over the server.

What runs: ``nonstop serve`` in its own process (its world ticking on ``--tick-procs`` workers, as
``bench server``) serving ``--env`` (default ``multi/battle-1000``: MAgent2's battle on a 115×115
map, 529 red against 529 blue, 20 Hz). One WebSocket client in this process sends ``reset`` with
``team=red`` (its round trip is the *reset latency*) and then, for ``--seconds``, one ``step`` a
tick: every red seat's action in one message (``{"actions": {seat: action}}``), answered by one
``team_observation`` of the tick that applied them. The blue team is left to its β.

Measured, per message: its size each way (the bytes of the JSON text on the socket), the round trip
(send to reply, which includes waiting for the tick that applies the actions), and the reply's
*lag past its tick* (arrival minus the tick's deadline ``tick0 + t·τ_M``, both on this machine's
CLOCK_MONOTONIC: the server's ``/sessions`` gives ``tick0_monotonic_s``); how many of the ticks the
world advanced got a message (``messages_per_tick``); the team's inaction; the host's lateness
(the session's last 600 ticks, read while the client plays, and the whole session's from its
summary). Last, the size of one ``state`` reply for the team (its own rows) beside the whole
world's (``{"seats": "all"}``).

``--encoding none`` (the default here) sends each seat's counters without its 13×13×5 window;
``b64`` adds the windows (~4.5 KB a seat as base64).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import numpy as np

from nonstop.bench.common import machine_info, percentiles
from nonstop.bench.serverproc import closed_sessions, cpu_s, launch, rss_mb, server_health
from nonstop.envs.seats import team_of
from nonstop.realtime.lifeline import reap

__all__ = ["run_team", "TEAM_RESULT_KEYS", "render_team", "TEAM_ENV", "TEAM_SEATS"]

TEAM_ENV = "multi/battle-1000"
#: the least team size ``--team`` asks for unless ``--seats`` says
TEAM_SEATS = 500
#: a reply may land this long after its tick (a tick at 20 Hz lasts 50 ms)
TARGET_REPLY_LAG_P99_MS = 25.0
TARGET_LATENESS_P99_MS = 2.0

TEAM_RESULT_KEYS = (
    "team_seats",
    "world_seats",
    "messages",
    "messages_per_tick",
    "request_bytes_p50",
    "reply_bytes_p50",
    "round_trip_ms_p50",
    "round_trip_ms_p99",
    "reply_lag_ms_p50",
    "reply_lag_ms_p99",
    "host_lateness_p99_ms",
    "team_inaction_fraction",
    "state_reply_bytes_team",
    "state_reply_bytes_all",
    "meets_target",
)


def _plan(url: str, args: argparse.Namespace) -> tuple[str, list[str], int]:
    """The team to hold (the world's first), its seats and its actions' count, checked against ``--seats``."""
    from nonstop.server.client import http_get

    desc = http_get(url, "/metadata")["envs"][args.env]
    seats = desc.get("seats")
    if not seats:
        raise ValueError(f"--team: {args.env} has one seat; pass a many-seat world (e.g. {TEAM_ENV})")
    team = team_of(next(iter(seats)))
    held = [name for name in seats if team_of(name) == team]
    if len(held) < args.seats:
        raise ValueError(f"--team --seats {args.seats}: {args.env}'s team {team} has {len(held)} seats")
    return team, held, int(seats[held[0]]["action"].get("n", 2))


class _Wire:
    """One WebSocket, each message's bytes and arrival time kept."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def ask(self, message: dict[str, Any]) -> tuple[dict[str, Any], int, int, float, float]:
        """``message``'s reply, its bytes sent and received, and when it was sent and answered."""
        text = json.dumps(message)
        sent = time.perf_counter()
        await self.ws.send(text)
        raw = await self.ws.recv()
        arrived = time.perf_counter()
        reply = json.loads(raw)
        if reply.get("type") == "error":
            raise RuntimeError(f"the server refused {message['type']}: {reply['data']}")
        return reply, len(text.encode()), len(raw if isinstance(raw, bytes) else raw.encode()), sent, arrived


async def _play_team(url: str, args: argparse.Namespace, team: str, n_actions: int) -> dict[str, Any]:
    """Reset holding ``team``, then one ``step`` a tick for ``args.seconds``; every message measured."""
    from websockets.asyncio.client import connect

    from nonstop.server.client import http_get

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"request_bytes": [], "reply_bytes": [], "round_trip_s": [], "lag_s": [], "ticks": []}
    async with connect(url + "/ws", max_size=1 << 26) as ws:
        wire = _Wire(ws)
        reset = {"type": "reset", "data": {"env": args.env, "team": team, "encoding": args.encoding}}
        reply, _, _, sent, arrived = await wire.ask(reset)
        out["reset_s"], out["sid"] = arrived - sent, reply["data"]["session_id"]
        seats, tick = list(reply["data"]["seats"]), reply["data"]["tick"]
        info = await asyncio.to_thread(http_get, url, f"/sessions/{out['sid']}")
        tick0, tau_m = info["tick0_monotonic_s"], 1.0 / http_get(url, "/metadata")["envs"][args.env]["tick_hz"]
        out["first_tick"], end_at = tick, time.perf_counter() + args.seconds
        while time.perf_counter() < end_at:
            actions = dict(zip(seats, rng.integers(n_actions, size=len(seats)).tolist()))
            step = {"type": "step", "data": {"actions": actions, "obs_tick": tick}}
            reply, up, down, sent, arrived = await wire.ask(step)
            tick = reply["data"]["tick"]
            out["request_bytes"].append(up)
            out["reply_bytes"].append(down)
            out["round_trip_s"].append(arrived - sent)
            out["lag_s"].append(arrived - (tick0 + tick * tau_m))
            out["ticks"].append(tick)
        out["last"] = reply["data"]["seats"]
        out["live"] = await asyncio.to_thread(http_get, url, f"/sessions/{out['sid']}")
        for which, query in (("team", {"type": "state"}), ("all", {"type": "state", "data": {"seats": "all"}})):
            _, _, out[f"state_bytes_{which}"], _, _ = await wire.ask(query)
        await ws.send(json.dumps({"type": "close"}))
    return out


def run_team(args: argparse.Namespace) -> dict[str, Any]:
    """``bench server --team``: see the module's docstring."""
    if args.env is None:
        args.env = TEAM_ENV
    if args.seats == 1:  # the bench's default (one seat a client) means: a team of the default size
        args.seats = TEAM_SEATS
    if args.quick:
        args.seconds = min(args.seconds, 3.0)
    if args.seats < 1 or not args.seconds > 0:
        raise ValueError("need --seats >= 1 and --seconds > 0")
    load_before = os.getloadavg()[0]
    settings = {
        "max_sessions": 1,
        "tick_threads": args.tick_threads,
        "tick_procs": args.tick_procs,
        "tick_sched": args.tick_sched,
        "warm_envs": 1,
        "switch_interval": args.switch_interval,
        "log_level": "warning",
    }
    server, url = launch(args.env, settings, warm=1)
    pid = server.pid
    assert pid is not None  # started
    try:
        team, seats, n_actions = _plan(url, args)
        cpu0, client_cpu0, wall0 = cpu_s(pid), time.process_time(), time.perf_counter()
        out = asyncio.run(_play_team(url, args, team, n_actions))
        wall = time.perf_counter() - wall0
        cpu = {"server": (cpu_s(pid) - cpu0) / wall, "client": (time.process_time() - client_cpu0) / wall}
        rss, peak = rss_mb(pid)
        health = server_health(url)
        (info,) = closed_sessions(url, {out["sid"]}) or [{}]
    finally:
        reap(server, timeout=0, kill_after=60)
    figures = {"team": team, "seats": len(seats), "cpu": cpu, "rss": (rss, peak), "health": health, "closed": info}
    return _team_result(args, out, figures, load_before)


def _team_result(
    args: argparse.Namespace, out: dict[str, Any], figures: dict[str, Any], load_before: float
) -> dict[str, Any]:
    ticks = np.asarray(out["ticks"])
    advanced = int(ticks[-1] - out["first_tick"]) if ticks.size else 0
    rtt, lag = percentiles(out["round_trip_s"], 1e3), percentiles(out["lag_s"], 1e3)
    up, down = percentiles(out["request_bytes"]), percentiles(out["reply_bytes"])
    last = out["last"]
    agent = sum(s["observation"]["agent_ticks"] for s in last.values())
    inaction = sum(s["observation"]["inaction_ticks"] for s in last.values())
    recent = out["live"].get("recent_lateness_ms", {})
    summary = figures["closed"].get("summary", {})
    world = len(out["live"].get("seats") or [])
    result = {
        "bench": "server",
        "mode": "team",
        "machine": machine_info(),
        "env": args.env,
        "team": figures["team"],
        "team_seats": figures["seats"],
        "world_seats": world,
        "encoding": args.encoding,
        "seconds": args.seconds,
        "tick_procs": args.tick_procs,
        "tick_sched": args.tick_sched,
        "messages": len(out["ticks"]),
        "ticks_advanced": advanced,
        "messages_per_tick": len(out["ticks"]) / advanced if advanced else 0.0,
        "request_bytes": up,
        "reply_bytes": down,
        "request_bytes_p50": up.get("p50", 0.0),
        "reply_bytes_p50": down.get("p50", 0.0),
        "round_trip_ms": rtt,
        "round_trip_ms_p50": rtt.get("p50", float("nan")),
        "round_trip_ms_p99": rtt.get("p99", float("nan")),
        "reply_lag_ms": lag,
        "reply_lag_ms_p50": lag.get("p50", float("nan")),
        "reply_lag_ms_p99": lag.get("p99", float("nan")),
        "host_lateness_ms": recent,
        "host_lateness_p99_ms": recent.get("p99", float("nan")),
        "whole_session_lateness_p99_ms": summary.get("lateness_p99_ms"),
        "team_inaction_fraction": inaction / max(1, agent + inaction),
        "state_reply_bytes_team": out["state_bytes_team"],
        "state_reply_bytes_all": out["state_bytes_all"],
        "reset_ms": out["reset_s"] * 1e3,
        "server_cpu_cores": figures["cpu"]["server"],
        "client_cpu_cores": figures["cpu"]["client"],
        "server_rss_mb": figures["rss"][0],
        "server_peak_rss_mb": figures["rss"][1],
        "health_after": figures["health"]["status"],
        "tick_sched_in_force": figures["health"].get("tick_sched", []),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
    }
    result["meets_target"] = bool(
        result["host_lateness_p99_ms"] <= TARGET_LATENESS_P99_MS
        and result["reply_lag_ms_p99"] <= TARGET_REPLY_LAG_P99_MS
        and result["messages_per_tick"] >= 0.95
    )
    return result


def render_team(result: dict[str, Any]) -> None:
    from rich.table import Table

    from nonstop._console import Console

    load = ", ".join(f"{x:.2f}" for x in result["loadavg_1min"])
    title = (
        f"nonstop bench server --team · {result['team']} ({result['team_seats']} of {result['world_seats']} seats) "
        f"· {result['env']} · load {load}"
    )
    table = Table(title=title)
    for column in ("figure", "measured", "target"):
        table.add_column(column)
    up, down, rtt, lag = (result[k] for k in ("request_bytes", "reply_bytes", "round_trip_ms", "reply_lag_ms"))
    rows = [
        ("messages a tick (each way)", f"{result['messages_per_tick']:.3f} ({result['messages']} messages)", "≥ 0.95"),
        ("request bytes p50 / max", f"{up.get('p50', 0):.0f} / {up.get('max', 0):.0f}", ""),
        ("reply bytes p50 / max", f"{down.get('p50', 0):.0f} / {down.get('max', 0):.0f}", ""),
        ("round trip (ms) p50 / p99", f"{rtt.get('p50', 0):.2f} / {rtt.get('p99', 0):.2f}", "≤ a tick"),
        ("reply lag past its tick (ms) p50 / p99", f"{lag.get('p50', 0):.2f} / {lag.get('p99', 0):.2f}", "≤ 25"),
        ("host lateness p99 (ms)", f"{result['host_lateness_p99_ms']:.3f}", f"≤ {TARGET_LATENESS_P99_MS}"),
        ("team inaction", f"{result['team_inaction_fraction']:.3f}", ""),
        (
            "state reply bytes: team / all seats",
            f"{result['state_reply_bytes_team']} / {result['state_reply_bytes_all']}",
            "",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
