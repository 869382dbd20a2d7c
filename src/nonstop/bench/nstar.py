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
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from nonstop.bench.common import machine_info, parse_positive_list
from nonstop.bench.nstarparts import (
    FORWARD_JITTER,
    InFlight,
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
from nonstop.bench.nstartrial import TRIAL_ENV, TrialSpec, WarmRayActors, trial
from nonstop.bench.nstarview import plot, plot_sigma
from nonstop.bench.nstarview import render as render  # the bench's table: `nonstop bench` calls nstar.render
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
    _add_search_arguments(parser)
    _add_start_arguments(parser)
    _add_ray_arguments(parser)
    _add_return_arguments(parser)
    parser.add_argument("--plot", default="runs/nstar.png", help="where to write the figure ('' for none)")


def _add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """The clock, the schedulers, the latencies searched and what a trial measures."""
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


def _add_start_arguments(parser: argparse.ArgumentParser) -> None:
    """How Algorithms 1 and 2 start, the forward pass's jitter, fixed worker counts and the seed."""
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


def _add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the workers run (threads or Ray actors) and the search's wall-time budget."""
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


def _add_return_arguments(parser: argparse.ArgumentParser) -> None:
    """The return each row earns, measured on the virtual clock (`nonstop.bench.returns`)."""
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


@dataclass(frozen=True)
class _Plan:
    """What the flags ask of one search, checked before any trial runs."""

    backend: str
    clock: str
    budget: float | None  # wall seconds for the whole search (None: no limit)
    started: float  # stopwatch reading when the budget began
    deadline: float  # past it no new trial starts (each row still gets its first)
    schedulers: list[str]
    kind: str  # latency kind: constant, normal, lognormal, egreedy, empirical
    empirical: Any  # the `Empirical` latency read from --latency empirical:FILE, else None
    starts: list[Any]
    at_workers: list[int]  # --at-workers: no search, the inaction at each N
    jitters: list[float]
    sigmas: list[float]
    taus: list[float]  # mean τ_θ in ticks
    window: float  # cycles of τ_θ measured, constant latency
    quick: bool
    tau_m: float  # one tick, seconds
    actor_cap: int | None  # Ray actors this machine's memory holds (a local Ray), else None

    @property
    def variable(self) -> bool:
        return self.kind != "constant"

    @property
    def exact(self) -> bool:
        """The virtual clock with constant latency: inaction must be exactly 0."""
        return self.clock == "virtual" and not self.variable


def _time_budget(args: argparse.Namespace, backend: str) -> float | None:
    budget = getattr(args, "time_budget", None)
    if budget is None and backend == "ray":
        budget = 120.0 if getattr(args, "quick", False) else 1200.0
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise ValueError(f"--time-budget must be a positive number of seconds, got {budget}")
    return budget


def _check_schedulers_and_return(args: argparse.Namespace, schedulers: list[str]) -> None:
    """Unknown schedulers and a bad return world fail here, before any run."""
    from nonstop.inference.schedulers import make_scheduler

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


def _latency_kind(args: argparse.Namespace) -> tuple[str, Any]:
    """``--latency``'s kind, and the `Empirical` latency its FILE holds (None for the others)."""
    from nonstop.policies import Empirical

    kind, empirical = args.latency.strip(), None
    if kind.startswith("empirical:"):
        empirical = Empirical.from_file(kind.partition(":")[2].strip())
        kind = "empirical"
    elif kind not in ("constant", "normal", "lognormal", "egreedy"):
        raise ValueError(f"--latency must be one of {', '.join(LATENCY_KINDS)}, got {args.latency!r}")
    return kind, empirical


def _at_workers(args: argparse.Namespace) -> list[int]:
    at_text = getattr(args, "at_workers", None)
    at_workers = [] if at_text is None else [int(n) for n in parse_positive_list(str(at_text), "--at-workers")]
    if at_text is not None and any(
        n != float(x) for n, x in zip(at_workers, parse_positive_list(str(at_text), "--at-workers"))
    ):
        raise ValueError(f"--at-workers takes worker counts >= 1, got {at_text!r}")
    return at_workers


def _spreads(args: argparse.Namespace, kind: str) -> tuple[list[float], list[float]]:
    """The forward pass's jitters (egreedy) and the spreads ``--sigma`` sweeps."""
    jitter_text = getattr(args, "jitter", None)
    if jitter_text is not None and kind != "egreedy":
        raise ValueError(f"--jitter is the forward pass's spread of --latency egreedy, not of {kind!r}")
    jitters = [FORWARD_JITTER] if jitter_text is None else parse_jitters(str(jitter_text))
    if kind == "egreedy":
        sigmas = parse_epsilons(str(args.sigma))
    else:
        sigmas = parse_positive_list(str(args.sigma), "--sigma") if kind in ("normal", "lognormal") else [0.0]
    return jitters, sigmas


def _taus(args: argparse.Namespace, empirical: Any, variable: bool, quick: bool, tau_m: float) -> list[float]:
    """The mean inference times searched, in ticks: ``--tau-theta``, else the defaults per clock and kind."""
    if args.tau_theta is not None:
        return parse_positive_list(args.tau_theta, "--tau-theta")
    if empirical is not None:
        return [empirical.mean / tau_m]
    if variable:
        return [5] if quick else [5, 8, 20, 70]
    if quick:
        return [1, 2, 5, 8] if args.clock == "virtual" else [1, 5]
    return [1, 2, 5, 8, 70, 600] if args.clock == "virtual" else [1, 5, 8, 70]


def _plan(args: argparse.Namespace, backend: str) -> _Plan:
    from nonstop.envs.theory import THEORY_TICK_HZ
    from nonstop.realtime.clock import stopwatch

    budget = _time_budget(args, backend)
    started = stopwatch()
    schedulers = [s.strip() for s in args.scheduler.split(",") if s.strip()]
    _check_schedulers_and_return(args, schedulers)
    kind, empirical = _latency_kind(args)
    starts = parse_starts(getattr(args, "tau_theta_max", "declared"))
    at_workers = _at_workers(args)
    jitters, sigmas = _spreads(args, kind)
    tau_m = 1.0 / THEORY_TICK_HZ
    quick = bool(getattr(args, "quick", False))
    taus = _taus(args, empirical, kind != "constant", quick, tau_m)
    window = args.window if args.window is not None else (2.0 if quick else 4.0)
    # Ray actors started on this machine (a local Ray or --nodes): the search never starts more than
    # its memory holds (a doubling from 70 to 140 actors ran a 24 GB machine out of memory)
    local_ray = backend == "ray" and getattr(args, "ray_address", None) in (None, "local")
    return _Plan(
        backend=backend,
        clock=args.clock,
        budget=budget,
        started=started,
        deadline=started + budget if budget is not None else math.inf,
        schedulers=schedulers,
        kind=kind,
        empirical=empirical,
        starts=starts,
        at_workers=at_workers,
        jitters=jitters,
        sigmas=sigmas,
        taus=taus,
        window=window,
        quick=quick,
        tau_m=tau_m,
        actor_cap=_local_actor_cap() if local_ray else None,
    )


@dataclass(frozen=True)
class _Cell:
    """One latency of the sweep (σ, jitter, τ̄_θ) and how its trials are measured."""

    sigma: float
    jitter: float
    tau: float  # τ̄_θ, ticks
    latency: Any
    bound: int  # ⌈τ̄_θ/τ_M⌉: no scheduler does better
    flight: InFlight | None  # quantile_hold's in-flight target (variable latency)
    warmup: int
    window_ticks: int
    threshold: float  # inaction fraction a trial may leave


def _cell(args: argparse.Namespace, plan: _Plan, sigma: float, jitter: float, tau: float) -> _Cell:
    tau_m, quick = plan.tau_m, plan.quick
    latency = make_latency(plan.kind, tau * tau_m, sigma, plan.empirical, jitter=jitter)
    bound = theoretical_nstar(latency.mean, tau_m)  # ⌈τ̄_θ/τ_M⌉: no scheduler does better
    flight = in_flight_workers(latency, tau_m, seed=args.seed) if plan.variable else None
    if plan.variable:
        warmup = math.ceil(3 * latency.max_hint / tau_m) + 30 + _SETTLE_TICKS[quick]
        window_ticks = _WINDOW_TICKS[quick]
    else:
        warmup = int(math.ceil(3 * tau)) + 30
        window_ticks = int(max(plan.window * tau, 240))
    if args.max_inaction is not None:
        threshold = args.max_inaction
    elif plan.exact:
        threshold = 0.0
    else:
        threshold = min(0.005, max_inaction_threshold(bound) / 2)
    if not plan.variable and not quick and args.window is None and threshold > 0:
        # a window where one missed tick is under a third of the threshold: in 280 ticks (τ_θ = 70)
        # one tick was 0.36 %, the threshold itself, so a single late call decided a trial
        window_ticks = max(window_ticks, math.ceil(3 / threshold))
    return _Cell(sigma, jitter, tau, latency, bound, flight, warmup, window_ticks, threshold)


def _spec(
    args: argparse.Namespace, plan: _Plan, cell: _Cell, n: int | str, scheduler: str, initial: float | None
) -> TrialSpec:
    """A trial of ``n`` workers (or ``"auto"``) at the cell's latency, warm-up and window."""
    return TrialSpec(
        n_workers=n,
        scheduler=scheduler,
        clock=args.clock,
        latency=cell.latency,
        seed=args.seed,
        warmup_ticks=cell.warmup,
        window_ticks=cell.window_ticks,
        backend=plan.backend,
        initial=initial,
    )


@dataclass(frozen=True)
class _Searched:
    """What one scheduler's search at one cell found."""

    initial: float | None  # the estimate it started from, seconds (None: cold)
    cap: int  # the most workers the search may try
    nstar: int | None
    results: dict[int, Any]  # each trial's measures, by worker count
    out_of_time: bool
    stopped_by: str | None  # why a failed Ray trial stopped it (None: the budget, or not stopped)


def _search(
    args: argparse.Namespace, plan: _Plan, cell: _Cell, name: str, start: Any, warm: WarmRayActors | None
) -> _Searched:
    """The smallest N_I whose inaction is at most the cell's threshold (or the inaction at each
    ``--at-workers``), galloping from the formula and bisecting, under the time budget."""
    from nonstop.realtime.clock import stopwatch

    tried: dict[int, Any] = {}
    initial = initial_estimate(name, start, cell.latency, plan.tau_m)

    def run_n(n: int) -> dict[str, Any]:
        if tried and stopwatch() > plan.deadline:  # every row gets its first trial, then the budget rules
            raise _OutOfTime(dict(tried))
        began = stopwatch()
        try:
            tried[n] = trial(_spec(args, plan, cell, n, name, initial), warm)
        except Exception as exc:
            # a Ray trial can fail for the cluster's reasons (an actor that does not start, a node
            # out of memory): keep what the row's trials measured instead of losing the whole run
            if plan.backend != "ray" or not tried:
                raise
            print(
                f"nstar: {name} τ̄_θ={cell.tau:g} ticks, N_I={n}: trial failed ({exc}); the row keeps "
                f"its {len(tried)} trial(s)",
                file=sys.stderr,
                flush=True,
            )
            raise _OutOfTime(dict(tried), f"trial of {n} workers failed: {exc}") from exc
        if args.clock == "wall":  # a long search shows where it is (stderr: stdout ends with the JSON)
            print(
                f"nstar: {name} τ̄_θ={cell.tau:g} ticks, N_I={n}: inaction {tried[n]['inaction_fraction']:.2%} "
                f"({stopwatch() - began:.0f} s; {stopwatch() - plan.started:.0f} s in all)",
                file=sys.stderr,
                flush=True,
            )
        return tried[n]

    guess = cell.flight["target"] if (name == "quantile_hold" and cell.flight) else cell.bound
    cap = max(256, math.ceil(args.max_workers * cell.bound), guess)
    if plan.actor_cap is not None:  # Ray actors on this machine: no more than its memory holds
        cap = max(guess, min(cap, plan.actor_cap))

    def passes(s: dict[str, Any]) -> bool:
        return s["inaction_fraction"] <= cell.threshold

    try:
        if plan.at_workers:  # no search: the inaction at each of these N (the two clocks' table)
            return _Searched(initial, cap, None, {n: run_n(n) for n in plan.at_workers}, False, None)
        nstar, results = find_nstar(run_n, guess=guess, passes=passes, limit=cap)
        return _Searched(initial, cap, nstar, results, False, None)
    except NStarAboveLimit as above:  # honest: more than the cap, with what each trial measured
        return _Searched(initial, cap, None, above.results, False, None)
    except _OutOfTime as late:  # the search stopped early: what the trials showed so far
        return _Searched(initial, cap, None, late.results, True, late.reason)


def _formula(plan: _Plan, cell: _Cell, name: str, at: dict[str, Any]) -> int:
    """The paper's N_I* for ``name`` at the trial ``at``: from the τ_θ measured where it varies (a Ray
    actor's remote overhead varies too); on the wall clock as the world sees it, from the start the
    schedule counts (a publish, a grid slot) to the action in hand, wake-up lag included."""
    tau_m, measured = plan.tau_m, plan.variable or plan.backend == "ray"
    taus_of = "tau_theta_world" if plan.clock == "wall" else "tau_theta"
    if name == "max_time":  # Algorithm 1 pads to the largest τ_θ seen
        return theoretical_nstar(at[f"{taus_of}_max_ticks"] * tau_m, tau_m) if measured else cell.bound
    if name == "quantile_hold" and measured and plan.clock == "wall" and at["world_taus_s"].size:
        # one start per tick: enough workers in flight for the τ_θ they really took (the declared
        # ones plus the calls' overhead), at the inaction this search accepts
        return workers_for_inaction(at["world_taus_s"], tau_m, cell.threshold)
    if name == "quantile_hold" and cell.flight:
        return cell.flight["target"]
    # Algorithm 2 (and the rest): the mean
    return theoretical_nstar(at[f"{taus_of}_mean_ticks"] * tau_m, tau_m) if measured else cell.bound


def _row(args: argparse.Namespace, plan: _Plan, cell: _Cell, name: str, start: Any, found: _Searched) -> dict[str, Any]:
    """One scheduler's row: N_I* measured beside the formula and the bound, and its return."""
    nstar, results, at_workers, flight = found.nstar, found.results, plan.at_workers, cell.flight
    at = results[nstar if nstar is not None else max(results)]
    formula = _formula(plan, cell, name, at)
    measured = plan.variable or plan.backend == "ray"
    row = {
        "scheduler": name,
        "start": start_label(name, start),
        # the estimate it started from, in ticks (None: cold, from 0 with no stagger)
        "initial_estimate_ticks": None if found.initial is None else found.initial / plan.tau_m,
        "latency": plan.kind,
        "sigma": cell.sigma if plan.kind in _SPREAD_KINDS else None,
        "jitter": cell.jitter if plan.kind == "egreedy" else None,
        "tau_theta_ticks": cell.tau,
        "nstar_measured": nstar,
        # None above: still inaction at this many workers (the search cap)
        "nstar_above": None if nstar is not None or at_workers else max(results),
        "nstar_formula": formula,
        "nstar_theory": formula,  # the name earlier results used
        "lower_bound": cell.bound,
        "ratio_to_bound": nstar / cell.bound if nstar is not None else None,
        "matches_theory": nstar == formula,
        "within_theory_plus_1": nstar is not None and nstar <= formula + 1,
        "max_inaction": cell.threshold,
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
        "warmup_ticks": cell.warmup,
        "window_ticks": cell.window_ticks,
        "trials": {str(n): r["inaction_fraction"] for n, r in sorted(results.items())},
        "fixed_workers": bool(at_workers),  # --at-workers: inaction at given N, no search
        "remote_overhead_s": at.get("remote_overhead_s"),
        "tick_cycle": at.get("tick_cycle"),  # C in ticks where workers held phases (wall clock)
    }
    if found.out_of_time:
        ok = [n for n, r in results.items() if r["inaction_fraction"] <= cell.threshold]
        failed = [n for n, r in results.items() if r["inaction_fraction"] > cell.threshold]
        row.update(
            budget_exhausted=found.stopped_by is None,
            nstar_above=max(failed, default=None),
            nstar_at_most=min(ok, default=None),
            stopped_by=found.stopped_by or "time budget",
        )
    row["search_cap"] = found.cap
    row["return"] = _returns(args, name, nstar, cell.latency, cell.warmup)
    return row


def _auto_row(args: argparse.Namespace, plan: _Plan, cell: _Cell, warm: WarmRayActors | None) -> dict[str, Any]:
    """`AutoScheduler` (quantile_hold sizing N_I itself): the workers it chose and what it paid."""
    auto = trial(_spec(args, plan, cell, "auto", "auto", None), warm)
    return {
        "scheduler": "auto",
        "latency": plan.kind,
        "sigma": cell.sigma if plan.kind in _SPREAD_KINDS else None,
        "tau_theta_ticks": cell.tau,
        "nstar_measured": None,
        "n_workers_chosen": auto["n_workers_final"],
        "nstar_formula": cell.flight["target"] if cell.flight else None,
        "lower_bound": cell.bound,
        "ratio_to_bound": auto["n_workers_final"] / cell.bound,
        "max_inaction": cell.threshold,
        "inaction_at_nstar": auto["inaction_fraction"],
        "delay_mean_ticks": _finite(auto["delay_mean_ticks"]),
        "delay_p99_ticks": _finite(auto["delay_p99_ticks"]),
        "warmup_ticks": cell.warmup,
        "window_ticks": cell.window_ticks,
        "return": _returns(args, "auto", "auto", cell.latency, cell.warmup),
    }


def _run(args: argparse.Namespace, backend: str, warm: WarmRayActors | None = None) -> dict[str, Any]:
    """Every cell of the sweep (σ, jitter, τ̄_θ), each scheduler's search in it, and the summary."""
    plan = _plan(args, backend)
    rows = []
    load_before = os.getloadavg()
    for sigma, jitter in ((sg, j) for sg in plan.sigmas for j in plan.jitters):
        for tau in plan.taus:
            cell = _cell(args, plan, sigma, jitter, tau)
            for name in plan.schedulers:
                for start in plan.starts if name in STARTED else [None]:
                    rows.append(_row(args, plan, cell, name, start, _search(args, plan, cell, name, start, warm)))
            if plan.variable and "quantile_hold" in plan.schedulers and not plan.at_workers:
                rows.append(_auto_row(args, plan, cell, warm))  # the same scheduler, sizing N_I itself
    return _summary(args, plan, rows, load_before)


def _brief(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in keys} for r in rows]


