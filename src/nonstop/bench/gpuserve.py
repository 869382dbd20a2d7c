"""``nonstop bench gpu``'s second part: worlds served at 60 Hz on the real clock (see :mod:`nonstop.bench.gpu`).

For K worlds, three designs in the same run: one `BatchingServer` on the device for all of them
(:func:`serve` with ``"batched"``), one inference process per world (``"process_per_world"``), and each
world in a process of its own whose lanes are remote lanes of a server here (:func:`serve_remote`);
:func:`lane_round_trip` is what the shared-memory ring costs one request. Each returns the figures
``bench gpu`` reports per design and K (inaction of the worst world, delay p50/p99 in ticks, and for the
servers their utilisation and batch sizes).
"""

from __future__ import annotations

import argparse
import gc
import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import numpy as np

__all__ = ["lane_round_trip", "serve", "serve_or_say", "serve_remote"]


def _parallel(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """``fn`` of every item at once, one thread each (a world's start is 1-2 s of waiting); the first
    error is raised after all have ended."""
    items = list(items)
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def one(j: int) -> None:
        try:
            results[j] = fn(items[j])
        except BaseException as exc:  # raised below, after every start has ended
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(j,), daemon=True) for j in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _world_figures(sessions: list[Any], begins: list[int], ends: list[int]) -> dict[str, Any]:
    inaction, delays = [], []
    for world, warmup_ticks, end in zip(sessions, begins, ends):
        inaction.append(float(world.tick_log.summary(warmup_ticks=warmup_ticks, end_tick=end)["inaction_fraction"]))
        log = world.tick_log
        keep = (log["tick"] > warmup_ticks) & (log["tick"] <= end) & (log["source"] == 1)
        delays.append(np.asarray(log["delay"][keep], dtype=float))
    d = np.concatenate(delays) if delays else np.zeros(0)
    return {
        "inaction_max": max(inaction),
        "inaction_mean": float(np.mean(inaction)),
        "delay_p50_ticks": float(np.percentile(d, 50)) if d.size else None,
        "delay_p99_ticks": float(np.percentile(d, 99)) if d.size else None,
    }


def _process_policy(k: float, space: Any) -> Any:
    """Today's design: a worker process holding its own model on one CPU thread (module level: picklable)."""
    from nonstop.policies.base import TorchPolicy
    from nonstop.policies.models import impala_resnet

    return TorchPolicy(impala_resnet(k, int(space.n)), space, num_threads=1)


def _one_process(factory: Any, i: int) -> Any:
    from nonstop.inference.workers import ProcessPolicy

    return ProcessPolicy(factory)


def _lanes_of(server: Any, world: Any) -> Any:
    """World ``world``'s lane factory: lane ``i`` is a request lane of ``server`` on the world's tick grid
    (its origin moved from the world's clock to the server's)."""
    origin = world.clock.origin + world.origin - server.clock.origin
    return lambda i: server.lane(world.action_space, tau_m=world.tau_m, origin=origin)


class _Timed:
    """A forward whose calls' time is summed in ``busy[0]``; everything else is the forward's (its graph
    sizes, staging buffers, prepare: what the server uses)."""

    def __init__(self, forward: Any, clock: Any, busy: list[float]) -> None:
        self._forward, self._clock, self._busy = forward, clock, busy

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        t0 = self._clock.now()
        try:
            return self._forward(batch)
        finally:
            self._busy[0] += self._clock.now() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._forward, name)


def _build_server(
    s: dict[str, Any],
    args: argparse.Namespace,
    curve: Any,
    clock: Any,
    n_actions: int,
    busy: list[float],
    example: np.ndarray,
) -> Any:
    """The batching server of the model at ``--serve-k`` and ``--serve-dtype`` on the device, its graphs
    captured before it returns (outside any measured window: `GraphOutOfMemory` names a size that did
    not fit); ``busy[0]`` sums its forward time."""
    from nonstop.inference.batching import BatchingServer
    from nonstop.inference.device import TorchForward, default_graph_sizes
    from nonstop.policies.models import impala_resnet

    forward = TorchForward(
        impala_resnet(s["serve_k"], n_actions, device=s["device"]),
        str(s["device"]),
        dtype=s["serve_dtype"],
        graph_sizes=default_graph_sizes(s["device"], args.max_batch),
    )
    server = BatchingServer(
        _Timed(forward, clock, busy), curve, clock=clock, max_batch=args.max_batch, overlap=True, example=example
    )
    try:
        server.wait_ready(600)
    except Exception:
        server.close()
        raise
    return server


