"""``nonstop bench lanes``: staggering on the device, the GPU analogue of N_I* (issue 22, item 3).

K worlds (``--worlds``, each `theory/inaction` at 60 Hz, world j starting j/K of a tick after world
0) share one `BatchingServer` whose batch of b takes L(b) virtual seconds (``--batch-curve``, the
grammar of `nonstop.inference.batchsize.parse_curve`). Every world runs an `InferencePool` of N
request lanes under one scheduler. For each scheduler the bench scans N = 1, 2, … (``--max-lanes``)
and reports the smallest N with inaction at most ``--max-inaction`` in every world after warm-up,
the delay paid there (mean and p99, ticks), the server's late answers and the batch sizes it formed,
and what the paper's formula says:

* ``formula_batch``: ⌈L(b̄)/τ_M⌉ at the mean batch b̄ the server formed at N (the forward pass alone);
* ``formula_tau``: ⌈τ_θmax/τ_M⌉ with τ_θ the lanes' measured queue + batch time (Algorithm 1 with the
  τ_θ the device really gives a lane): a request can wait for the running batch before its own;
* ``formula_tau_mean``: ⌈τ̄_θ/τ_M⌉ with the mean of that τ_θ (Algorithm 2's count); the measured N
  lies between the two, as it does for a variable τ_θ on CPU workers;
* ``consistent``: the scan agrees with ``device_keeps_up`` (where the device keeps up, quantile_hold
  reaches the target; where it does not, no scheduler does); ``meets_target``: some scheduler held
  every world at ``--max-inaction`` (a slow device's run is consistent and misses the target);
  ``worlds_served``: the most worlds one scheduler held there at one N;
* ``device_keeps_up``: some batch b ≤ ``--max-batch`` has L(b) ≤ b·τ_M/K. The server runs one batch at
  a time and every world asks once a tick, so it must answer K requests a tick: a batch of b must
  take at most the b/K ticks its requests arrive in. ``steady_batch`` is the smallest such b, the
  batch staggered lanes settle on; with L(b) = A + C·b it exists iff C·K < τ_M. Where none does, no N
  brings inaction to zero. A batch longer than a tick is no obstacle where it holds: lanes pipeline
  over it (a world's next request waits in the queue while the batch runs), at more delay.

The model is a stand-in (a numpy forward returning action 0: the timing is the curve's). The search
is a scan, not a bisection: with lanes inaction is not monotone in N (exp_time's lanes of one world
ride one batch together and stay in lockstep, so more lanes do not help it), so every N up to the
first pass is run, and N + 1 as well to show whether zero holds past it.

Default curve: the H100 k = 29 bf16 figures of ``/work/shared/BENCHMARKS.md`` (CUDA graph, b = 1:
1.1 ms, b = 64: 16.1 ms) as a line, L(b) = 0.86 ms + 0.238 ms·b. It keeps up with 64 worlds at 60 Hz
(L(64) = 0.97 tick) but not with 70.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from nonstop.bench.common import machine_info

DESCRIPTION = (
    "K worlds × N request lanes on one batching server: fewest lanes per world with no inaction, per scheduler"
)
ENV = "theory/inaction"
TICK_HZ = 60.0
#: H100, IMPALA ResNet k = 29, bf16, CUDA graph: L(1) = 1.1 ms, L(64) = 16.1 ms, as a line
DEFAULT_CURVE = "linear:0.862ms,0.238ms"
DEFAULT_SCHEDULERS = "quantile_hold,exp_time,fill,max_time,unstaggered"
#: (warm-up ticks, measured ticks): full, quick
_TICKS = ((120, 600), (60, 120))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--worlds", type=int, default=8, help="worlds sharing the server (default 8)")
    parser.add_argument(
        "--batch-curve",
        default=DEFAULT_CURVE,
        help=f"L(b): linear:A,C or table:b=T,... with units (ms, s, t = ticks at 60 Hz; "
        f"default {DEFAULT_CURVE}, the H100 k=29 bf16 figures)",
    )
    parser.add_argument(
        "--scheduler", default=DEFAULT_SCHEDULERS, help=f"comma-separated schedulers (default {DEFAULT_SCHEDULERS})"
    )
    parser.add_argument("--max-batch", type=int, default=64, help="largest batch the server forms (default 64)")
    parser.add_argument(
        "--max-lanes", type=int, default=None, help="lanes per world the scan stops at (default 12; quick 6)"
    )
    parser.add_argument(
        "--max-inaction",
        type=float,
        default=0.0,
        help="inaction fraction allowed in every world after warm-up (default 0)",
    )
    parser.add_argument("--seed", type=int, default=0)


def trial(
    *,
    scheduler: str,
    n: int,
    curve_spec: str,
    worlds: int,
    max_batch: int,
    seed: int,
    warmup_ticks: int,
    window_ticks: int,
) -> dict[str, Any]:
    """K worlds × ``n`` lanes under ``scheduler`` on one virtual server; the figures after warm-up."""
    from nonstop.inference.batching import BatchingServer
    from nonstop.inference.batchsize import parse_curve
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.clock import VirtualClock
    from nonstop.realtime.host import Session

    tau_m = 1.0 / TICK_HZ
    clock = VirtualClock()

    def forward(batch: np.ndarray) -> np.ndarray:
        return np.zeros(len(batch), dtype=np.int64)  # the stand-in model: its timing is the curve's

    server = BatchingServer(forward, parse_curve(curve_spec, tick_hz=TICK_HZ), clock=clock, max_batch=max_batch)
    sessions = []
    for j in range(worlds):  # out of phase: sessions start when they start
        clock.run_until(j * tau_m / worlds)
        sessions.append(Session(ENV, clock=clock, seed=seed * 1000 + j).start())

    def lanes(world: Any) -> Any:
        return lambda i: server.lane(world.action_space, tau_m=world.tau_m, origin=world.origin)

    pools = [InferencePool(w, lanes(w), scheduler, n_inference=n).start() for w in sessions]
    try:
        clock.run_until((worlds - 1) * tau_m / worlds + (warmup_ticks + window_ticks + 1) * tau_m)
    finally:
        for pool in pools:
            pool.stop()
        server.close()
    inaction: list[float] = []
    delay_mean: list[float] = []
    delays: list[np.ndarray] = []
    taus: list[float] = []
    for world in sessions:
        end = int(world.slot.read().tick)
        s = world.tick_log.summary(warmup_ticks=warmup_ticks, end_tick=end)
        inaction.append(float(s["inaction_fraction"]))
        delay_mean.append(float(s["delay_mean_ticks"]))
        log = world.tick_log
        keep = (log["tick"] > warmup_ticks) & (log["tick"] <= end) & (log["source"] == 1)
        delays.append(np.asarray(log["delay"][keep], dtype=float))
    for pool in pools:
        taus.extend(t for w in pool.workers for t in w.tau_thetas)
    deaths = sum(sum(p.report()["deaths"]) for p in pools)
    for world in sessions:
        world.stop()
    report = server.report()
    all_delays = np.concatenate(delays) if delays else np.zeros(0)
    tau_arr = np.array(taus, dtype=np.float64) / tau_m
    return {
        "inaction_max": max(inaction),
        "inaction_mean": float(np.mean(inaction)),
        "inaction_by_world": inaction,
        "delay_mean_ticks": float(all_delays.mean()) if all_delays.size else None,
        "delay_p99_ticks": float(np.percentile(all_delays, 99)) if all_delays.size else None,
        "tau_theta_mean_ticks": float(tau_arr.mean()) if tau_arr.size else None,
        "tau_theta_max_ticks": float(tau_arr.max()) if tau_arr.size else None,
        "requests": report["requests"],
        "late": report["late"],
        "late_fraction": report["late"] / report["requests"] if report["requests"] else 0.0,
        "late_by_max_ticks": report["late_by_max_s"] / tau_m,
        "batches": report["batches"],
        "batch_size_mean": report["batch_size_mean"],
        "batch_sizes": {str(b): c for b, c in report["batch_sizes"].items()},
        "deaths": deaths,
    }


def _ceil_ticks(x: float) -> int:
    return max(1, math.ceil(x - 1e-9))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.inference.batchsize import parse_curve
    from nonstop.inference.schedulers import SCHEDULER_NAMES

    quick = bool(getattr(args, "quick", False))
    schedulers = [s.strip() for s in args.scheduler.split(",") if s.strip()]
    unknown = [s for s in schedulers if s not in SCHEDULER_NAMES]
    if unknown or not schedulers:
        raise ValueError(f"--scheduler: unknown {unknown}; valid names are {', '.join(SCHEDULER_NAMES)}")
    if args.worlds < 1:
        raise ValueError(f"--worlds must be >= 1, got {args.worlds}")
    if not 0.0 <= args.max_inaction < 1.0:
        raise ValueError(f"--max-inaction must be in [0, 1), got {args.max_inaction}")
    curve = parse_curve(args.batch_curve, tick_hz=TICK_HZ)  # a bad spec fails here, before any run
    tau_m = 1.0 / TICK_HZ
    max_lanes = args.max_lanes or (6 if quick else 12)
    warmup, window = _TICKS[1 if quick else 0]
    k_batch = min(args.worlds, args.max_batch)
    steady = next((b for b in range(1, args.max_batch + 1) if curve(b) <= b * tau_m / args.worlds * (1 + 1e-9)), None)
    keeps_up = steady is not None
    rows: list[dict[str, Any]] = []
    for name in schedulers:
        nstar, trials = _scan(args, name, max_lanes, warmup, window)
        rows.append(_row(args, name, nstar, trials, max_lanes, curve, tau_m))
    by = {r["scheduler"]: r for r in rows}
    hold = by.get("quantile_hold")
    reached = [r for r in rows if r["nstar_lanes"] is not None]
    # the device's throughput decides whether any N works: where it keeps up quantile_hold gets there,
    # where it does not no scheduler does. That agreement is what `consistent` says; `meets_target` says
    # whether the target itself was met: some scheduler held every world at --max-inaction
    consistent = (not reached) if not keeps_up else (hold is None or hold["nstar_lanes"] is not None)
    return {
        "env": ENV,
        "clock": "virtual",
        "tick_hz": TICK_HZ,
        "worlds": args.worlds,
        "batch_curve": args.batch_curve,
        "curve_ticks": {str(b): curve(b) / tau_m for b in sorted({1, 2, 4, 8, k_batch, args.max_batch})},
        "max_batch": args.max_batch,
        "max_inaction": args.max_inaction,
        "max_lanes": max_lanes,
        "warmup_ticks": warmup,
        "window_ticks": window,
        "device_keeps_up": keeps_up,
        "steady_batch": steady,
        "L_steady_ticks": curve(steady) / tau_m if steady is not None else None,
        "L_of_worlds_ticks": curve(k_batch) / tau_m,
        "rows": rows,
        "quantile_hold_nstar": hold["nstar_lanes"] if hold else None,
        "quantile_hold_delay_mean_ticks": hold["delay_mean_ticks"] if hold else None,
        "schedulers_reaching_zero": [r["scheduler"] for r in reached],
        "consistent": bool(consistent),
        "meets_target": bool(reached),
        "worlds_served": max(r["worlds_served"] for r in rows),
        "machine": machine_info(),
    }


def _scan(
    args: argparse.Namespace, name: str, max_lanes: int, warmup: int, window: int
) -> tuple[int | None, dict[int, dict[str, Any]]]:
    """The fewest lanes (1, 2, ... up to ``max_lanes``) at which ``name`` holds every world at
    --max-inaction, and each trial's figures (one more lane past it: does zero hold?)."""

    def one(n: int) -> dict[str, Any]:
        return trial(
            scheduler=name,
            n=n,
            curve_spec=args.batch_curve,
            worlds=args.worlds,
            max_batch=args.max_batch,
            seed=args.seed,
            warmup_ticks=warmup,
            window_ticks=window,
        )

    trials: dict[int, dict[str, Any]] = {}
    nstar = None
    for n in range(1, max_lanes + 1):
        trials[n] = one(n)
        if trials[n]["inaction_max"] <= args.max_inaction:
            nstar = n
            break
    if nstar is not None:  # does zero hold one lane on?
        trials[nstar + 1] = one(nstar + 1)
    return nstar, trials


