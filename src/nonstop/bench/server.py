"""``nonstop bench server``: many realtime sessions in one server process, one client each.

Targets (issue 5): with 64 ALE sessions at 60 Hz and one client each, per-session tick lateness
p99 ≤ 2 ms, aggregate ticks/s ≥ 95 % of 64 × 60, server RSS ≤ 2 GB, reset latency p50 ≤ 50 ms.

What runs: ``nonstop serve`` in its own process (so the clients do not share its GIL), its worlds
ticking on ``--tick-procs`` worker processes (default 2, as ``nonstop serve``; ``0`` ticks them on
threads of the server process), and in this process one asyncio client per session. Each client
opens a WebSocket, sends ``reset`` (its round trip is the *reset latency*: a new session built, the
env reset, tick 0 observed), then plays for ``--seconds``: ``wait`` ``--every`` ticks (the
observation comes back in ``--encoding``: ``none`` sends only the tick's metadata, ``b64`` the
whole frame), then ``act`` a random action. Clients start staggered over ``--ramp`` seconds, like
agents arriving.

Measured: *lateness* from each session's own tick log (``time - deadline`` of every tick): per
session p99 over its most recent 600 ticks read while every client still plays (steady state,
the target), and over the whole session with every other session's start included
(``whole_session_*``); both as the median and the worst over sessions. Sessions start on warm
envs (``--warm-envs N``, built before the clients arrive): an ALE env build plus seeded reset
takes ~0.4 s here and holds the GIL, so building on demand would stall every session ticking in
that process; *aggregate ticks/s* from the ticks each session advanced over the common window
(between the first and the last observation every client made while all were playing); *RSS*
of the server's whole process tree (the server, its tick workers, its resource tracker: ``VmRSS``,
and the sum of each one's peak ``VmHWM``); the 1-minute load average before and after, since this
machine is shared; and the CPU the server's process tree and the clients used (in cores).

Measured on the 2-vCPU machine the project was built on (other jobs kept off; 1-minute load
average 0.6–1.7 during the runs), ``--seconds 20``, clients waiting 6 ticks between actions, Boxing.
Tick workers (``--tick-procs 2``, the default; their tick threads at SCHED_FIFO, ``--tick-sched
auto``):

=========  ==================  ============  ==========  ===========  ===========
sessions   lateness p99 (ms)   ticks/s       peak RSS    reset p50    server CPU
           median / worst      (of N × 60)   (MB, tree)  (ms)         (cores, tree)
=========  ==================  ============  ==========  ===========  ===========
8          0.20 / 0.22         100.0 %       230         16.2         0.21
32         0.11 / 0.18         100.0 %       276         19.7         0.66
64         0.08 / 0.17         100.0 %       330         24.8         1.16
=========  ==================  ============  ==========  ===========  ===========

The same on threads of the server process (``--tick-procs 0``, the design before tick workers):

=========  ==================  ============  ==========  ===========  ===========
8          0.37 / 0.72         100.0 %       97          15.8         0.19
32         2.1 / 2.9           100.0 %       144         20.2         0.56
64         15.4 / 18.0         100.2 %       210         20.8         1.02
=========  ==================  ============  ==========  ===========  ===========

Why: an ALE ``act`` holds the GIL (two threads stepping two envs run 0.95× as fast as one), so
one process ticking 64 sessions (3,840 ALE steps/s at ~110 µs each, plus publishing, the host's
bookkeeping and the request loop's JSON) saturates one core and ticks queue; more tick threads do
not help (``--tick-threads 4``: 15.4 / 25.7 ms). On workers the request loop no longer shares a GIL
with the ticks, and the tick thread preempts everything else when a deadline comes. That priority
matters as much as the second core: one worker at SCHED_FIFO meets the target (0.09 / 0.21 ms),
one at normal priority does not (16.9 / 17.8 ms); two at normal priority or nice −10 are at the
edge (1.4 / 2.0 ms). Where realtime priority is not permitted, ``/health`` and the result's
``tick_sched_in_force`` say so. The whole-session p99 (with starts) is larger, ~0.6 ms median and
up to ~10 ms worst: a session's first reset (~6 ms for Boxing) holds its worker's GIL while that
worker's other sessions are due.

Several seats (``--seats 2``, issue 11: 32 two-seat Boxing sessions at 60 Hz, one client per seat,
per-session lateness p99 ≤ 2 ms): the env defaults to ``multi/Boxing``; each session's first client
creates it (``reset``: the reset latency) and the others ``join`` its other seats (the *join
latency*), then every client plays its own seat as above (a random action of its seat's space
every ``--every`` ticks). Lateness is per session, as above; inaction per client (its seat's).

A whole team (``--team``, issue 43): one client holds a team of ``multi/battle-1000`` (529 seats),
one message a tick each way; `nonstop.bench.serverteam` says what it measures. The server's
process (started, measured, reaped) is `nonstop.bench.serverproc`, shared by both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import numpy as np

from nonstop.bench.common import machine_info, percentiles, verdict
from nonstop.bench.serverproc import closed_sessions, cpu_s, launch, rss_mb, server_health
from nonstop.realtime.lifeline import reap

__all__ = ["DESCRIPTION", "RESULT_KEYS", "add_arguments", "run", "render"]

DESCRIPTION = (
    "N sessions at 60 Hz on one server (worlds on its tick workers), one client each: lateness p99, ticks/s, RSS, "
    "reset latency"
)

TARGET_LATENESS_P99_MS = 2.0
TARGET_TICKS_FRACTION = 0.95
TARGET_RSS_MB = 2048.0
TARGET_RESET_P50_MS = 50.0

RESULT_KEYS = (
    "sessions",
    "seats",
    "lateness_p99_ms_median",
    "lateness_p99_ms_worst",
    "ticks_per_s",
    "ticks_per_s_target",
    "ticks_fraction",
    "server_rss_mb",
    "server_peak_rss_mb",
    "reset_p50_ms",
    "meets_target",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=64, help="sessions (one client each); default 64")
    parser.add_argument("--env", default=None, help="env id (default Boxing, 60 Hz ALE; with --seats 2+, multi/Boxing)")
    parser.add_argument(
        "--seats", type=int, default=1, help="clients per session, one per seat (a several-seat env's seats); default 1"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="how long every client plays")
    parser.add_argument("--every", type=int, default=6, help="each client waits this many ticks between actions")
    parser.add_argument("--encoding", choices=("none", "b64"), default="none", help="what observations carry")
    parser.add_argument("--ramp", type=float, default=2.0, help="clients arrive spread over this many seconds")
    parser.add_argument("--tick-threads", type=int, default=2, help="server tick pool threads (with --tick-procs 0)")
    parser.add_argument("--tick-procs", type=int, default=2, help="server tick worker processes (0: tick on threads)")
    parser.add_argument(
        "--tick-sched",
        choices=("auto", "fifo", "nice", "normal"),
        default="auto",
        help="scheduling of the tick workers' tick threads (as `nonstop serve --tick-sched`)",
    )
    parser.add_argument("--switch-interval", type=float, default=0.0005, help="server's GIL switch interval (s)")
    parser.add_argument(
        "--team",
        action="store_true",
        help="one client holds a whole team of a many-seat world (default multi/battle-1000, 529 seats a team; "
        "--seats: the least team size, default 500) and sends one message a tick, receiving one: their bytes and "
        "latency, the host's lateness (nonstop.bench.serverteam)",
    )


async def _client(
    url: str,
    delay: float,
    args: argparse.Namespace,
    start_gate: asyncio.Event,
    close_gate: asyncio.Event,
    out: dict,
    seat: int,
    session: asyncio.Future,
) -> None:
    """One client: seat 0 creates its session (``reset``) and hands its id to the others through
    ``session``; seat k > 0 joins that session's k-th seat. Then each plays its own seat."""
    from nonstop.server.client import AsyncClient

    await asyncio.sleep(delay)
    rng = np.random.default_rng(int(delay * 1e6) * 16 + seat)
    async with AsyncClient(url, timeout=120.0) as client:
        t0 = time.perf_counter()
        if seat == 0:
            try:
                first = await client.reset(env=args.env, encoding=args.encoding)  # no seed: a warm env (seed recorded)
            except BaseException as exc:
                session.set_exception(exc)
                raise
            out["reset_s"] = time.perf_counter() - t0
            session.set_result(first.info["session_id"])
        else:
            sid = await session
            t0 = time.perf_counter()
            first = await client.join(sid, args.seat_names[seat], encoding=args.encoding)
            out["join_s"] = time.perf_counter() - t0
        out["sid"] = first.info["session_id"]
        n_actions = 0
        await start_gate.wait()  # every session exists: the common window starts now
        start = await client.observe(encoding="none")
        out["window_start"] = (time.perf_counter(), start.tick)
        end_at = time.perf_counter() + args.seconds
        while time.perf_counter() < end_at:
            seen = await client.wait(args.every, encoding=args.encoding)
            await client.act(int(rng.integers(args.n_actions[seat])), obs_tick=seen.tick)
            n_actions += 1
        end = await client.observe(encoding="none")
        out["window_end"] = (time.perf_counter(), end.tick)
        out["actions"] = n_actions
        out["inaction_ticks"] = end.info["inaction_ticks"]
        out["agent_ticks"] = end.info["agent_ticks"]
        await close_gate.wait()  # stay connected until the server's live figures are read


