"""``nonstop bench seats``: how many seats of one world are acted for at every tick, one batching server
against one inference pool per seat (issue 32 item 6; docs/multi-agent.md).

The world is MAgent2's `multi/battle` at ``--tick-hz`` (20) on the **wall clock**, its host in a
process of its own, on the smallest map that holds the seat count (`nonstop.envs.magent.battle_map_for`:
its default 45×45, 162 agents, up to 162 seats; 115×115, 1,058 agents, for 1,000; issue 43). For each
seat count of ``--seats`` (2, 18, 81, 162) the first that many seats, alternately red and blue, are acted for by a small conv
policy (`nonstop.policies.gridconv.GridConv`, one θ per team, torch on one thread of this CPU); the
others keep β (stay). Each count runs twice in the same process, one after the other:

* ``server``: one `BatchingServer` (its L(b) timed here at b = 1 and b = the count before the run,
  then re-measured as it runs) with a lane per seat (`nonstop.inference.seatlanes.SeatLanes`,
  one driver thread for every seat, one forward pass per team per batch: `TeamForward`);
* ``pools``: one `InferencePool` per seat (one worker thread each, batch-of-one forward passes,
  the sequential scheduler), the composition docs/multi-agent.md showed before; up to 162 seats
  (`POOLS_MAX_SEATS`: past it the run is listed under ``skipped``, with why).

Reported per run, over the ticks after ``--warmup-s``, from the tick log: the seats acted for at
every tick (no inaction), inaction (worst and mean seat; absent ticks of dead agents excluded),
delay (mean and p99, ticks), the batch sizes formed, the forward passes' time per tick (ms of the
model's calls summed over a tick) and the host's lateness (p50, p99, ms). The judged figure:
``server`` at 162 seats holds every seat at ≤ 1 % inaction with lateness p99 < 2 ms
(``meets_target``); issue 43 asks the same of 1,000 seats (``--seats 1000``).

**How the forward fits the tick** (``forward_fit`` of each server run): a batch's passes (one a
team) timed on the wall, their p50/p99/max beside τ_M, the share of each tick they take, and what to
do where one batch outlasts a tick (staggered lanes, ``--lanes-per-seat`` ⌈batch/τ_M⌉, or a smaller
network). The CPU each tick costs: ``agents_cpu_ms_per_tick`` (this process: the lanes' driver, the
server, the model) and ``host_cpu_ms_per_tick`` (the world's host process: the env's step, every
seat's queue and slot, the tick log); ``load_average`` says how loaded the machine was. ``--clock virtual`` runs the same on the virtual clock with the forward's
time declared by ``--batch-curve`` (default: the H100 k=1 figures of docs/gpu.md, L(1) = 0.32 ms,
L(64) = 0.64 ms) and the pools' batch-of-one at L(1): what the same composition gives on that card.
There each pool's pass is declared as if it had the card to itself; ``device_busy_fraction`` (the
forward time a tick asks of one device, over τ_M) says whether one card could serve them at all.
On the wall clock, the pools' ``forward_ms_per_tick`` sums the wall time of passes that run at
once in threads (GIL waits included), so it can pass τ_M while the seats still act.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
from typing import Any

import numpy as np

from nonstop.bench.common import percentiles, verdict
from nonstop._console import Console

DESCRIPTION = "seats of multi/battle acted for at every tick: one batching server against a pool per seat"
ENV = "multi/battle"
DEFAULT_SEATS = "2,18,81,162"
QUICK_SEATS = "2,18"
#: H100, IMPALA ResNet k=1 (CUDA graph): b=1 0.32 ms, b=64 0.64 ms, as a line (docs/gpu.md)
DEFAULT_CURVE = "linear:0.315ms,0.005ms"
#: (measured seconds, warm-up seconds): full, quick
_SECONDS = ((20.0, 3.0), (3.0, 1.0))
TARGET_INACTION = 0.01
OBS_SHAPE = (13, 13, 5)  # battle's window of each agent
N_ACTIONS = 21
TARGET_LATENESS_P99_MS = 2.0
#: the most seats the pools baseline runs for: at 162 its threads already left 54-75 % of ticks to β and
#: spent 1.5 ticks of CPU a tick (docs/multi-agent.md); a thousand threads would measure only the machine
POOLS_MAX_SEATS = 162


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seats", default=None, help=f"seat counts acted for (default {DEFAULT_SEATS}; quick {QUICK_SEATS})"
    )
    parser.add_argument("--tick-hz", type=float, default=20.0, help="the world's tick rate (default 20)")
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per run (default 20; quick 3)")
    parser.add_argument(
        "--warmup-s", type=float, default=None, help="seconds left out at the start (default 3; quick 1)"
    )
    parser.add_argument("--mode", default="server,pools", help="what to run: server, pools or both (default both)")
    parser.add_argument("--clock", choices=("wall", "virtual"), default="wall", help="the world's clock (default wall)")
    parser.add_argument(
        "--batch-curve",
        default=DEFAULT_CURVE,
        help=f"virtual clock: the forward's declared L(b) (default {DEFAULT_CURVE}, the H100 k=1 figures)",
    )
    parser.add_argument(
        "--lanes-per-seat",
        type=int,
        default=1,
        help="server: N_I staggered lanes a seat (lane k from tick k; default 1)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--map-size",
        type=int,
        default=None,
        help="battle's map (default: the smallest holding the count, at least 45: battle_map_for)",
    )


def _counts(text: str) -> list[int]:
    from nonstop.envs.magent import BATTLE_MAX_MAP, battle_agents

    most = battle_agents(BATTLE_MAX_MAP)
    try:
        counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--seats takes comma-separated seat counts, got {text!r}") from None
    if not counts or any(not 1 <= n <= most for n in counts):
        raise ValueError(f"--seats: each count must be 1..{most} (battle's agents on its largest map), got {text!r}")
    return counts


def _driven(seats: list[str], n: int) -> list[str]:
    """The first ``n`` seats, alternately red and blue."""
    red = [s for s in seats if s.startswith("red_")]
    blue = [s for s in seats if s.startswith("blue_")]
    both = [s for pair in zip(red, blue) for s in pair]
    return both[:n]


class _TimedBatches:
    """The server's forward (a `TeamForward`), each batch's wall time and rows kept: how the forward fits the tick."""

    takes_lanes = True

    def __init__(self, forward: Any, stopwatch: Any) -> None:
        self.forward, self.stopwatch = forward, stopwatch
        self.seconds: list[float] = []
        self.rows: list[int] = []

    def __call__(self, batch: np.ndarray, lanes: Any) -> Any:
        t0 = self.stopwatch()
        out = self.forward(batch, lanes)
        self.seconds.append(self.stopwatch() - t0)
        self.rows.append(len(batch))
        return out


def _forward_fit(batches: _TimedBatches, tau_m: float, ticks: int) -> dict[str, Any]:
    """How a tick's batches (a team's pass each, or one batch of a pass a team) fit in a tick on this
    machine, and what to do where they do not: a round is the tick's batches, one after the other."""
    took = np.asarray(batches.seconds[1:] or batches.seconds, float)  # the first batch bears the warm-up
    if not took.size:
        return {"batches": 0}
    per_tick = len(batches.seconds) / max(ticks, 1)
    p50, p99 = float(np.median(took)), float(np.percentile(took, 99))
    round_p99 = max(1.0, round(per_tick)) * p99
    fits = round_p99 <= tau_m
    return {
        "tau_m_ms": 1e3 * tau_m,
        "batches": len(batches.seconds),
        "batches_per_tick": per_tick,
        "rows_mean": float(np.mean(batches.rows)),
        "batch_ms": percentiles(took, 1e3),
        "batch_ms_per_tick": 1e3 * float(np.sum(batches.seconds)) / max(ticks, 1),
        "round_ms_p99": 1e3 * round_p99,
        "share_of_tick_p99": round_p99 / tau_m,
        "fits": bool(fits),
        "how": (
            f"{per_tick:.1f} batches a tick of {np.mean(batches.rows):.0f} rows, each {1e3 * p50:.1f} ms "
            f"(p99 {1e3 * p99:.1f}): a round takes {1e3 * round_p99:.1f} ms of the {1e3 * tau_m:.0f} ms tick at p99"
            + (
                ""
                if fits
                else f"; it outlasts the tick: --lanes-per-seat {math.ceil(round_p99 / tau_m)} (staggered lanes) "
                "or a smaller network"
            )
        ),
    }