def _remote_world(conn: Any, env: str, seed: int, scheduler: str, n_lanes: int, hz: float, seconds: float) -> None:
    """One world in a process of its own whose lanes are remote lanes of the bench's server: it starts the
    world, says its frame's shape, gets its lanes (pickled once: the ring's name and a slot each), starts
    its pool, waits for the go, runs, and sends back its inaction and its applied actions' delays."""
    import signal

    from nonstop.inference.lanering import RemoteLane
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.clock import WallClock
    from nonstop.realtime.host import Session
    from nonstop.realtime.lifeline import hold_lifeline

    hold_lifeline()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench decides when a world stops
    world = Session(env, clock="wall", seed=seed, env_kwargs={"preprocess": True})
    lanes: list[RemoteLane] = []
    pool = None
    try:
        world.start()
        frame = world.slot.read().obs
        conn.send(("ready", frame.shape, frame.dtype.str, int(world.action_space.n)))  # type: ignore[attr-defined]
        lanes = conn.recv()
        assert isinstance(world.clock, WallClock)
        origin = world.clock.origin + world.origin - lanes[0].clock_origin  # the world's tick 0 on the server's clock
        mine = [
            RemoteLane(
                lane.ring,
                lane.index,
                world.action_space,
                tau_m=world.tau_m,
                origin=origin,
                clock_origin=lane.clock_origin,
            )
            for lane in lanes
        ]
        pool = InferencePool(world, lambda i: mine[i], scheduler, n_inference=n_lanes).start()
        conn.send(("started",))
        conn.recv()  # go
        begin = int(world.slot.read().tick) + int(hz / 2)
        world.clock.sleep_until(world.clock.now() + 0.5 + seconds)
        end = int(world.slot.read().tick)
    finally:
        if pool is not None:
            pool.stop()
        world.stop()
        for lane in lanes:
            lane.close()
    log = world.tick_log
    keep = (log["tick"] > begin) & (log["tick"] <= end) & (log["source"] == 1)
    inaction = float(log.summary(warmup_ticks=begin, end_tick=end)["inaction_fraction"])
    conn.send(("done", inaction, np.asarray(log["delay"][keep], dtype=float).tolist()))


def serve_remote(k_worlds: int, s: dict[str, Any], args: argparse.Namespace, curve: Any) -> dict[str, Any]:
    """K worlds, each in a process of its own, served by one batching server in this process through a
    shared-memory lane ring (`nonstop.inference.lanering`): the figures `serve` gives."""
    import multiprocessing as mp

    from nonstop.inference.lanering import RemoteLanes
    from nonstop.realtime.clock import WallClock
    from nonstop.realtime.lifeline import reap

    clock, busy = WallClock(spin=0.0), [0.0]
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    server = lanes = None
    try:
        for j in range(k_worlds):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_remote_world,
                args=(theirs, args.env, j, args.scheduler, args.lanes, args.hz, s["seconds"]),
                daemon=True,
            )
            proc.start()
            theirs.close()
            conns.append(mine)
            procs.append(proc)
        readies = [_expect(conn, "ready", 300) for conn in conns]
        shape, dtype = readies[0][1], readies[0][2]
        n_actions = int(readies[0][3])
        server = _build_server(s, args, curve, clock, n_actions, busy, np.zeros(shape, dtype))
        lanes = RemoteLanes(server, np.zeros(shape, dtype), n_lanes=k_worlds * args.lanes)
        for j, conn in enumerate(conns):
            conn.send([lanes.lane(j * args.lanes + i, tau_m=1.0 / args.hz) for i in range(args.lanes)])
        for conn in conns:
            _expect(conn, "started", 300)
        busy[0] = 0.0
        started = clock.now()
        for conn in conns:
            conn.send("go")
        results = [_expect(conn, "done", s["seconds"] + 120) for conn in conns]
        wall = clock.now() - started
    finally:
        for conn in conns:
            conn.close()
        for proc in procs:
            reap(proc, timeout=10)
        if lanes is not None:
            lanes.close()
        if server is not None:
            server.close()
    delays = np.concatenate([np.asarray(r[2], dtype=float) for r in results]) if results else np.zeros(0)
    inaction = [r[1] for r in results]
    report = server.report()
    figures = {
        "inaction_max": max(inaction),
        "inaction_mean": float(np.mean(inaction)),
        "delay_p50_ticks": float(np.percentile(delays, 50)) if delays.size else None,
        "delay_p99_ticks": float(np.percentile(delays, 99)) if delays.size else None,
        "design": "batched_remote",
        "worlds": k_worlds,
        "seconds": s["seconds"],
        "utilisation": min(1.0, busy[0] / wall),
        "batch_size_mean": report["batch_size_mean"],
        "late": report["late"],
        "requests": report["requests"],
    }
    figures["served"] = figures["inaction_max"] <= args.max_inaction
    return figures


def _time_lane(conn: Any, lane: Any, n: int) -> None:
    """A child: ``n`` requests of one remote lane, each timed from post to answer (seconds)."""
    from nonstop.realtime.clock import stopwatch

    frame, took = np.zeros(lane.ring.shape, lane.ring.dtype), []
    for _ in range(n):
        t0 = stopwatch()
        lane.act(frame)
        took.append(stopwatch() - t0)
    lane.close()
    conn.send(("done", took))


