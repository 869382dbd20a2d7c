"""``nonstop bench channels``: process round trips through our channels vs ``multiprocessing.Queue``.

Two processes play ping-pong (the child is started with ``spawn``, like every nonstop process):

* **slot** — the parent publishes an 84×84 ``uint8`` observation tagged ``tick=k`` into one
  `LatestSlot`; the child busy-waits on the slot's sequence number, reads the observation and
  publishes it back on a second slot; the parent busy-waits for it and reads it. This is the host →
  agent path in both directions.
* **queue** — the parent submits action ``k`` to one `ActionQueue`; the child polls ``take`` (busy),
  and submits it back on a second queue; the parent polls ``take`` for it. The agent → host path.
* **mp_queue** (baseline) — the same ping-pong through two ``multiprocessing.Queue``\\ s carrying
  the same 84×84 ``uint8`` array (what a plain implementation would send per tick), and
  **mp_queue_small** with a tuple of the seven numbers an `ActionQueue` entry carries.

Every kind runs in every round, one after another (rounds interleave the kinds so a noisy phase of a
shared machine does not land on one kind only); the first ``--warmup`` round trips of each phase are
dropped. Every reply is checked (the tick or action that comes back must be the one sent).

Target (from the issue): p50 round trip ≤ 10 µs for the slot and for the queue. Busy-waiting needs
a core per spinning process: on a 2-core machine the two players already take both cores, so
anything else running shows up in p99 and max.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from nonstop.bench.common import machine_info, percentiles, run_sizes, size_help, verdict
from nonstop.realtime.lifeline import hold_lifeline, reap
from nonstop.realtime.channels import SEGMENT_PREFIX, ActionQueue, LatestSlot
from nonstop.realtime.clock import stopwatch

__all__ = ["DESCRIPTION", "RESULT_KEYS", "TARGET_P50_US", "add_arguments", "run", "render", "our_segments"]

DESCRIPTION = "process round trip: LatestSlot and ActionQueue ping-pong vs multiprocessing.Queue (target p50 ≤ 10 µs)"

#: p50 round trip our channels should keep, in microseconds.
TARGET_P50_US = 10.0

KINDS = ("slot", "queue", "mp_queue", "mp_queue_small")
OBS_SHAPE = (84, 84)

#: Figures every result carries (all finite numbers or booleans).
RESULT_KEYS = (
    "slot_roundtrip_p50_us",
    "slot_roundtrip_p99_us",
    "queue_roundtrip_p50_us",
    "queue_roundtrip_p99_us",
    "mp_queue_roundtrip_p50_us",
    "mp_queue_roundtrip_p99_us",
    "mp_queue_small_roundtrip_p50_us",
    "mp_queue_small_roundtrip_p99_us",
    "slot_speedup_p50",
    "queue_speedup_p50",
    "slot_meets_target",
    "queue_meets_target",
    "meets_target",
    "errors",
    "shm_leftovers",
)

_QUICK = {"round_trips": 2000, "rounds": 1}
_FULL = {"round_trips": 10000, "rounds": 3}
_ACTIONS = gymnasium.spaces.Discrete(1 << 30)
#: one ActionQueue entry for a Discrete action: six fixed float64 words and one action word
_QUEUE_ENTRY_BYTES = 8 * 7
#: a stuck ping-pong (the other side died) fails after this long instead of spinning forever
_STALL_S = 30.0


def our_segments() -> list[str]:
    """``nonstop_*`` segments in /dev/shm created by this process (names embed the creator's pid;
    other nonstop runs may share the machine)."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    tag = f"_{os.getpid()}_"
    return sorted(p.name for p in shm.iterdir() if p.name.startswith(SEGMENT_PREFIX) and tag in p.name)


class _Stalled(RuntimeError):
    pass


# ----------------------------------------------------------------------------- the echo process


def _echo_main(conn: Any, channels: dict[str, Any], schedule: list[tuple[str, int]]) -> None:
    """Child: echo every message back, following the same schedule as the parent."""
    hold_lifeline()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns shutdown, Ctrl-C included
    slot_in, slot_out = channels["slot"]
    q_in, q_out = channels["queue"]
    buf = np.empty(OBS_SHAPE, np.uint8)
    slot_received = 0
    try:
        conn.send("ready")
        for kind, count in schedule:
            if kind == "slot":
                for _ in range(count):
                    slot_received += 1
                    want = 2 * slot_received  # each publish moves the sequence by two
                    _spin_until_seq(slot_in, want)
                    got = slot_in.read(out=buf)
                    slot_out.publish(buf, tick=got.tick, time=0.0)
            elif kind == "queue":
                for _ in range(count):
                    record = _spin_take(q_in)
                    q_out.submit(record.action, obs_tick=record.obs_tick, episode=0)
            else:
                mq_in, mq_out = channels[kind]
                for _ in range(count):
                    mq_out.put(mq_in.get(timeout=_STALL_S))
        conn.send("done")
    finally:
        for channel in (slot_in, slot_out, q_in, q_out):
            channel.close()