def _row(
    args: argparse.Namespace,
    name: str,
    nstar: int | None,
    trials: dict[int, dict[str, Any]],
    max_lanes: int,
    curve: Any,
    tau_m: float,
) -> dict[str, Any]:
    """One scheduler's lanes needed beside the two formulas (the batch's latency, the τ_θ seen)."""
    at = trials[nstar] if nstar is not None else trials[max_lanes]
    b_mean = at["batch_size_mean"] or 1.0
    formula_batch = _ceil_ticks(curve(max(1, math.ceil(b_mean - 1e-9))) / tau_m)
    formula_tau = _ceil_ticks(at["tau_theta_max_ticks"]) if at["tau_theta_max_ticks"] is not None else None
    formula_mean = _ceil_ticks(at["tau_theta_mean_ticks"]) if at["tau_theta_mean_ticks"] is not None else None
    above = trials.get(nstar + 1) if nstar is not None else None
    return {
        "scheduler": name,
        "nstar_lanes": nstar,
        "nstar_above": None if nstar is not None else max_lanes,  # still inaction at this many lanes
        "formula_batch": formula_batch,
        "formula_tau": formula_tau,
        "formula_tau_mean": formula_mean,
        "matches_formula_tau": nstar is not None and nstar == formula_tau,
        "between_formulas": nstar is not None
        and formula_mean is not None
        and formula_tau is not None
        and formula_mean <= nstar <= formula_tau,
        "holds_at_n_plus_1": None if above is None else above["inaction_max"] <= args.max_inaction,
        "inaction_at_nstar": at["inaction_max"],
        "inaction_at_nstar_minus_1": trials[nstar - 1]["inaction_max"] if nstar is not None and nstar > 1 else None,
        "delay_mean_ticks": at["delay_mean_ticks"],
        "delay_p99_ticks": at["delay_p99_ticks"],
        "tau_theta_mean_ticks": at["tau_theta_mean_ticks"],
        "tau_theta_max_ticks": at["tau_theta_max_ticks"],
        "late": at["late"],
        "late_fraction": at["late_fraction"],
        "requests": at["requests"],
        "batch_size_mean": at["batch_size_mean"],
        "batch_sizes": at["batch_sizes"],
        "deaths": at["deaths"],
        "trials": {str(n): r["inaction_max"] for n, r in sorted(trials.items())},
        # the most worlds held at --max-inaction at one N of the scan (all of them where nstar_lanes is set)
        "worlds_served": max(sum(x <= args.max_inaction for x in r["inaction_by_world"]) for r in trials.values()),
    }


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    def num(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    title = (
        f"lanes per world with no inaction — {result['worlds']} worlds, L(b) {result['batch_curve']}, "
        f"L({min(result['worlds'], result['max_batch'])}) = {result['L_of_worlds_ticks']:.2f} tick"
    )
    table = Table(title=title)
    for col in (
        "scheduler",
        "N lanes",
        "⌈L(b̄)/τ_M⌉",
        "⌈τ̄_θ/τ_M⌉",
        "⌈τ_θmax/τ_M⌉",
        "inaction at N",
        "at N−1",
        "at N+1 holds",
        "delay mean",
        "delay p99",
        "late",
        "batch mean",
    ):
        table.add_column(col, justify="right")
    for r in result["rows"]:
        measured = str(r["nstar_lanes"]) if r["nstar_lanes"] is not None else f"> {r['nstar_above']}"
        table.add_row(
            r["scheduler"],
            measured,
            str(r["formula_batch"]),
            num(r["formula_tau_mean"], "d"),
            num(r["formula_tau"], "d"),
            f"{r['inaction_at_nstar']:.2%}",
            "—" if r["inaction_at_nstar_minus_1"] is None else f"{r['inaction_at_nstar_minus_1']:.2%}",
            "—" if r["holds_at_n_plus_1"] is None else ("yes" if r["holds_at_n_plus_1"] else "no"),
            num(r["delay_mean_ticks"], ".2f"),
            num(r["delay_p99_ticks"], ".0f"),
            f"{r['late']}/{r['requests']}",
            num(r["batch_size_mean"], ".1f"),
        )
    Console().print(table)
    steady = result["steady_batch"]
    keeps = f"yes, steady batch {steady}: L = {result['L_steady_ticks']:.2f} tick" if steady else "no"
    print(
        f"device keeps up (some L(b) ≤ b·τ_M/K): {keeps}; consistent with it: {result['consistent']}; "
        f"worlds served at the target: {result['worlds_served']} of {result['worlds']} (meets_target: {result['meets_target']})"
    )
