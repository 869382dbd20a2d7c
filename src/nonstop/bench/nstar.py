"""``nonstop bench nstar``: measured N_I* against theory, per inference time and latency spread.

For each mean τ̄_θ (in ticks) and latency distribution (``--latency constant | normal | lognormal |
empirical:FILE``, spread ``--sigma``, a comma list sweeps it) it searches, by galloping from the
formula and bisecting (`nonstop.metrics.nstar.find_nstar`; inaction is near-monotone in N_I), the
smallest N_I whose inaction over a measurement window after warm-up is at most ``--max-inaction``,
running the workers for real on the chosen clock. Each row reports, per scheduler:

* ``nstar_measured``;
* ``nstar_formula``: the paper's ⌈τ_θmax/τ_M⌉ (Algorithm 1, τ_θmax measured at N_I*) or
  ⌈τ̄_θ/τ_M⌉ (Algorithm 2); for ``quantile_hold`` the in-flight count ⌈E[B] + z·sd[B]⌉ its
  `AutoScheduler` aims at, from 200 000 draws of the distribution;
* ``lower_bound``: ⌈τ̄_θ/τ_M⌉, below which no scheduler can act every tick (each action needs a
  τ_θ of some worker's time, on average τ̄_θ);
* the delay the scheduler pays there (mean and p99 ticks): ``quantile_hold`` trades delay (a high
  quantile of τ_θ) for workers;
* ``return``: what that trade earns, at N_I* (or the workers ``auto`` chose), measured on the virtual
  clock with the same τ_θ distribution by `nonstop.bench.returns`: the reward per tick (mean, spread
  over ``--return-seeds`` seeds, standard error) of the best observed-state policy and Equation 1's
  split of its regret (inaction and delay, against the world's optimum and against the same policy
  undelayed), on ``theory/delay-cycle`` at ``--return-p`` (delay costs) and on ``theory/still``
  (it does not). N_I* alone ranks quantile_hold first; the return on a world that drifts does not.

Variable latencies get a long warm-up (3 × the 99.9 % point of τ_θ plus 4096 ticks, so running
estimates such as Algorithm 1's maximum and quantile_hold's quantile have settled) and a long
window (0.5 % of 240 ticks would be one tick), the same for every scheduler. With several σ a
second figure plots N_I* against σ per scheduler beside the bound.

On the wall clock the workers are threads of this process (latency policies sleep, they use no
CPU), the host runs in its own process at SCHED_FIFO where permitted, and the pool aligns each
inference to a tick's publish (`InferencePool` ``align_to_ticks``). Each trial's window ends when
the agents are stopped, and the result records the machine's load average before and after: on
a shared machine the wall-clock figures are only as good as the quiet they were measured in.

With ``--backend ray`` every worker is a Ray actor, one Python process that takes seconds to
start: the actors of one latency are kept across its trials and schedulers (`WarmRayActors`: a
trial of N borrows actors 0..N−1, starting the missing ones together). The remote call's overhead
tail can still leave inaction above the threshold at any N_I on a loaded machine, where the
doubling search would go on to hundreds of actors, so the search runs under ``--time-budget`` (default for Ray: 120 s quick, 1200 s full; none for
threads): past it no new trial starts (each row still gets its first), and a row cut short says
``budget_exhausted`` with what its trials showed (``nstar_above``: the most workers that still
left inaction; ``nstar_at_most``: the fewest that passed, not proven smallest).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any


from nonstop.bench.common import machine_info, parse_positive_list
from nonstop.bench.nstarparts import (
    FORWARD_JITTER,
    STARTED,
    parse_epsilons,
    parse_jitters,
    in_flight_workers,
    initial_estimate,
    make_latency,
    parse_starts,
    start_label,
    workers_for_inaction,
)
from nonstop.bench.nstartrial import TRIAL_ENV, WarmRayActors, trial
from nonstop.metrics.nstar import NStarAboveLimit, find_nstar, max_inaction_threshold, theoretical_nstar

DESCRIPTION = (
    "measured N_I* (fewest workers with no inaction) vs the paper's formulas and the bound, per latency (Fig. 7)"
)
ENV = TRIAL_ENV
LATENCY_KINDS = ("constant", "normal", "lognormal", "egreedy", "empirical:FILE")
#: kinds whose ``--sigma`` is a spread the rows carry (egreedy: ε)
_SPREAD_KINDS = ("normal", "lognormal", "egreedy")
#: ticks of warm-up beyond 3 × the 99.9 % point of τ_θ, for variable latency (full, quick)
_SETTLE_TICKS = (4096, 1500)
#: measured ticks for variable latency (full, quick)
_WINDOW_TICKS = (4000, 1500)
DEFAULT_SCHEDULERS = "max_time,exp_time,quantile_hold"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clock", choices=("virtual", "wall"), default="virtual")
    parser.add_argument(
        "--scheduler",
        default=DEFAULT_SCHEDULERS,
        help=f"comma-separated schedulers (default {DEFAULT_SCHEDULERS}; also unstaggered)",
    )
    parser.add_argument(
        "--tau-theta",
        default=None,
        help="mean inference times in ticks, comma-separated (default: constant 1,2,5,8,70,600 "
        "virtual, 1,5,8,70 wall; variable 5,8,20,70, quick 5)",
    )
    parser.add_argument(
        "--latency",
        default="constant",
        help="constant | normal (std = sigma·mean) | lognormal (log-spread sigma, mean = τ_θ) | "
        "egreedy (Figure 7: an ε-greedy policy, ε = sigma: a random action w.p. ε takes 1 %% of "
        "the forward pass, which jitters by 1 %%; mean = τ_θ) | "
        "empirical:FILE (one measured seconds value per line; its shape rescaled to each mean, "
        "or its own mean without --tau-theta)",
    )
    parser.add_argument(
        "--sigma",
        default="0.5",
        help="spread: lognormal sigma or normal coefficient of variation; a comma list sweeps it "
        "and plots N_I* against sigma (default 0.5)",
    )
    parser.add_argument(
        "--max-inaction",
        type=float,
        default=None,
        help="inaction fraction allowed after warm-up (default: 0 on the virtual clock with constant "
        "latency, else 0.5%% capped at 1/(4·theory))",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=None,
        help="measurement window in cycles of τ_θ for constant latency (default 4, and on the wall "
        "clock at least 3 / the inaction threshold ticks, so that one missed tick does not decide a "
        "trial); variable latency measures 4000 ticks (quick 1500)",
    )
    parser.add_argument(
        "--max-workers",
        type=float,
        default=64,
        help="search cap, as a multiple of the lower bound ⌈τ̄/τ_M⌉ (at least 256 workers; default 64): "
        "a scheduler that still leaves inaction there is reported as needing more (Algorithm 1 under "
        "heavy tails needs thousands)",
    )
    parser.add_argument(
        "--tau-theta-max",
        default="declared",
        help="how Algorithms 1 and 2 start, a comma list of: declared (default: as the authors start "
        "them, from the latency policy's declared maximum, their t_theta_max: Algorithm 1's τ̂max, "
        "Algorithm 2's estimate the declared mean, the workers staggered by it over N), cold (from 0, "
        "no stagger: the paper's pseudo-code read literally), or a number of ticks (Algorithm 1's τ̂max "
        "and both stagger by it); each start is its own row",
    )
    parser.add_argument(
        "--jitter",
        default=None,
        help="with --latency egreedy: the forward pass's log-spread, a comma list (default 0.01; "
        "each a row set, e.g. 0.001,0.01,0.05)",
    )
    parser.add_argument(
        "--at-workers",
        default=None,
        metavar="N,N",
        help="no search: each row measures the inaction at these worker counts (its trials), e.g. "
        "Algorithms 1 and 2 at the same N on both clocks",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--backend",
        default="thread",
        metavar="thread|ray",
        help="where each worker's policy runs on the wall clock: thread (default) or ray (a Ray actor, "
        "spread over the cluster's nodes; theory then counts the measured τ_θ, remote overhead included)",
    )
    parser.add_argument("--ray-address", default=None, metavar="HOST:PORT", help="Ray cluster (default: a local Ray)")
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="with --backend ray and no --ray-address: nodes of the local cluster started on this "
        "machine (127.0.0.1, each actor pinned to the least filled node; default 1: one local Ray)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall seconds for the whole search: past it no new trial starts (default: 120 quick, "
        "1200 full with --backend ray, where every worker is an actor to start; none for threads)",
    )
    parser.add_argument(
        "--return-p",
        type=float,
        default=0.97,
        help="stay probability of the delay-cycle world each row's return is measured on (default 0.97)",
    )
    parser.add_argument(
        "--return-seeds",
        type=int,
        default=None,
        help="seeds for each row's return (default 2; quick 1; 0: no return measured)",
    )
    parser.add_argument(
        "--return-seconds",
        type=float,
        default=None,
        help="measured world seconds per return run (default 60; quick 20)",
    )
    parser.add_argument("--plot", default="runs/nstar.png", help="where to write the figure ('' for none)")


def _returns(
    args: argparse.Namespace, name: str, n: int | str | None, latency: Any, warmup: int
) -> dict[str, Any] | None:
    """The row's return in the two worlds (`nonstop.bench.returns.returns_in_two_worlds`), at ``n`` workers;
    None without a measured N_I* or with ``--return-seeds 0``."""
    from nonstop.bench.returns import returns_in_two_worlds

    quick = bool(getattr(args, "quick", False))
    n_seeds = getattr(args, "return_seeds", None)
    n_seeds = (1 if quick else 2) if n_seeds is None else n_seeds
    seconds = getattr(args, "return_seconds", None) or (20.0 if quick else 60.0)
    if n is None or n_seeds < 1:
        return None
    return returns_in_two_worlds(
        name,
        n,
        latency,
        p_minimax=getattr(args, "return_p", 0.97),
        seeds=[args.seed + i for i in range(n_seeds)],
        warmup_ticks=warmup,
        window_ticks=int(round(seconds * 60)),
    )


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.distributed.backends import check_backend

    backend = getattr(args, "backend", "thread")
    ray_address = getattr(args, "ray_address", None)
    if backend not in ("thread", "ray"):
        raise ValueError(f"bench nstar runs latency policies on backend 'thread' or 'ray', got {backend!r}")
    check_backend(backend, ray_address=ray_address, clock=args.clock)
    nodes = getattr(args, "nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"--nodes must be an integer >= 1, got {nodes!r}")
    if nodes > 1 and (backend != "ray" or ray_address is not None):
        raise ValueError(f"--nodes {nodes} starts a local Ray cluster: it needs --backend ray and no --ray-address")
    if backend == "ray":
        from contextlib import ExitStack

        from nonstop.distributed.ray_backend import local_cluster, ray_session

        with ExitStack() as stack:
            if nodes > 1:
                # the actors reserve no CPU (a latency policy sleeps); a node's CPU count also caps how
                # many worker processes its raylet starts at once, so each node declares its share of
                # this machine's cores: 70 actors start 8 at a time per node on 16 cores, not one by one
                cpus = max(1, (os.cpu_count() or 2) // nodes)
                cluster = stack.enter_context(local_cluster(nodes, num_cpus=cpus))
                cluster_info = {"local": True, "nodes": nodes, "cpus_per_node": cpus, "address": cluster.address}
            else:
                ray = stack.enter_context(ray_session(ray_address))
                cluster_info = {
                    "local": ray_address in (None, "local"),
                    "address": ray_address,
                    "nodes": sum(1 for n in ray.nodes() if n.get("Alive")),
                }
            warm = WarmRayActors()  # one set of actors for every trial of a latency, not one per trial
            try:
                result = _run(args, backend, warm)
            finally:
                warm.close()
            result["ray_actors_started"] = warm.started
            result["cluster"] = cluster_info
            result["actors_per_node"] = warm.per_node
    else:
        result = _run(args, backend)
    result["backend"] = backend
    return result


class _OutOfTime(Exception):
    """The search stops early: the `--time-budget` is spent, or (``reason``) a Ray trial could not
    run; ``results`` holds the row's trials so far."""

    def __init__(self, results: dict[int, Any], reason: str | None = None) -> None:
        super().__init__(reason or "time budget spent")
        self.results, self.reason = results, reason