def lane_round_trip(shape: tuple[int, ...], n: int = 400) -> dict[str, Any]:
    """What the ring costs a request: a forward that does nothing, one lane at a time, ``n`` requests of
    a ``shape`` uint8 frame from a lane in this process (by reference) and from a lane in a child process
    (through the ring); p50 and p99 of each round trip in microseconds."""
    import multiprocessing as mp

    from nonstop.inference.batching import BatchingServer
    from nonstop.inference.batchsize import LatencyCurve
    from nonstop.inference.lanering import RemoteLanes
    from nonstop.realtime.clock import WallClock, stopwatch
    from nonstop.realtime.lifeline import reap

    def us(took: list[float]) -> dict[str, float]:
        return {"p50": float(np.percentile(took, 50) * 1e6), "p99": float(np.percentile(took, 99) * 1e6)}

    frame = np.zeros(shape, np.uint8)
    with BatchingServer(
        lambda b: np.zeros(len(b), np.int64), LatencyCurve.linear(0.0, 0.0), clock=WallClock(spin=0.0), max_batch=8
    ) as server:
        lane, local = server.lane(tau_m=1 / 60), []
        for _ in range(n):
            t0 = stopwatch()
            lane.act(frame)
            local.append(stopwatch() - t0)
        lane.close()
        ctx = mp.get_context("spawn")
        with RemoteLanes(server, frame, n_lanes=1) as lanes:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_time_lane, args=(theirs, lanes.lane(0, tau_m=1 / 60), n), daemon=True)
            proc.start()
            theirs.close()
            try:
                remote = _expect(mine, "done", 120)[1]
            finally:
                mine.close()
                reap(proc, timeout=10)
    return {"frame": list(shape), "requests": n, "in_process_us": us(local), "remote_us": us(remote)}


def _expect(conn: Any, what: str, timeout: float) -> tuple:
    if not conn.poll(timeout):
        raise RuntimeError(f"a world's process sent no {what!r} within {timeout:g}s")
    try:
        msg = conn.recv()
    except EOFError:
        raise RuntimeError(f"a world's process died before it said {what!r}") from None
    if msg[0] != what:
        raise RuntimeError(f"a world's process said {msg[0]!r} where {what!r} was due")
    return msg


def serve(design: str, k_worlds: int, s: dict[str, Any], args: argparse.Namespace, curve: Any) -> dict[str, Any]:
    """K worlds on the real clock for ``s["seconds"]``, served by the batching server or a process each."""
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.clock import WallClock
    from nonstop.realtime.host import Session

    clock = WallClock(spin=0.0)
    sessions = [Session(args.env, clock="wall", seed=j, env_kwargs={"preprocess": True}) for j in range(k_worlds)]
    pools: list[Any] = []
    server = None
    busy = [0.0]
    try:
        _parallel(lambda w: w.start(), sessions)  # each start waits for its world: all at once
        if design == "batched":
            n_actions = int(sessions[0].action_space.n)  # type: ignore[attr-defined]  # a Discrete space: DQN worlds
            example = np.asarray(sessions[0].slot.read().obs)
            server = _build_server(s, args, curve, clock, n_actions, busy, example)  # its graphs captured by now
            for w in sessions:
                pools.append(InferencePool(w, _lanes_of(server, w), args.scheduler, n_inference=args.lanes).start())
        else:

            def start_pool(w: Any) -> None:
                factory = partial(_process_policy, s["serve_k"], w.action_space)
                pools.append(InferencePool(w, partial(_one_process, factory), "sequential").start())

            _parallel(start_pool, sessions)  # a process worker's start is waited for: all at once
        # every model is loaded and every graph captured: the window opens half a second on
        begins = [int(w.slot.read().tick) + int(args.hz / 2) for w in sessions]
        started = clock.now()
        clock.sleep_until(started + 0.5 + s["seconds"])
        wall = clock.now() - started
        ends = [int(w.slot.read().tick) for w in sessions]  # the measured window ends here: β ticks on after
    finally:
        for pool in pools:
            pool.stop()
        if server is not None:
            server.close()
        for w in sessions:
            w.stop()
    figures = _world_figures(sessions, begins, ends)
    figures.update(design=design, worlds=k_worlds, seconds=s["seconds"])
    if server is not None:
        report = server.report()
        figures.update(
            utilisation=min(1.0, busy[0] / wall),
            batch_size_mean=report["batch_size_mean"],
            late=report["late"],
            requests=report["requests"],
        )
    figures["served"] = figures["inaction_max"] <= args.max_inaction
    return figures


def serve_or_say(fn: Callable[..., dict[str, Any]], design: str, k_worlds: int, *a: Any) -> dict[str, Any]:
    """One run of worlds served; a server whose graph did not fit says so in its row (and the bench goes on)."""
    from nonstop.inference.device import GraphOutOfMemory

    try:
        return fn(*a)
    except GraphOutOfMemory as exc:
        return {
            "design": design,
            "worlds": k_worlds,
            "served": False,
            "error": str(exc),
            "inaction_max": 1.0,
            "delay_p50_ticks": None,
            "delay_p99_ticks": None,
        }
    finally:
        gc.collect()  # the server's model and graphs go before the next run builds its own