def _measured_curve(forwards: dict[str, Any], n: int, stopwatch: Any) -> Any:
    """The server's L(b) to start from, timed here before the run: a batch of one (one team's pass) and
    of all ``n`` seats (each team's pass on its share), the median of three; the server re-measures it."""
    from nonstop.inference.batchsize import LatencyCurve

    def timed(rows: dict[str, int]) -> float:
        runs = []
        for _ in range(3):
            t0 = stopwatch()
            for team, b in rows.items():
                forwards[team](np.zeros((b, *OBS_SHAPE), np.float32))
            runs.append(stopwatch() - t0)
        return float(np.median(runs))

    teams = list(forwards)
    table = {1: timed({teams[0]: 1})}
    if n > 1:
        table[n] = max(table[1], timed({team: -(-n // len(teams)) for team in teams}))  # past n: its slope
    return LatencyCurve.table(table)


def _cpu_seconds(pid: int | None) -> float | None:
    """A process's user + system CPU seconds (Linux's /proc), None where it cannot be read."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class _Timed:
    """A forward pass whose calls are timed (seconds summed), so the bench reports the model's time per tick."""

    def __init__(self, forward: Any, stopwatch: Any) -> None:
        self.forward, self.stopwatch = forward, stopwatch
        self.seconds, self.calls = 0.0, 0

    def __call__(self, batch: np.ndarray) -> Any:
        t0 = self.stopwatch()
        out = self.forward(batch)
        self.seconds += self.stopwatch() - t0
        self.calls += 1
        return out


def _team_models(obs_shape: tuple[int, ...], n_actions: int, seed: int) -> dict[str, Any]:
    import torch

    from nonstop.policies.gridconv import GridConv

    torch.set_num_threads(1)
    models = {}
    for k, team in enumerate(("red", "blue")):
        torch.manual_seed(seed * 2 + k)
        models[team] = GridConv(obs_shape, n_actions).eval()
    return models


def _numpy_forward(model: Any) -> Any:
    import torch

    def forward(batch: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model(torch.from_numpy(np.ascontiguousarray(batch))).argmax(dim=1).numpy()

    return forward


class _ModelPolicy:
    """A pool worker's policy: its team's model on a batch of one (the pools baseline)."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward

    def act(self, obs: np.ndarray) -> Any:
        from nonstop.policies.base import Decision

        return Decision(int(self.forward(obs[None])[0]))


class _DeclaredPolicy:
    """Virtual clock: the pools baseline's batch-of-one pass, declared to take L(1)."""

    def __init__(self, forward: Any, seconds: float) -> None:
        self.forward, self.seconds = forward, seconds

    def act(self, obs: np.ndarray) -> Any:
        from nonstop.policies.base import Decision

        return Decision(int(self.forward(obs[None])[0]), latency=self.seconds)


def _always(policy: Any) -> Any:
    """A pool's policy factory: every worker gets ``policy``."""

    def make(i: int) -> Any:
        return policy

    return make


class _Agents:
    """What drives the seats in one run: the pools or lanes, and the batching server they share."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.server: Any = None
        self.batches: Any = None

    def stop(self) -> None:
        for part in self.parts:
            part.stop()
        if self.server is not None:
            self.server.close()


def _one_run(mode: str, n: int, args: argparse.Namespace, seconds: float, warmup: float) -> dict[str, Any]:
    from nonstop.envs.magent import battle_map_for
    from nonstop.inference.batchsize import parse_curve
    from nonstop.realtime.clock import stopwatch
    from nonstop.realtime.host import Session

    virtual = args.clock == "virtual"
    models = _team_models(OBS_SHAPE, N_ACTIONS, args.seed)  # before the world ticks: importing torch takes seconds
    timed = {team: _Timed(_numpy_forward(m), stopwatch) for team, m in models.items()}
    for forward in timed.values():  # the first call of a model pays its warm-up, outside the measure
        forward.forward(np.zeros((1, *OBS_SHAPE), np.float32))
    map_size = args.map_size if args.map_size is not None else battle_map_for(n)
    world = Session(
        ENV,
        clock=args.clock,
        seed=args.seed,
        env_kwargs={"map_size": map_size, "max_cycles": 1_000_000, "tick_hz": args.tick_hz},
        default="noop",
    ).start()
    agents = _Agents()
    host = getattr(getattr(world, "_process", None), "pid", None)  # the host's process (None: it runs here)
    try:
        assert world.seats is not None
        seats = _driven(world.seats, n)
        space = world.observation_spaces[seats[0]]
        assert space.shape == OBS_SHAPE and getattr(world.action_spaces[seats[0]], "n", None) == N_ACTIONS, (
            "battle changed its spaces"
        )
        curve = parse_curve(args.batch_curve, tick_hz=args.tick_hz) if virtual else None
        if len(world.seats) < n:
            raise ValueError(f"--seats {n}: battle on a {map_size}x{map_size} map has {len(world.seats)} agents")
        _start_agents(agents, world, mode, seats, n, timed, curve, args)
        started = int(world.slots[-1].read().tick)  # the world ticked (β) while the agents started
        gc.freeze()  # what exists now (torch's objects, the world's) is never scanned again by the collector
        world.run_for(warmup)
        cpu0, host0, ticks0 = time.process_time(), _cpu_seconds(host), int(world.slots[-1].read().tick)
        world.run_for(seconds)
        cpu_s, host1 = time.process_time() - cpu0, _cpu_seconds(host)
        cpu_ticks = int(world.slots[-1].read().tick) - ticks0
        agents.stop()
        log = world.stop()
    finally:
        agents.stop()
        world.stop()
    assert log is not None
    warm_ticks = started + int(round(warmup * args.tick_hz))
    summary = log.summary(warmup_ticks=warm_ticks)
    lateness = log["lateness"][log["tick"] > warm_ticks]
    out: dict[str, Any] = {
        "mode": mode,
        "seats": n,
        "map_size": map_size,
        "agents": len(world.seats),
        **_seat_figures(summary, seats),
        "forward_ms_per_tick": 1e3 * sum(f.seconds for f in timed.values()) / max(len(log), 1),
        "forward_calls_per_tick": sum(f.calls for f in timed.values()) / max(len(log), 1),
        "lateness_ms": percentiles(lateness, 1e3),
        "lateness_p99_ms": float(np.percentile(lateness, 99) * 1e3) if lateness.size else float("nan"),
        "overruns": summary["overruns"],
        # CPU of this process (every agent thread, the server's, the model's) a tick: the world's host has its own
        "agents_cpu_ms_per_tick": 1e3 * cpu_s / max(cpu_ticks, 1),
        # the world's host process a tick: the env's step, every seat's queue and slot, the tick log
        "host_cpu_ms_per_tick": None if host0 is None or host1 is None else 1e3 * (host1 - host0) / max(cpu_ticks, 1),
        "load_average": list(os.getloadavg()),  # the machine's, at the run's end: how much else ran beside it
    }
    _add_forward_figures(out, curve, agents, timed, args, len(log))
    return out


def _start_agents(
    agents: _Agents,
    world: Any,
    mode: str,
    seats: list[str],
    n: int,
    timed: dict[str, Any],
    curve: Any,
    args: argparse.Namespace,
) -> None:
    """Start what drives ``seats`` into ``agents``: in ``server`` mode lanes of one batching server over
    both teams' models, else a sequential pool a seat (one model a team, called by each of its pools).
    ``curve``: the declared device of the virtual clock (None on the wall clock)."""
    from nonstop.inference.batching import BatchingServer
    from nonstop.envs.seats import team_of
    from nonstop.inference.seatlanes import SeatLanes, TeamForward
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.clock import stopwatch

    if mode == "server":
        team_forward = TeamForward(timed)
        agents.batches = _TimedBatches(team_forward, stopwatch)
        agents.server = BatchingServer(
            agents.batches,
            curve if curve is not None else _measured_curve(timed, n, stopwatch),
            clock=world.clock,
            # on this CPU a batch a team at most: the same passes as one batch of both (a θ each), and
            # red's actions go to their seats while blue's pass runs (torch releases the GIL); the
            # declared device of the virtual clock takes every seat in one batch
            max_batch=(n if curve is not None else max(-(-n // 2), 1)) * args.lanes_per_seat,
        )
        lanes = SeatLanes(
            world, agents.server, seats=seats, forward=team_forward, n_inference=args.lanes_per_seat, seed=args.seed
        )
        agents.parts.append(lanes.start())
        return
    for seat in seats:
        forward = timed[team_of(seat)]
        policy = (
            _DeclaredPolicy(forward, curve(1)) if curve is not None else _ModelPolicy(forward)
        )  # one model a team, called by every worker of the team's pools
        agents.parts.append(InferencePool(world, _always(policy), "sequential", seat=seat).start())


def _seat_figures(summary: dict[str, Any], seats: list[str]) -> dict[str, Any]:
    """The driven seats' actions after warm-up: who acted every tick, who died, inaction and delay."""
    per_seat = [summary["seats"][s] for s in seats]
    inaction = [s["inaction_fraction"] for s in per_seat if s["agent_ticks"] + s["inaction_ticks"]]
    delays: dict[int, int] = {}
    for s in per_seat:
        for d, c in s["delay_histogram"].items():
            delays[int(d)] = delays.get(int(d), 0) + int(c)
    delay_values = np.repeat(np.array(sorted(delays), float), [delays[d] for d in sorted(delays)])
    return {
        "ticks": summary["ticks"],
        "seats_acted_every_tick": sum(1 for s in per_seat if s["inaction_ticks"] == 0 and s["agent_ticks"]),
        "seats_died": sum(1 for s in per_seat if s["absent_ticks"]),
        "inaction_max": max(inaction) if inaction else float("nan"),
        "inaction_mean": float(np.mean(inaction)) if inaction else float("nan"),
        "delay_mean_ticks": float(delay_values.mean()) if delay_values.size else float("nan"),
        "delay_p99_ticks": float(np.percentile(delay_values, 99)) if delay_values.size else float("nan"),
    }


def _add_forward_figures(
    out: dict[str, Any], curve: Any, agents: _Agents, timed: dict[str, Any], args: argparse.Namespace, ticks: int
) -> None:
    """The forward passes' share of a tick (declared on the virtual clock) and the server's batches."""
    server, batches = agents.server, agents.batches
    if curve is not None:  # virtual: the forward's time is the declared one, the stand-in's CPU time beside it
        out["forward_cpu_ms_per_tick"] = out["forward_ms_per_tick"]
        passes = server.report()["batch_sizes"] if server is not None else {1: sum(f.calls for f in timed.values())}
        out["forward_ms_per_tick"] = 1e3 * sum(curve(b) * c for b, c in passes.items()) / max(ticks, 1)
    # the share of each tick one device (or one core) spends in forward passes: above 1, one cannot serve them
    out["device_busy_fraction"] = out["forward_ms_per_tick"] * args.tick_hz / 1e3
    if batches is not None and curve is None:
        out["forward_fit"] = _forward_fit(batches, 1 / args.tick_hz, ticks)
    if server is not None:
        report = server.report()
        out["batch_size_mean"] = report["batch_size_mean"]
        out["batch_sizes"] = {str(b): c for b, c in report["batch_sizes"].items()}
        out["late_answers"] = report["late"]
    else:
        out["batch_size_mean"] = 1.0 if out["forward_calls_per_tick"] else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        import magent2  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"bench seats runs MAgent2's battle ({exc}): pip install 'nonstop[magent]'") from exc
    counts = _counts(args.seats or (QUICK_SEATS if args.quick else DEFAULT_SEATS))
    map_size = getattr(args, "map_size", None)
    if map_size is not None:
        from nonstop.envs.magent import battle_agents

        try:
            agents = battle_agents(map_size)
        except ValueError as exc:
            raise ValueError(f"--map-size: {exc}") from None
        if max(counts) > agents:
            raise ValueError(f"--seats {max(counts)}: battle on a {map_size}x{map_size} map has {agents} agents")
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not modes or any(m not in ("server", "pools") for m in modes):
        raise ValueError(f"--mode takes server, pools or both (comma-separated), got {args.mode!r}")
    if isinstance(args.lanes_per_seat, bool) or args.lanes_per_seat < 1:
        raise ValueError(f"--lanes-per-seat must be at least 1, got {args.lanes_per_seat!r}")
    if not (args.tick_hz > 0 and math.isfinite(args.tick_hz)):
        raise ValueError(f"--tick-hz must be a positive rate, got {args.tick_hz!r}")
    seconds, warmup = _SECONDS[1 if args.quick else 0]
    seconds = args.seconds if args.seconds is not None else seconds
    warmup = args.warmup_s if args.warmup_s is not None else warmup
    if seconds <= 0 or warmup < 0:
        raise ValueError(f"--seconds must be positive and --warmup-s non-negative, got {seconds!r}, {warmup!r}")
    runs = [(mode, n) for n in counts for mode in modes]
    skipped = [
        {"mode": mode, "seats": n, "why": f"a pool a seat is a thread a seat: not run past {POOLS_MAX_SEATS} seats"}
        for mode, n in runs
        if mode == "pools" and n > POOLS_MAX_SEATS
    ]
    results = [_one_run(mode, n, args, seconds, warmup) for mode, n in runs if mode == "server" or n <= POOLS_MAX_SEATS]
    judged = next((r for r in results if r["mode"] == "server" and r["seats"] == max(counts)), None)
    meets = (
        judged is not None
        and judged["inaction_max"] <= TARGET_INACTION
        and judged["lateness_p99_ms"] < TARGET_LATENESS_P99_MS
    )
    return {
        "env": ENV,
        "clock": args.clock,
        "tick_hz": args.tick_hz,
        "seconds": seconds,
        "warmup_s": warmup,
        "batch_curve": args.batch_curve if args.clock == "virtual" else None,
        "lanes_per_seat": args.lanes_per_seat,
        "policy": "GridConv (87k parameters, one θ per team), torch on one thread",
        "map_size": args.map_size,
        "results": results,
        "skipped": skipped,
        "judged": {
            "seats": None if judged is None else judged["seats"],
            "target": f"server: inaction ≤ {TARGET_INACTION:.0%} for every seat, host lateness p99 < "
            f"{TARGET_LATENESS_P99_MS} ms",
            "inaction_max": None if judged is None else judged["inaction_max"],
            "lateness_p99_ms": None if judged is None else judged["lateness_p99_ms"],
            "forward_fit": None if judged is None else judged.get("forward_fit"),
            "load_average": None if judged is None else judged["load_average"],
        },
        "meets_target": bool(meets),
    }


def render(result: dict[str, Any]) -> None:
    print(f"{result['env']} at {result['tick_hz']:g} Hz, {result['clock']} clock, {result['seconds']:g} s measured")
    head = (
        f"{'seats':>5} {'mode':>6} {'every tick':>10} {'inaction max':>12} {'delay':>6} {'p99':>5} "
        f"{'batch':>6} {'fwd ms/tick':>11} {'late p99 ms':>11}"
    )
    print(head)
    for r in result["results"]:
        batch = r.get("batch_size_mean")
        print(
            f"{r['seats']:>5} {r['mode']:>6} {r['seats_acted_every_tick']:>10} {r['inaction_max']:>12.4f} "
            f"{r['delay_mean_ticks']:>6.2f} {r['delay_p99_ticks']:>5.1f} {batch if batch is None else round(batch, 1)!s:>6} "
            f"{r['forward_ms_per_tick']:>11.2f} {r['lateness_p99_ms']:>11.3f}"
        )
    for r in result["results"]:
        fit = r.get("forward_fit")
        if fit and fit.get("batches"):
            host = r.get("host_cpu_ms_per_tick")
            print(
                f"{r['seats']} seats: {fit['how']}; CPU a tick: agents {r['agents_cpu_ms_per_tick']:.1f} ms, host "
                f"{'?' if host is None else f'{host:.1f}'} ms (load average {r['load_average'][0]:.1f})"
            )
    for skip in result.get("skipped", []):
        print(f"{skip['seats']} seats, {skip['mode']}: skipped ({skip['why']})")
    judged = verdict(result["meets_target"], bool(result["quick"]))  # rich markup: for the terminal, not the JSON
    Console().print(f"judged: {result['judged']['target']}: {judged}", highlight=False)