#: resident memory of one Ray actor holding a latency policy (a Ray worker process: ~150 MiB seen), with room
RAY_ACTOR_BYTES = 200 * 2**20


def _local_actor_cap() -> int | None:
    """How many latency-policy actors this machine's available memory holds (80 % of MemAvailable
    over `RAY_ACTOR_BYTES`), for a Ray cluster started on it; None where /proc/meminfo is absent."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    return max(1, int(0.8 * available / RAY_ACTOR_BYTES))


def _run(args: argparse.Namespace, backend: str, warm: WarmRayActors | None = None) -> dict[str, Any]:
    from nonstop.envs.theory import THEORY_TICK_HZ
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.policies import Empirical
    from nonstop.realtime.clock import stopwatch

    budget = getattr(args, "time_budget", None)
    if budget is None and backend == "ray":
        budget = 120.0 if getattr(args, "quick", False) else 1200.0
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise ValueError(f"--time-budget must be a positive number of seconds, got {budget}")
    started = stopwatch()
    deadline = started + budget if budget is not None else math.inf

    schedulers = [s.strip() for s in args.scheduler.split(",") if s.strip()]
    return_seeds = getattr(args, "return_seeds", None)
    if return_seeds is not None and (
        isinstance(return_seeds, bool) or not isinstance(return_seeds, int) or return_seeds < 0
    ):
        raise ValueError(f"--return-seeds must be an int >= 0, got {return_seeds!r}")
    if return_seeds != 0:
        from nonstop.envs.theory import check_delay_cycle_args

        check_delay_cycle_args(64, getattr(args, "return_p", 0.97))  # the return's world: fails before any run
    for name in schedulers:
        make_scheduler(name, 1 if name == "sequential" else 2)  # unknown names fail here, before any run
    kind, empirical = args.latency.strip(), None
    if kind.startswith("empirical:"):
        empirical = Empirical.from_file(kind.partition(":")[2].strip())
        kind = "empirical"
    elif kind not in ("constant", "normal", "lognormal", "egreedy"):
        raise ValueError(f"--latency must be one of {', '.join(LATENCY_KINDS)}, got {args.latency!r}")
    starts = parse_starts(getattr(args, "tau_theta_max", "declared"))
    at_text = getattr(args, "at_workers", None)
    at_workers = [] if at_text is None else [int(n) for n in parse_positive_list(str(at_text), "--at-workers")]
    if at_text is not None and any(
        n != float(x) for n, x in zip(at_workers, parse_positive_list(str(at_text), "--at-workers"))
    ):
        raise ValueError(f"--at-workers takes worker counts >= 1, got {at_text!r}")
    jitter_text = getattr(args, "jitter", None)
    if jitter_text is not None and kind != "egreedy":
        raise ValueError(f"--jitter is the forward pass's spread of --latency egreedy, not of {kind!r}")
    jitters = [FORWARD_JITTER] if jitter_text is None else parse_jitters(str(jitter_text))
    if kind == "egreedy":
        sigmas = parse_epsilons(str(args.sigma))
    else:
        sigmas = parse_positive_list(str(args.sigma), "--sigma") if kind in ("normal", "lognormal") else [0.0]
    variable = kind != "constant"
    tau_m = 1.0 / THEORY_TICK_HZ
    quick = bool(getattr(args, "quick", False))
    if args.tau_theta is not None:
        taus = parse_positive_list(args.tau_theta, "--tau-theta")
    elif empirical is not None:
        taus = [empirical.mean / tau_m]
    elif variable:
        taus = [5] if quick else [5, 8, 20, 70]
    elif quick:
        taus = [1, 2, 5, 8] if args.clock == "virtual" else [1, 5]
    else:
        taus = [1, 2, 5, 8, 70, 600] if args.clock == "virtual" else [1, 5, 8, 70]
    window = args.window if args.window is not None else (2.0 if quick else 4.0)
    exact = args.clock == "virtual" and not variable
    rows = []
    # Ray actors started on this machine (a local Ray or --nodes): the search never starts more than
    # its memory holds (a doubling from 70 to 140 actors ran a 24 GB machine out of memory)
    local_ray = backend == "ray" and getattr(args, "ray_address", None) in (None, "local")
    actor_cap = _local_actor_cap() if local_ray else None
    load_before = os.getloadavg()
    for sigma, jitter in ((sg, j) for sg in sigmas for j in jitters):
        for tau in taus:
            latency = make_latency(kind, tau * tau_m, sigma, empirical, jitter=jitter)
            bound = theoretical_nstar(latency.mean, tau_m)  # ⌈τ̄_θ/τ_M⌉: no scheduler does better
            flight = in_flight_workers(latency, tau_m, seed=args.seed) if variable else None
            if variable:
                warmup = math.ceil(3 * latency.max_hint / tau_m) + 30 + _SETTLE_TICKS[quick]
                window_ticks = _WINDOW_TICKS[quick]
            else:
                warmup = int(math.ceil(3 * tau)) + 30
                window_ticks = int(max(window * tau, 240))
            if args.max_inaction is not None:
                threshold = args.max_inaction
            elif exact:
                threshold = 0.0
            else:
                threshold = min(0.005, max_inaction_threshold(bound) / 2)
            if not variable and not quick and args.window is None and threshold > 0:
                # a window where one missed tick is under a third of the threshold: in 280 ticks (τ_θ = 70)
                # one tick was 0.36 %, the threshold itself, so a single late call decided a trial
                window_ticks = max(window_ticks, math.ceil(3 / threshold))
            for name, start in ((nm, st) for nm in schedulers for st in (starts if nm in STARTED else [None])):
                tried: dict[int, Any] = {}
                initial = initial_estimate(name, start, latency, tau_m)

                def run_n(
                    n: int | str,
                    name: str = name,
                    latency: Any = latency,
                    tau: float = tau,
                    warmup: int = warmup,
                    window_ticks: int = window_ticks,
                    tried: dict = tried,
                    initial: float | None = initial,
                ) -> dict[str, Any]:
                    if tried and stopwatch() > deadline:  # every row gets its first trial, then the budget rules
                        raise _OutOfTime(dict(tried))
                    began = stopwatch()
                    try:
                        tried[n] = trial(
                            tau_ticks=tau,
                            n_workers=n,
                            scheduler=name,
                            clock=args.clock,
                            latency=latency,
                            seed=args.seed,
                            warmup_ticks=warmup,
                            window_ticks=window_ticks,
                            backend=backend,
                            warm=warm,
                            initial=initial,
                        )
                    except Exception as exc:
                        # a Ray trial can fail for the cluster's reasons (an actor that does not start, a node
                        # out of memory): keep what the row's trials measured instead of losing the whole run
                        if backend != "ray" or not tried:
                            raise
                        print(
                            f"nstar: {name} τ̄_θ={tau:g} ticks, N_I={n}: trial failed ({exc}); the row keeps "
                            f"its {len(tried)} trial(s)",
                            file=sys.stderr,
                            flush=True,
                        )
                        raise _OutOfTime(dict(tried), f"trial of {n} workers failed: {exc}") from exc
                    if args.clock == "wall":  # a long search shows where it is (stderr: stdout ends with the JSON)
                        print(
                            f"nstar: {name} τ̄_θ={tau:g} ticks, N_I={n}: inaction {tried[n]['inaction_fraction']:.2%} "
                            f"({stopwatch() - began:.0f} s; {stopwatch() - started:.0f} s in all)",
                            file=sys.stderr,
                            flush=True,
                        )
                    return tried[n]

                guess = flight["target"] if (name == "quantile_hold" and flight) else bound
                cap = max(256, math.ceil(args.max_workers * bound), guess)
                if actor_cap is not None:  # Ray actors on this machine: no more than its memory holds
                    cap = max(guess, min(cap, actor_cap))

                def passes(s: dict[str, Any], th: float = threshold) -> bool:
                    return s["inaction_fraction"] <= th

                out_of_time, stopped_by = False, None
                try:
                    if at_workers:  # no search: the inaction at each of these N (the two clocks' table)
                        nstar, results = None, {n: run_n(n) for n in at_workers}
                    else:
                        nstar, results = find_nstar(run_n, guess=guess, passes=passes, limit=cap)
                except NStarAboveLimit as above:  # honest: more than the cap, with what each trial measured
                    nstar, results = None, above.results
                except _OutOfTime as late:  # the search stopped early: what the trials showed so far
                    nstar, results, out_of_time, stopped_by = None, late.results, True, late.reason
                at = results[nstar if nstar is not None else max(results)]
                # measured τ_θ where it varies (a Ray actor's remote overhead varies too); on the wall clock
                # as the world sees it, from the start the schedule counts (a publish, a grid slot) to the
                # action in hand: a worker is busy for that long, wake-up lag included
                measured = variable or backend == "ray"
                taus_of = "tau_theta_world" if args.clock == "wall" else "tau_theta"
                if name == "max_time":  # Algorithm 1 pads to the largest τ_θ seen
                    formula = theoretical_nstar(at[f"{taus_of}_max_ticks"] * tau_m, tau_m) if measured else bound
                elif name == "quantile_hold" and measured and args.clock == "wall" and at["world_taus_s"].size:
                    # one start per tick: enough workers in flight for the τ_θ they really took (the declared
                    # ones plus the calls' overhead), at the inaction this search accepts
                    formula = workers_for_inaction(at["world_taus_s"], tau_m, threshold)
                elif name == "quantile_hold" and flight:
                    formula = flight["target"]
                else:  # Algorithm 2 (and the rest): the mean
                    formula = theoretical_nstar(at[f"{taus_of}_mean_ticks"] * tau_m, tau_m) if measured else bound
                rows.append(
                    {
                        "scheduler": name,
                        "start": start_label(name, start),
                        # the estimate it started from, in ticks (None: cold, from 0 with no stagger)
                        "initial_estimate_ticks": None if initial is None else initial / tau_m,
                        "latency": kind,
                        "sigma": sigma if kind in _SPREAD_KINDS else None,
                        "jitter": jitter if kind == "egreedy" else None,
                        "tau_theta_ticks": tau,
                        "nstar_measured": nstar,
                        # None above: still inaction at this many workers (the search cap)
                        "nstar_above": None if nstar is not None or at_workers else max(results),
                        "nstar_formula": formula,
                        "nstar_theory": formula,  # the name earlier results used
                        "lower_bound": bound,
                        "ratio_to_bound": nstar / bound if nstar is not None else None,
                        "matches_theory": nstar == formula,
                        "within_theory_plus_1": nstar is not None and nstar <= formula + 1,
                        "max_inaction": threshold,
                        "inaction_at_nstar": at["inaction_fraction"],
                        "inaction_at_nstar_minus_1": results[nstar - 1]["inaction_fraction"]
                        if nstar is not None and nstar > 1
                        else None,
                        "tau_i_mean_ticks": _finite(at["tau_i_mean_ticks"]),
                        "tau_i_cv": _finite(at["tau_i_cv"]),
                        "delay_mean_ticks": _finite(at["delay_mean_ticks"]),
                        "delay_p99_ticks": _finite(at["delay_p99_ticks"]),
                        "tau_theta_max_ticks": _finite(at["tau_theta_max_ticks"]),
                        "tau_theta_mean_ticks": _finite(at["tau_theta_mean_ticks"]),
                        "tau_theta_world_max_ticks": _finite(at["tau_theta_world_max_ticks"]),
                        "tau_theta_world_mean_ticks": _finite(at["tau_theta_world_mean_ticks"]),
                        "formula_tau": ("world" if args.clock == "wall" else "sampled") if measured else "declared",
                        "in_flight_mean": flight["mean"] if flight else None,
                        "in_flight_sd": flight["sd"] if flight else None,
                        "warmup_ticks": warmup,
                        "window_ticks": window_ticks,
                        "trials": {str(n): r["inaction_fraction"] for n, r in sorted(results.items())},
                        "fixed_workers": bool(at_workers),  # --at-workers: inaction at given N, no search
                        "remote_overhead_s": at.get("remote_overhead_s"),
                        "tick_cycle": at.get("tick_cycle"),  # C in ticks where workers held phases (wall clock)
                    }
                )
                if out_of_time:
                    ok = [n for n, r in results.items() if r["inaction_fraction"] <= threshold]
                    failed = [n for n, r in results.items() if r["inaction_fraction"] > threshold]
                    rows[-1].update(
                        budget_exhausted=stopped_by is None,
                        nstar_above=max(failed, default=None),
                        nstar_at_most=min(ok, default=None),
                        stopped_by=stopped_by or "time budget",
                    )
                rows[-1]["search_cap"] = cap
                rows[-1]["return"] = _returns(args, name, nstar, latency, warmup)
            if (
                variable and "quantile_hold" in schedulers and not at_workers
            ):  # auto: the same scheduler, sizing N_I itself
                auto = trial(
                    tau_ticks=tau,
                    n_workers="auto",
                    scheduler="auto",
                    clock=args.clock,
                    latency=latency,
                    seed=args.seed,
                    warmup_ticks=warmup,
                    window_ticks=window_ticks,
                    backend=backend,
                    warm=warm,
                )
                rows.append(
                    {
                        "scheduler": "auto",
                        "latency": kind,
                        "sigma": sigma if kind in _SPREAD_KINDS else None,
                        "tau_theta_ticks": tau,
                        "nstar_measured": None,
                        "n_workers_chosen": auto["n_workers_final"],
                        "nstar_formula": flight["target"] if flight else None,
                        "lower_bound": bound,
                        "ratio_to_bound": auto["n_workers_final"] / bound,
                        "max_inaction": threshold,
                        "inaction_at_nstar": auto["inaction_fraction"],
                        "delay_mean_ticks": _finite(auto["delay_mean_ticks"]),
                        "delay_p99_ticks": _finite(auto["delay_p99_ticks"]),
                        "warmup_ticks": warmup,
                        "window_ticks": window_ticks,
                        "return": _returns(args, "auto", "auto", latency, warmup),
                    }
                )
    # every searched row counts: one whose search hit the cap or the time budget has no N_I* and so
    # does not match (all() over no rows would say True)
    searched = [r for r in rows if r["scheduler"] != "auto"]
    hold = [r for r in rows if r["scheduler"] == "quantile_hold"]  # above the cap counts as a miss
    result: dict[str, Any] = {
        "clock": args.clock,
        "latency": kind,
        "empirical_source": empirical.source if empirical is not None else None,
        "sigma": sigmas if kind in _SPREAD_KINDS else None,
        "env": ENV,
        "rows": rows,
        "all_match_theory": all(r["matches_theory"] for r in searched) if searched else None,
        "all_within_theory_plus_1": all(r["within_theory_plus_1"] for r in searched) if searched else None,
        # rows whose scheduler still left inaction at the search cap (--max-workers): N_I* is above it
        "above_cap": [
            {
                "scheduler": r["scheduler"],
                "tau_theta_ticks": r["tau_theta_ticks"],
                "sigma": r["sigma"],
                "nstar_above": r["nstar_above"],
            }
            for r in rows
            if r.get("nstar_above") is not None and not r.get("stopped_by")
        ],
        # rows whose search the --time-budget cut short (what their trials showed is in the row)
        "time_budget_s": budget,
        "budget_exhausted": [
            {
                "scheduler": r["scheduler"],
                "tau_theta_ticks": r["tau_theta_ticks"],
                "sigma": r["sigma"],
                "nstar_above": r["nstar_above"],
                "nstar_at_most": r["nstar_at_most"],
            }
            for r in rows
            if r.get("budget_exhausted")
        ],
        # rows whose search a failed Ray trial stopped (the reason, and what the trials before it showed)
        "stopped": [
            {
                "scheduler": r["scheduler"],
                "tau_theta_ticks": r["tau_theta_ticks"],
                "sigma": r["sigma"],
                "stopped_by": r["stopped_by"],
                "nstar_above": r["nstar_above"],
                "nstar_at_most": r["nstar_at_most"],
            }
            for r in rows
            if r.get("stopped_by") and not r.get("budget_exhausted")
        ],
        # issue 10's target: the new scheduler within 2× the bound, inaction held
        "quantile_hold_within_2x_bound": all(r["ratio_to_bound"] is not None and r["ratio_to_bound"] <= 2 for r in hold)
        if hold
        else None,
        "quantile_hold_max_ratio_to_bound": max(
            (r["ratio_to_bound"] for r in hold if r["ratio_to_bound"] is not None), default=None
        ),
        # the machine is shared: wall-clock figures are only as quiet as it was
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "machine": machine_info(),
    }
    if args.plot and searched:  # nothing measured (every row above the cap or out of time): nothing to draw
        result["plot"] = str(_plot(searched, Path(args.plot), args, kind))
        if len(sigmas) > 1:
            result["plot_sigma"] = str(_plot_sigma(rows, Path(args.plot), kind))
    return result


def _plot(rows: list[dict[str, Any]], path: Path, args: argparse.Namespace, kind: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    sigma0 = rows[0]["sigma"] if rows else None
    jitter0 = rows[0].get("jitter") if rows else None
    rows = [r for r in rows if r["sigma"] == sigma0 and r.get("jitter") == jitter0]
    for name, start in dict.fromkeys((r["scheduler"], r.get("start")) for r in rows):
        # rows without a measured N_I* (above the cap, or cut short by the time budget) have no point
        sub = [r for r in rows if (r["scheduler"], r.get("start")) == (name, start) and r["nstar_measured"] is not None]
        if sub:
            label = f"{name}, {start}" if start else name
            ax.plot(
                [r["tau_theta_ticks"] for r in sub],
                [r["nstar_measured"] for r in sub],
                "o-",
                label=f"{label} (measured)",
            )
    taus = sorted({r["tau_theta_ticks"] for r in rows})
    ax.plot(taus, [r["lower_bound"] for r in rows[: len(taus)]], "k--", alpha=0.6, label="⌈τ̄_θ/τ_M⌉ (bound)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("τ̄_θ (ticks)")
    ax.set_ylabel("N_I* (workers)")
    spread = "" if sigma0 is None else f", σ={sigma0:g}"
    ax.set_title(f"N_I* vs inference time — {args.clock} clock, {kind}{spread}")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plot_sigma(rows: list[dict[str, Any]], path: Path, kind: str) -> Path:
    """N_I*/bound against σ, one panel per τ̄_θ, Algorithms 1 and 2 beside quantile_hold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = path.with_name(path.stem + "_sigma" + path.suffix)
    taus = sorted({r["tau_theta_ticks"] for r in rows})
    fig, axes = plt.subplots(1, len(taus), figsize=(4.2 * len(taus), 4.0), squeeze=False)
    jitter0 = rows[0].get("jitter") if rows else None
    for ax, tau in zip(axes[0], taus):
        sub = [
            r
            for r in rows
            if r["tau_theta_ticks"] == tau and r["nstar_measured"] is not None and r.get("jitter") == jitter0
        ]
        for name, start in dict.fromkeys((r["scheduler"], r.get("start")) for r in sub):
            mine = sorted(
                (r["sigma"], r["nstar_measured"]) for r in sub if (r["scheduler"], r.get("start")) == (name, start)
            )
            ax.plot([m[0] for m in mine], [m[1] for m in mine], "o-", label=f"{name}, {start}" if start else name)
        bound = sorted({(r["sigma"], r["lower_bound"]) for r in sub})
        ax.plot([b[0] for b in bound], [b[1] for b in bound], "k--", label="⌈τ̄_θ/τ_M⌉ bound")
        ax.plot([b[0] for b in bound], [2 * b[1] for b in bound], "k:", alpha=0.5, label="2 × bound")
        ax.set_yscale("log")
        ax.set_xlabel(f"σ ({kind})")
        ax.set_ylabel("N_I* (workers)")
        ax.set_title(f"τ̄_θ = {tau:g} ticks")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    def num(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    table = Table(title=f"N_I* — {result['clock']} clock, {result['latency']} latency")
    p_ret = next((r["return"]["delay_world"]["p_minimax"] for r in result["rows"] if r.get("return")), None)
    for col in (
        "scheduler",
        "start",
        "σ",
        "jitter",
        "τ̄_θ (ticks)",
        "N_I* measured",
        "formula",
        "bound",
        "×bound",
        "inaction at N_I*",
        "at N_I*−1",
        "delay mean",
        "delay p99",
        "threshold",
        f"return, p {p_ret:g}" if p_ret is not None else "return",
        "return, still",
    ):
        table.add_column(col, justify="right")

    def ret(r: dict[str, Any], world: str) -> str:
        got = (r.get("return") or {}).get(world)
        if not got:
            return "—"
        spread = got["return_sd"] if got["return_sd"] is not None else got["return_se"]
        return f"{got['return_mean']:.3f}" + ("" if spread is None else f" ± {spread:.3f}")

    for r in result["rows"]:
        if r["nstar_measured"] is not None:
            measured, ratio = str(r["nstar_measured"]), f"{r['ratio_to_bound']:.2f}"
        elif r.get("stopped_by"):  # cut short by --time-budget or a failed trial: the bracket its trials gave
            low = "" if r["nstar_above"] is None else f"> {r['nstar_above']}"
            high = "" if r["nstar_at_most"] is None else f"≤ {r['nstar_at_most']}"
            why = "time" if r.get("budget_exhausted") else "stopped"
            measured, ratio = " ".join(part for part in (low, high, f"({why})") if part), "—"
        elif r.get("fixed_workers"):  # --at-workers: the inaction at each N
            measured, ratio = " ".join(f"{n}: {v:.1%}" for n, v in r["trials"].items()), "—"
        elif r.get("nstar_above") is not None:  # still inaction at the search cap
            measured, ratio = f"> {r['nstar_above']}", f"> {r['nstar_above'] / r['lower_bound']:.0f}"
        else:
            measured, ratio = f"auto: {r['n_workers_chosen']}", f"{r['ratio_to_bound']:.2f}"
        table.add_row(
            r["scheduler"],
            r.get("start") or "—",
            num(r.get("sigma"), "g"),
            num(r.get("jitter"), "g"),
            f"{r['tau_theta_ticks']:g}",
            measured,
            num(r["nstar_formula"], "d"),
            str(r["lower_bound"]),
            ratio,
            f"{r['inaction_at_nstar']:.2%}",
            "—" if r.get("inaction_at_nstar_minus_1") is None else f"{r['inaction_at_nstar_minus_1']:.2%}",
            num(r["delay_mean_ticks"], ".1f"),
            num(r["delay_p99_ticks"], ".0f"),
            f"{r['max_inaction']:.2%}",
            ret(r, "delay_world"),
            ret(r, "still_world"),
        )
    Console().print(table)
    for key in ("plot", "plot_sigma"):
        if result.get(key):
            print(f"{key}: {result[key]}")