def _spin_until_seq(slot: LatestSlot, want: int) -> None:
    spins = 0
    while slot.seq < want:
        spins += 1
        if spins & 0xFFFF == 0:
            _check_alive()


def _spin_take(queue: ActionQueue) -> Any:
    spins = 0
    while True:
        record = queue.take(episode=0).record
        if record is not None:
            return record
        spins += 1
        if spins & 0xFFFF == 0:
            _check_alive()


# the other player (the parent sets it to the echo process; the echo process checks its parent)
_peer: Any = None
_stall_deadline = float("inf")


def _check_alive() -> None:
    peer = _peer if _peer is not None else mp.parent_process()
    if (peer is not None and not peer.is_alive()) or stopwatch() > _stall_deadline:
        raise _Stalled("the other side of the ping-pong stopped answering")


# ----------------------------------------------------------------------------- the parent side


def _ping_slot(
    ping: LatestSlot, pong: LatestSlot, count: int, sent_before: int, obs: np.ndarray
) -> tuple[np.ndarray, int]:
    buf = np.empty_like(obs)
    times = np.empty(count)
    errors = 0
    for i in range(count):
        k = sent_before + i
        want = 2 * (k + 1)
        obs[0, 0] = k & 0xFF
        t0 = stopwatch()
        ping.publish(obs, tick=k, time=0.0)
        _spin_until_seq(pong, want)
        got = pong.read(out=buf)
        times[i] = stopwatch() - t0
        errors += got.tick != k or buf[0, 0] != k & 0xFF
    return times, errors


def _ping_queue(ping: ActionQueue, pong: ActionQueue, count: int, sent_before: int) -> tuple[np.ndarray, int]:
    times = np.empty(count)
    errors = 0
    for i in range(count):
        k = sent_before + i
        t0 = stopwatch()
        ping.submit(k, obs_tick=k, episode=0)
        record = _spin_take(pong)
        times[i] = stopwatch() - t0
        errors += record.action != k or record.obs_tick != k
    return times, errors


def _ping_mp(ping: Any, pong: Any, count: int, sent_before: int, payload: Any) -> tuple[np.ndarray, int]:
    times = np.empty(count)
    errors = 0
    small = isinstance(payload, tuple)
    for i in range(count):
        k = sent_before + i
        message = (k, *payload[1:]) if small else payload
        if not small:
            payload[0, 0] = k & 0xFF
        t0 = stopwatch()
        ping.put(message)
        got = pong.get(timeout=_STALL_S)
        times[i] = stopwatch() - t0
        errors += (got[0] != k) if small else (got[0, 0] != k & 0xFF)
    return times, errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--round-trips",
        type=int,
        default=None,
        help=size_help("measured round trips per kind and round", "round_trips", _QUICK, _FULL),
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=size_help("rounds, each running every kind once", "rounds", _QUICK, _FULL),
    )
    parser.add_argument("--warmup", type=int, default=200, help="round trips dropped at the start of each phase")


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = run_sizes(args, _QUICK, _FULL)
    count, rounds = int(sizes["round_trips"]), int(sizes["rounds"])
    warmup = max(int(getattr(args, "warmup", 200)), 0)
    phase = warmup + count
    schedule = [(kind, phase) for _ in range(rounds) for kind in KINDS]
    obs = np.zeros(OBS_SHAPE, np.uint8)
    samples, errors = _round_trips(schedule, obs, warmup)
    stats = {kind: percentiles(np.concatenate(samples[kind]), 1e6) for kind in KINDS}
    return _result(stats, obs, count, rounds, warmup, errors)