def _summary(
    args: argparse.Namespace, plan: _Plan, rows: list[dict[str, Any]], load_before: tuple[float, ...]
) -> dict[str, Any]:
    """The rows with what they add up to: theory matched, rows above the cap or cut short, the plots."""
    kind, where = plan.kind, ("scheduler", "tau_theta_ticks", "sigma")
    # every searched row counts: one whose search hit the cap or the time budget has no N_I* and so
    # does not match (all() over no rows would say True)
    searched = [r for r in rows if r["scheduler"] != "auto"]
    hold = [r for r in rows if r["scheduler"] == "quantile_hold"]  # above the cap counts as a miss
    result: dict[str, Any] = {
        "clock": args.clock,
        "latency": kind,
        "empirical_source": plan.empirical.source if plan.empirical is not None else None,
        "sigma": plan.sigmas if kind in _SPREAD_KINDS else None,
        "env": ENV,
        "rows": rows,
        "all_match_theory": all(r["matches_theory"] for r in searched) if searched else None,
        "all_within_theory_plus_1": all(r["within_theory_plus_1"] for r in searched) if searched else None,
        # rows whose scheduler still left inaction at the search cap (--max-workers): N_I* is above it
        "above_cap": _brief(
            [r for r in rows if r.get("nstar_above") is not None and not r.get("stopped_by")], (*where, "nstar_above")
        ),
        # rows whose search the --time-budget cut short (what their trials showed is in the row)
        "time_budget_s": plan.budget,
        "budget_exhausted": _brief(
            [r for r in rows if r.get("budget_exhausted")], (*where, "nstar_above", "nstar_at_most")
        ),
        # rows whose search a failed Ray trial stopped (the reason, and what the trials before it showed)
        "stopped": _brief(
            [r for r in rows if r.get("stopped_by") and not r.get("budget_exhausted")],
            (*where, "stopped_by", "nstar_above", "nstar_at_most"),
        ),
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
        result["plot"] = str(plot(searched, Path(args.plot), args, kind))
        if len(plan.sigmas) > 1:
            result["plot_sigma"] = str(plot_sigma(rows, Path(args.plot), kind))
    return result