async def _play(url: str, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    from nonstop.server.client import http_get

    clients = args.sessions * args.seats
    outs: list[dict] = [dict() for _ in range(clients)]
    gate, close_gate = asyncio.Event(), asyncio.Event()
    live: list[dict] = []
    loop = asyncio.get_running_loop()
    sids = [loop.create_future() for _ in range(args.sessions)]
    tasks = [
        asyncio.create_task(
            _client(
                url,
                args.ramp * (i // args.seats) / max(1, args.sessions),
                args,
                gate,
                close_gate,
                outs[i],
                i % args.seats,
                sids[i // args.seats],
            )
        )
        for i in range(clients)
    ]

    async def open_gate() -> None:
        while sum("sid" in o for o in outs) < clients and not any(t.done() for t in tasks):
            await asyncio.sleep(0.05)
        gate.set()
        while sum("window_end" in o for o in outs) < clients and not any(t.done() for t in tasks):
            await asyncio.sleep(0.05)
        live.extend(await asyncio.to_thread(http_get, url, "/sessions"))
        close_gate.set()

    await asyncio.gather(open_gate(), *tasks)
    return outs, live


def run(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "team", False):
        from nonstop.bench.serverteam import run_team

        return run_team(args)
    if args.quick:
        args.sessions, args.seconds, args.ramp = min(args.sessions, 4), min(args.seconds, 3.0), min(args.ramp, 0.5)
    if args.sessions < 1 or args.every < 1 or not args.seconds > 0 or args.seats < 1:
        raise ValueError("need --sessions >= 1, --seats >= 1, --every >= 1 and --seconds > 0")
    if args.env is None:
        args.env = "Boxing" if args.seats == 1 else "multi/Boxing"
    load_before = os.getloadavg()[0]
    # the server in a process of its own: isolation is the point (its CPU and memory are measured apart from the
    # clients', which share no GIL with its tick pool); it runs the library's `serve`, as `nonstop serve` does
    server, url = launch(args.env, _settings(args), warm=args.sessions)
    pid = server.pid
    assert pid is not None  # started
    try:
        _seat_spaces(url, args)
        idle_rss, _ = rss_mb(pid)
        cpu0, client_cpu0, wall0 = cpu_s(pid), time.process_time(), time.perf_counter()
        outs, live = asyncio.run(_play(url, args))
        wall = time.perf_counter() - wall0
        cpu = {"server": (cpu_s(pid) - cpu0) / wall, "clients": (time.process_time() - client_cpu0) / wall}
        rss = (*rss_mb(pid), idle_rss)
        health = server_health(url)
        infos = closed_sessions(url, {o["sid"] for o in outs})
    finally:
        reap(server, timeout=0, kill_after=60)  # SIGTERM: it ends its sessions and exits; killed after 60 s
    return _result(args, outs, live, infos, cpu, rss, health, load_before)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_sessions": args.sessions,
        "tick_threads": args.tick_threads,
        "tick_procs": args.tick_procs,
        "tick_sched": args.tick_sched,
        "warm_envs": args.sessions,
        "switch_interval": args.switch_interval,
        "log_level": "warning",
    }


def _seat_spaces(url: str, args: argparse.Namespace) -> None:
    """``args.seat_names`` and ``args.n_actions`` from the server's metadata (``--seats`` checked)."""
    from nonstop.server.client import http_get

    desc = http_get(url, "/metadata")["envs"][args.env]
    seat_spaces = desc.get("seats") or {"agent": {"action": desc["action"]}}
    if args.seats > len(seat_spaces):
        raise ValueError(f"--seats {args.seats}: {args.env} has {len(seat_spaces)} seat(s) ({', '.join(seat_spaces)})")
    args.seat_names = list(seat_spaces)
    args.n_actions = [int(seat_spaces[name]["action"].get("n", 2)) for name in args.seat_names]


def _result(
    args: argparse.Namespace,
    outs: list[dict],
    live: list[dict],
    infos: list[dict],
    cpu: dict[str, float],
    rss: tuple[float, float, float],
    health: dict[str, Any],
    load_before: float,
) -> dict[str, Any]:
    sids = {o["sid"] for o in outs}
    p99s = np.array([s["summary"]["lateness_p99_ms"] for s in infos if "lateness_p99_ms" in s.get("summary", {})])
    steady = np.array(
        [s["recent_lateness_ms"]["p99"] for s in live if s["session_id"] in sids and "recent_lateness_ms" in s]
    )
    t_start = max(o["window_start"][0] for o in outs)
    t_end = min(o["window_end"][0] for o in outs)
    # ticks each session advanced over its own window, scaled to the common window's length
    # (each session once: its creator's window; the clients who joined it see the same ticks)
    rates = np.array(
        [
            (o["window_end"][1] - o["window_start"][1]) / (o["window_end"][0] - o["window_start"][0])
            for o in outs
            if "reset_s" in o
        ]
    )
    ticks_per_s = float(rates.sum())
    target = 60.0 * args.sessions
    reset_ms = np.array([o["reset_s"] for o in outs if "reset_s" in o]) * 1e3
    join_ms = np.array([o["join_s"] for o in outs if "join_s" in o]) * 1e3
    inaction = np.array([o["inaction_ticks"] / max(1, o["inaction_ticks"] + o["agent_ticks"]) for o in outs])
    result = {
        "bench": "server",
        "machine": machine_info(),
        "sessions": args.sessions,
        "seats": args.seats,
        "clients": len(outs),
        "env": args.env,
        "seconds": args.seconds,
        "client_every_ticks": args.every,
        "encoding": args.encoding,
        "tick_threads": args.tick_threads,
        "tick_procs": args.tick_procs,
        "tick_sched": args.tick_sched,
        "switch_interval_s": args.switch_interval,
        "lateness_p99_ms_median": float(np.median(steady)) if steady.size else float("nan"),
        "lateness_p99_ms_worst": float(steady.max()) if steady.size else float("nan"),
        "lateness_window_ticks": int(min(s["recent_lateness_ms"]["ticks"] for s in live if "recent_lateness_ms" in s)),
        "whole_session_lateness_p99_ms_median": float(np.median(p99s)) if p99s.size else float("nan"),
        "whole_session_lateness_p99_ms_worst": float(p99s.max()) if p99s.size else float("nan"),
        "ticks_per_s": ticks_per_s,
        "ticks_per_s_target": target,
        "ticks_fraction": ticks_per_s / target,
        "common_window_s": max(0.0, t_end - t_start),
        "server_rss_mb": rss[0],
        "server_peak_rss_mb": rss[1],
        "server_idle_rss_mb": rss[2],
        "reset_p50_ms": float(np.median(reset_ms)),
        "reset_ms": percentiles(reset_ms),
        "join_ms": percentiles(join_ms) if join_ms.size else None,
        "client_inaction_fraction_median": float(np.median(inaction)),
        "server_cpu_cores": cpu["server"],
        "clients_cpu_cores": cpu["clients"],
        "health_after": health["status"],
        "tick_sched_in_force": health.get("tick_sched", []),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
    }
    result["meets_target"] = bool(
        result["lateness_p99_ms_worst"] <= TARGET_LATENESS_P99_MS
        and result["ticks_fraction"] >= TARGET_TICKS_FRACTION
        and result["server_peak_rss_mb"] <= TARGET_RSS_MB
        and result["reset_p50_ms"] <= TARGET_RESET_P50_MS
    )
    return result


def render(result: dict[str, Any]) -> None:
    if result.get("mode") == "team":
        from nonstop.bench.serverteam import render_team

        render_team(result)
        return
    from nonstop._console import Console
    from rich.table import Table

    load = ", ".join(f"{x:.2f}" for x in result["loadavg_1min"])
    seats = f" · {result['seats']} clients each (one per seat)" if result.get("seats", 1) > 1 else ""
    table = Table(title=f"nonstop bench server · {result['sessions']} × {result['env']}{seats} · load {load}")
    table.add_column("figure")
    table.add_column("measured")
    table.add_column("target")
    rows = [
        ("lateness p99 (ms), median session", f"{result['lateness_p99_ms_median']:.3f}", ""),
        ("lateness p99 (ms), worst session", f"{result['lateness_p99_ms_worst']:.3f}", f"≤ {TARGET_LATENESS_P99_MS}"),
        (
            "aggregate ticks/s",
            f"{result['ticks_per_s']:.0f} ({100 * result['ticks_fraction']:.1f} %)",
            f"≥ {TARGET_TICKS_FRACTION:.0%} of {result['ticks_per_s_target']:.0f}",
        ),
        (
            "server RSS (MB), now / peak",
            f"{result['server_rss_mb']:.0f} / {result['server_peak_rss_mb']:.0f}",
            f"≤ {TARGET_RSS_MB:.0f}",
        ),
        ("reset latency p50 (ms)", f"{result['reset_p50_ms']:.1f}", f"≤ {TARGET_RESET_P50_MS}"),
        *([("join latency p50 (ms)", f"{result['join_ms']['p50']:.1f}", "")] if result.get("join_ms") else []),
        ("client inaction (median)", f"{result['client_inaction_fraction_median']:.3f}", ""),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    Console().print(f"verdict: {verdict(result['meets_target'], bool(result.get('quick')))} the targets")