#: an ActionQueue entry as a tuple: action, obs_tick, episode, ...
_SMALL = (0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _round_trips(
    schedule: list[tuple[str, int]], obs: np.ndarray, warmup: int
) -> tuple[dict[str, list[np.ndarray]], int]:
    """Each (channel, count) of ``schedule`` pinged through the echo process in turn: the round
    trips after ``warmup`` per channel (seconds), and how many replies carried the wrong payload."""
    global _peer, _stall_deadline
    ctx = mp.get_context("spawn")
    samples: dict[str, list[np.ndarray]] = {kind: [] for kind in KINDS}
    errors = 0
    sent = dict.fromkeys(KINDS, 0)
    owned: list[Any] = []
    mp_queues: list[Any] = []
    child = None
    parent_conn = child_conn = None
    try:
        slots = (LatestSlot.create(obs), LatestSlot.create(obs))
        owned += slots
        queues = (ActionQueue.create(_ACTIONS), ActionQueue.create(_ACTIONS))
        owned += queues
        mp_queues = [ctx.Queue() for _ in range(4)]
        channels = {
            "slot": slots,
            "queue": queues,
            "mp_queue": (mp_queues[0], mp_queues[1]),
            "mp_queue_small": (mp_queues[2], mp_queues[3]),
        }
        parent_conn, child_conn = ctx.Pipe()
        child = ctx.Process(
            target=_echo_main, args=(child_conn, channels, schedule), name="nonstop-bench-echo", daemon=True
        )
        child.start()
        _peer = child
        if not parent_conn.poll(120) or parent_conn.recv() != "ready":
            raise RuntimeError("the echo process did not start within 120 s")
        for kind, n in schedule:
            _stall_deadline = stopwatch() + _STALL_S * 4
            if kind == "slot":
                times, bad = _ping_slot(slots[0], slots[1], n, sent[kind], obs)
            elif kind == "queue":
                times, bad = _ping_queue(queues[0], queues[1], n, sent[kind])
            else:
                times, bad = _ping_mp(*channels[kind], n, sent[kind], _SMALL if kind == "mp_queue_small" else obs)
            sent[kind] += n
            errors += int(bad)
            samples[kind].append(times[warmup:])
        if not parent_conn.poll(30) or parent_conn.recv() != "done":
            raise RuntimeError("the echo process did not finish its schedule")
        child.join(timeout=10)
    finally:
        _peer, _stall_deadline = None, float("inf")
        if child is not None:
            reap(child)
        for conn in (parent_conn, child_conn):
            if conn is not None:
                conn.close()
        for channel in owned:
            channel.unlink()
        for mq in mp_queues:
            mq.cancel_join_thread()  # never hang at exit on a message the dead peer will not read
            mq.close()
    return samples, errors


def _result(
    stats: dict[str, dict[str, float]], obs: np.ndarray, count: int, rounds: int, warmup: int, errors: int
) -> dict[str, Any]:
    """The round-trip percentiles per channel, the speed-ups over multiprocessing and the targets."""
    result: dict[str, Any] = {"bench": "channels"}
    for kind in KINDS:
        result[f"{kind}_roundtrip_p50_us"] = stats[kind]["p50"]
        result[f"{kind}_roundtrip_p99_us"] = stats[kind]["p99"]
    slot_ok = stats["slot"]["p50"] <= TARGET_P50_US
    queue_ok = stats["queue"]["p50"] <= TARGET_P50_US
    result.update(
        {
            "slot_speedup_p50": stats["mp_queue"]["p50"] / stats["slot"]["p50"],
            "queue_speedup_p50": stats["mp_queue_small"]["p50"] / stats["queue"]["p50"],
            "target_p50_us": TARGET_P50_US,
            "slot_meets_target": bool(slot_ok),
            "queue_meets_target": bool(queue_ok),
            "meets_target": bool(slot_ok and queue_ok),
            "payload_bytes": {
                "slot": int(obs.nbytes),
                "queue": _QUEUE_ENTRY_BYTES,
                "mp_queue": int(obs.nbytes),
                "mp_queue_small": 8 * len(_SMALL),
            },
            "round_trips": count,
            "rounds": rounds,
            "warmup": warmup,
            "errors": errors,
            "shm_leftovers": len(our_segments()),
            "stats_us": stats,
            "machine": machine_info(),
        }
    )
    return result


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    table = Table(title="process round trip (ping-pong, spawn)")
    for col in ("channel", "payload", "p50 µs", "p90 µs", "p99 µs", "min µs", "max µs"):
        table.add_column(col, justify="left" if col in ("channel", "payload") else "right")
    names = {
        "slot": "LatestSlot ×2 (busy-wait)",
        "queue": "ActionQueue ×2 (busy poll)",
        "mp_queue": "mp.Queue ×2 (baseline)",
        "mp_queue_small": "mp.Queue ×2 (baseline)",
    }
    for kind in KINDS:
        s = result["stats_us"][kind]
        table.add_row(
            names[kind],
            f"{result['payload_bytes'][kind]} B",
            f"{s['p50']:.1f}",
            f"{s['p90']:.1f}",
            f"{s['p99']:.1f}",
            f"{s['min']:.1f}",
            f"{s['max']:.1f}",
        )
    quick = bool(result.get("quick"))
    table.caption = (
        f"target p50 ≤ {result['target_p50_us']:.0f} µs: slot {verdict(result['slot_meets_target'], quick)}, "
        f"queue {verdict(result['queue_meets_target'], quick)}; slot {result['slot_speedup_p50']:.0f}× faster than mp.Queue, "
        f"queue {result['queue_speedup_p50']:.0f}×; {result['round_trips']} round trips × {result['rounds']} rounds; "
        f"errors {result['errors']}, shm leftovers {result['shm_leftovers']}"
    )
    Console().print(table)
