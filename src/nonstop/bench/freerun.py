"""``nonstop bench freerun``: agent-steps per second of MAgent2's battle free-running (no clock, as fast
as it goes), nonstop's view against PufferLib's ``pufferlib.vector.Multiprocessing`` over the same
PettingZoo world, in the same run (issue 43 item 7; docs/scale.md).

Both sides step ``--workers`` copies of `multi/battle` (45×45 map: 162 agents each), one copy a
worker process, ``--steps`` steps each, every agent given the same policy (``--actions``: ``noop``,
battle's stay, 6, so every agent stays in the world; ``random``: uniform over the 21 actions):

* ``nonstop``: nonstop's free-running mode, the host's tick without the clock's wait (`Session(...,
  clock="virtual", unthrottled=True, max_ticks=steps)`: an unthrottled host on a virtual clock never
  yields, so the whole run happens inside ``start()``), one session a worker process. Every tick is
  nonstop's whole per-tick path at 162 seats: each seat's action queue read and its β applied
  (``--actions`` is β), the world stepped, the tick log's row appended (every seat's block) and each
  seat's observation copied into its shared-memory `LatestSlot`, where an agent reads it. The run
  is timed from the first observation published (after the world's reset) to the last tick, and
  the workers together from the earliest start to the latest end.
* ``pufferlib``: ``pufferlib.vector.make(PettingZooPufferEnv over battle, backend=Multiprocessing,
  num_envs=workers, num_workers=workers)``, its main process sending every agent's action
  (``send``) and taking every agent's observation (``recv``) at each step, as a trainer does:
  timed from the first ``send`` to the last ``recv`` (its worlds are reset once and run on, resetting
  as episodes end: see `_PufferSide`).
* ``pufferlib-serial`` (asked for by ``--sides``): the same emulated worlds on PufferLib's ``Serial``
  backend, all in this process, no handoff: what PufferLib's own per-step work costs on the CPU
  (``ratio_cpu_serial``: its CPU an agent-step over nonstop's), free of the scheduling waits that
  lockstep handoffs meet on a loaded machine.

The repeats alternate (nonstop, pufferlib; the next repeat the other way round) after one untimed
warm-up of each. Reported: each side's median agent-steps per second (steps × agents × workers over
the wall time), CPU µs an agent-step (every process of the side: PufferLib's main process, which
spins while it waits, included), the agent-steps of agents still in the world (all of them here:
random play kills nobody in battle's 1,000 cycles), and ``ratio`` (nonstop's median over PufferLib's). The judged
figure: ``ratio`` ≥ 0.5 at 162 agents, measured in the same run (``meets_target``).

PufferLib is optional (``pip install --no-deps pufferlib-core==3.0.23``: its wheel pins an older torch
it does not need for this); ``--sides nonstop`` runs nonstop's side alone without it.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from functools import partial
from typing import Any

import numpy as np

from nonstop.bench.common import run_sizes, usable_cores, verdict

__all__ = ["DESCRIPTION", "TARGET_RATIO", "RESULT_KEYS", "add_arguments", "run", "render"]

DESCRIPTION = "battle free-running (no clock): agent-steps/s of nonstop's view against PufferLib's Multiprocessing"
ENV = "multi/battle"
SIDES = ("nonstop", "pufferlib", "pufferlib-serial")
#: nonstop keeps at least this share of PufferLib's free-run agent-steps per second (issue 43)
TARGET_RATIO = 0.5
BATTLE_NOOP = 6  # stay: `nonstop.envs.magent.BATTLE_NOOP`
BATTLE_ACTIONS = 21
#: how to install what the comparison needs (its wheel pins torch 2.9; nothing here uses torch)
PUFFERLIB_INSTALL = "pip install --no-deps pufferlib-core==3.0.23 psutil"
#: the figures every side's result carries
RESULT_KEYS = ("agent_steps_per_s", "cpu_us_per_agent_step", "live_agent_steps_per_s", "runs")
_QUICK = {"steps": 100, "repeats": 2}
_FULL = {"steps": 1000, "repeats": 5}
_WARMUP_STEPS = 20
_BARRIER_S = 120.0  # how long a worker waits for the others to be ready (spawning under load is slow)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes a side, a world each (default: the usable cores)",
    )
    parser.add_argument("--steps", type=int, default=None, help="steps a world a repeat (default 1000; quick 100)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats a side (default 5; quick 2)")
    parser.add_argument(
        "--actions", choices=("noop", "random"), default="noop", help="every agent's action (default noop: stay)"
    )
    parser.add_argument(
        "--sides",
        default="nonstop,pufferlib",
        help="what runs, comma-separated: nonstop, pufferlib, pufferlib-serial (default nonstop,pufferlib)",
    )
    parser.add_argument("--map-size", type=int, default=45, help="battle's map (default 45: 162 agents)")
    parser.add_argument("--seed", type=int, default=0)


# ----------------------------------------------------------------------------- nonstop's side


class _FirstObservationStamp:
    """A host recorder that notes when the first observation was published (the world reset): the start
    of a timed run. It sees every tick (two calls a tick that do nothing, µs against the tick's ms)."""

    records_seats = True

    def __init__(self) -> None:
        self.at: float | None = None
        self.cpu: float | None = None

    def on_seats_observation(self, tick: int, seats: Any) -> None:
        if self.at is None:
            self.at, self.cpu = time.perf_counter(), time.process_time()

    def on_seats_tick(self, tick: int, seats: Any, *, terminated: bool, truncated: bool) -> None:
        pass


def nonstop_run(map_size: int, actions: str, steps: int, seed: int, ready: Any = None) -> dict[str, float]:
    """One free run of nonstop's host over battle in this process: ``steps`` unthrottled ticks. ``ready``:
    a barrier waited on once the session is built, so every worker starts stepping together."""
    from nonstop.realtime.clock import VirtualClock
    from nonstop.realtime.host import Session
    from nonstop.realtime.tickcolumns import SOURCE_ABSENT

    stamp = _FirstObservationStamp()
    session = Session(
        ENV,
        clock="virtual",
        unthrottled=True,
        max_ticks=steps,
        seed=seed,
        default=actions,
        env_kwargs={"map_size": map_size},
        recorder=stamp,
    )
    if ready is not None:
        ready.wait(_BARRIER_S)
    with session:  # start(): an unthrottled host on a virtual clock runs to max_ticks right here
        if isinstance(session.clock, VirtualClock):
            session.clock.run()  # nothing is left to run unless the host someday yields when unthrottled
        end, cpu_end = time.perf_counter(), time.process_time()
        log = session.tick_log
        if len(log) != steps or stamp.at is None or stamp.cpu is None:
            raise RuntimeError(f"nonstop's host ran {len(log)} ticks of {steps}")
        seats = log.seats
        live = int(np.count_nonzero(log.block("source") != SOURCE_ABSENT))
    return {
        "start": stamp.at,
        "end": end,
        "cpu_s": cpu_end - stamp.cpu,
        "agent_steps": steps * seats,
        "live_agent_steps": live,
    }


def _nonstop_worker(conn: Any, ready: Any, map_size: int, actions: str) -> None:
    """A worker process of nonstop's side: a free run for each ``(steps, seed)`` it is sent, until None."""
    while True:
        order = conn.recv()
        if order is None:
            return
        steps, seed = order
        try:
            conn.send(nonstop_run(map_size, actions, steps, seed, ready=ready))
        except Exception as exc:  # said to the parent, which fails the bench with it
            ready.abort()
            conn.send(f"{type(exc).__name__}: {exc}")


class _NonstopSide:
    """``workers`` processes (spawned once), each running one nonstop session a repeat."""

    name = "nonstop"

    def __init__(self, workers: int, map_size: int, actions: str) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # as nonstop's own host processes: no forked copy of this one
        self.ready = ctx.Barrier(workers)
        self.conns, self.processes = [], []
        for i in range(workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_nonstop_worker,
                args=(child, self.ready, map_size, actions),
                name=f"nonstop-freerun-{i}",
                daemon=True,
            )
            p.start()
            self.conns.append(parent)
            self.processes.append(p)

    def run(self, steps: int, seed: int) -> dict[str, Any]:
        self.ready.reset()
        for i, conn in enumerate(self.conns):
            conn.send((steps, seed + i))
        runs = [conn.recv() for conn in self.conns]
        failed = [r for r in runs if isinstance(r, str)]
        if failed:
            raise RuntimeError(f"a nonstop worker failed: {failed[0]}")
        wall = max(r["end"] for r in runs) - min(r["start"] for r in runs)
        return _figures(
            sum(r["agent_steps"] for r in runs),
            sum(r["live_agent_steps"] for r in runs),
            wall,
            sum(r["cpu_s"] for r in runs),
        )

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for p in self.processes:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# ----------------------------------------------------------------------------- PufferLib's side


def _puffer_battle(map_size: int, buf: Any = None, seed: int = 0) -> Any:
    """Battle as PufferLib emulates a PettingZoo world (module level: PufferLib's workers build it)."""
    from pufferlib.emulation import PettingZooPufferEnv

    from nonstop.envs.magent import make_battle

    return PettingZooPufferEnv(env_creator=make_battle, env_kwargs={"map_size": map_size}, buf=buf, seed=seed)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far."""
    import psutil

    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


class _PufferSide:
    """``pufferlib.vector.Multiprocessing``: a world a worker, driven from this process (``serial``: PufferLib's
    ``Serial`` backend, every world stepped in this process, no handoff: the emulated worlds' own cost)."""

    def __init__(self, workers: int, map_size: int, actions: str, seed: int, serial: bool = False) -> None:
        import psutil
        import pufferlib.vector

        self.vector = pufferlib.vector
        self.overwork = workers > (psutil.cpu_count(logical=False) or 1)  # PufferLib refuses it otherwise
        if serial:
            self.vecenv = pufferlib.vector.make(
                partial(_puffer_battle, map_size), backend=pufferlib.vector.Serial, num_envs=workers, seed=seed
            )
        else:
            self.vecenv = pufferlib.vector.make(
                partial(_puffer_battle, map_size),
                backend=pufferlib.vector.Multiprocessing,
                num_envs=workers,
                num_workers=workers,
                batch_size=workers,
                overwork=self.overwork,
                seed=seed,
            )
        self.agents = int(self.vecenv.num_agents)
        self.processes = list(getattr(self.vecenv, "processes", []))
        self.pids = [os.getpid(), *(p.pid for p in self.processes)]
        self.actions, self.rng = actions, np.random.default_rng(seed)
        # once: a second reset after a step waits forever in 3.0.23 (its flush receives again the infos
        # `recv` already took), so the worlds run on from one repeat to the next, reset as episodes end
        pufferlib.vector.reset(self.vecenv, seed)

    def run(self, steps: int, seed: int) -> dict[str, Any]:
        vecenv, n, rng = self.vecenv, self.agents, self.rng
        noop = np.full(n, BATTLE_NOOP, np.int32)
        live = 0
        start, cpu0, workers0 = time.perf_counter(), _cpu_s(self.pids), _cpu_s(self.pids[1:])
        for _ in range(steps):
            vecenv.send(noop if self.actions == "noop" else rng.integers(0, BATTLE_ACTIONS, n, dtype=np.int32))
            *_, masks = vecenv.recv()
            live += int(np.count_nonzero(masks))
        wall, cpu = time.perf_counter() - start, _cpu_s(self.pids) - cpu0
        figures = _figures(steps * n, live, wall, cpu)
        if self.processes:  # its workers alone (the env, its emulation, their waits for the next action)
            figures["workers_cpu_us_per_agent_step"] = 1e6 * (_cpu_s(self.pids[1:]) - workers0) / (steps * n)
        return figures

    def close(self) -> None:
        self.vecenv.close()
        for p in self.processes:
            p.join(timeout=10)


# ----------------------------------------------------------------------------- the bench


def _figures(agent_steps: int, live: int, wall: float, cpu: float) -> dict[str, Any]:
    return {
        "agent_steps": agent_steps,
        "wall_s": wall,
        "agent_steps_per_s": agent_steps / wall,
        "live_agent_steps_per_s": live / wall,
        "cpu_us_per_agent_step": 1e6 * cpu / agent_steps,
    }


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def _sides(text: str) -> list[str]:
    sides = [s.strip() for s in text.split(",") if s.strip()]
    if not sides or any(s not in SIDES for s in sides) or len(set(sides)) != len(sides):
        raise ValueError(f"--sides takes any of {', '.join(SIDES)} (comma-separated), got {text!r}")
    return sides


def _require_pufferlib() -> str:
    """PufferLib's version, or a one-line ImportError saying how to install it (exit 2 at the CLI)."""
    try:
        import pufferlib.emulation
        import pufferlib.vector  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"bench freerun compares against PufferLib, which cannot be imported here ({exc}): "
            f"{PUFFERLIB_INSTALL}, or run nonstop's side alone with --sides nonstop"
        ) from None
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("pufferlib-core", "pufferlib"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.envs.magent import battle_agents

    sides = _sides(args.sides)
    try:
        agents = battle_agents(args.map_size)
    except ValueError as exc:
        raise ValueError(f"--map-size: {exc}") from None
    workers = args.workers if args.workers is not None else usable_cores()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"--workers must be a positive integer, got {workers!r}")
    sizes = run_sizes(args, _QUICK, _FULL)
    steps, repeats = int(sizes["steps"]), int(sizes["repeats"])
    puffer_version = _require_pufferlib() if set(sides) - {"nonstop"} else None
    made: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    try:
        if "pufferlib" in sides:  # first: its workers fork from this process before any other starts
            made["pufferlib"] = _PufferSide(workers, args.map_size, args.actions, args.seed)
        if "pufferlib-serial" in sides:
            made["pufferlib-serial"] = _PufferSide(workers, args.map_size, args.actions, args.seed, serial=True)
        if "nonstop" in sides:
            made["nonstop"] = _NonstopSide(workers, args.map_size, args.actions)
        for side in sides:  # untimed: each side's first steps pay its warm-up
            made[side].run(_WARMUP_STEPS, args.seed)
        for k in range(repeats):
            for side in sides if k % 2 == 0 else sides[::-1]:
                runs[side].append(made[side].run(steps, args.seed + k))
    finally:
        for side in made.values():
            side.close()
    result: dict[str, Any] = {
        "env": ENV,
        "map_size": args.map_size,
        "agents": agents,
        "workers": workers,
        "steps": steps,
        "repeats": repeats,
        "actions": args.actions,
        "sides": sides,
        "pufferlib_version": puffer_version,
        "pufferlib_overwork": made["pufferlib"].overwork if "pufferlib" in made else None,
        "load_average": list(os.getloadavg()),  # how much else ran beside it (this is a shared machine's figure)
    }
    for side in sides:
        result[side] = {key: _median(runs[side], key) for key in runs[side][0] if key not in ("agent_steps", "wall_s")}
        result[side]["runs"] = runs[side]
    ratio = None
    if "nonstop" in sides and "pufferlib" in sides:
        ratio = result["nonstop"]["agent_steps_per_s"] / result["pufferlib"]["agent_steps_per_s"]
        pairs = zip(runs["nonstop"], runs["pufferlib"])
        result["ratio_per_repeat"] = [a["agent_steps_per_s"] / b["agent_steps_per_s"] for a, b in pairs]
        result["ratio_cpu"] = result["pufferlib"]["cpu_us_per_agent_step"] / result["nonstop"]["cpu_us_per_agent_step"]
    if "nonstop" in sides and "pufferlib-serial" in sides:  # CPU against the emulated worlds' own, no handoff
        serial = result["pufferlib-serial"]["cpu_us_per_agent_step"]
        result["ratio_cpu_serial"] = serial / result["nonstop"]["cpu_us_per_agent_step"]
    result["ratio"] = ratio
    result["target"] = f"nonstop's agent-steps/s ≥ {TARGET_RATIO}× PufferLib's, in the same run"
    result["meets_target"] = None if ratio is None else bool(math.isfinite(ratio) and ratio >= TARGET_RATIO)
    return result


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console

    print(
        f"{result['env']} ({result['agents']} agents, {result['map_size']}x{result['map_size']}) free-running, "
        f"{result['workers']} worker(s) a side, {result['steps']} steps x {result['repeats']} repeats, "
        f"actions {result['actions']} (load average {result['load_average'][0]:.1f})"
    )
    print(f"{'side':>16} {'agent-steps/s':>14} {'alive/s':>12} {'CPU us/agent-step':>18}")
    for side in result["sides"]:
        r = result[side]
        print(
            f"{side:>16} {r['agent_steps_per_s']:>14,.0f} {r['live_agent_steps_per_s']:>12,.0f} "
            f"{r['cpu_us_per_agent_step']:>18.2f}"
        )
    if result["ratio"] is None:
        print("ratio: not compared (one side ran)")
        return
    judged = verdict(result["meets_target"], bool(result.get("quick")))
    Console().print(
        f"ratio nonstop/pufferlib {result['ratio']:.2f} (target ≥ {TARGET_RATIO}): {judged}", highlight=False
    )
