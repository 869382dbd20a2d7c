"""``nonstop bench return``: what each scheduler earns, at every N_I from the bound ⌈τ̄_θ/τ_M⌉ to twice it.

N_I* and delay say how a scheduler spends workers; the return says what the world pays for it. On
``theory/delay-cycle`` (``--n-states`` states, stay probability ``--p-minimax``, a comma list; 1
runs ``theory/still``, where delay costs nothing) the best policy that sees only its observation
(`ObservedStatePolicy`) runs behind lognormal τ_θ (mean ``--tau-theta`` ticks, log-spread
``--sigma``) under each scheduler of ``--schedulers``, on the virtual clock (exact, fast), for
``--seeds`` seeds. Per cell it reports the reward per tick (mean over seeds, their spread and the
pooled batch-means standard error) and Equation 1's split of the regret (`regret_split`): against
the world's optimum and against the same policy acting at every tick with no delay (measured in its
own run: one worker, τ_θ = τ_M): learning (the optimum less that undelayed rate; 0 for this policy),
inaction (what β's ticks lose against it) and delay (what the agent's ticks lose against it).

The comparison: per (τ̄_θ, p, N_I), ``--candidate`` (default ``fill``) against the best other
scheduler there. Every scheduler runs on the same world seed, and the world draws its transition
every tick whatever is played, so the state trajectories are identical and the per-tick rewards are
paired: the difference's standard error is the batch-means error of the per-tick differences, pooled
over seeds. A cell *passes* when the candidate's mean is at least the best other's less 2 standard
errors of that difference; the *target* is met when every cell passes and the candidate is at least
10 % above the best other somewhere.

A scheduler shown rewards (`FillScheduler.observe_reward`) is fed every tick's reward and delay by a
host recorder, so ``fill`` fits the world's cost of delay as it runs.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from nonstop.bench.common import parse_positive_list

__all__ = ["DESCRIPTION", "add_arguments", "run", "render", "measure_return", "return_at", "returns_in_two_worlds",
           "RewardFeed"]

DESCRIPTION = "return and regret split (Eq. 1) per scheduler at every N_I from the bound to 2× (theory/delay-cycle, virtual clock)"
DEFAULT_SCHEDULERS = "exp_time,quantile_hold,fill"
#: warm-up ticks before the window, beyond 3 × the 99.9 % point of τ_θ (running estimates settle)
WARMUP_TICKS = 600
#: a cell passes when the candidate is within this many standard errors of the best other
PASS_Z = 2.0
#: the target's margin somewhere
TARGET_MARGIN = 0.10


class RewardFeed:
    """Host recorder that shows every tick's reward, and the applied action's delay (None on β's
    ticks), to a scheduler that takes them (``observe_reward``); nothing for one that does not."""

    def __init__(self, scheduler: Any) -> None:
        self.observe = getattr(scheduler, "observe_reward", None)

    def on_observation(self, tick: int, obs: Any) -> None:
        pass

    def on_tick(self, tick: int, *, agent: bool, action: Any, obs_tick: int, reward: float, terminated: bool,
                truncated: bool, terminal_obs: Any = None) -> None:  # fmt: skip
        if self.observe is not None:
            self.observe(float(reward), int(tick - obs_tick) if agent else None)


def world_for(p_minimax: float, n_states: int) -> tuple[str, dict[str, Any]]:
    """``theory/delay-cycle`` at ``p_minimax``, or ``theory/still`` at 1 (delay costs nothing), never
    truncating."""
    if p_minimax >= 1.0:
        return "theory/still", {"n": n_states, "max_steps": 10**12}
    return "theory/delay-cycle", {"n": n_states, "p_minimax": p_minimax, "max_steps": 10**12}


def measure_return(
    *,
    env: str,
    env_kwargs: dict[str, Any],
    scheduler: str,
    n_workers: int | str,
    latency: Any,
    seed: int,
    warmup_ticks: int,
    window_ticks: int,
    fill_p: float | None = None,
    show_rewards: bool = True,
) -> dict[str, Any]:
    """One virtual-clock run: ``n_workers`` workers of ``scheduler`` running `ObservedStatePolicy` behind
    ``latency``; the rewards and agent flags of the ``window_ticks`` ticks after ``warmup_ticks``, the
    window's tick-log summary and, for a scheduler with a tuned cap, its end state. ``fill_p``: the
    cost of delay ``fill`` is given (else it fits one to the rewards it is shown, with ``show_rewards``,
    or keeps its prior, as in ``nonstop train``)."""
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.metrics.regret import ObservedStatePolicy
    from nonstop.policies import LatencyPolicy
    from nonstop.realtime.host import Session
    from nonstop.realtime.ticklog import SOURCE_AGENT

    # "auto" sizes N_I itself, from one worker (as `InferencePool` does for n_inference="auto")
    if isinstance(n_workers, str):
        if n_workers != "auto":
            raise ValueError(f"n_workers must be an int or 'auto', got {n_workers!r}")
        sched = make_scheduler("auto", 1, max_workers=512)
    else:
        sched = make_scheduler(scheduler, n_workers, **({"p_minimax": fill_p} if scheduler == "fill" and fill_p is not None else {}))
    with Session(env, clock="virtual", seed=seed, env_kwargs=env_kwargs, recorder=RewardFeed(sched) if show_rewards else None) as world:
        space = world.action_space
        pool = InferencePool(world, lambda i: LatencyPolicy(ObservedStatePolicy(space), latency, seed=seed * 100_003 + i),
                             sched).start()  # fmt: skip
        try:
            world.run_for((warmup_ticks + window_ticks + 0.5) * world.tau_m)
        finally:
            pool.stop()
    log = world.tick_log
    keep = (log["tick"] > warmup_ticks) & (log["tick"] <= warmup_ticks + window_ticks)
    out = {
        "rewards": log["reward"][keep],
        "agent": log["source"][keep] == SOURCE_AGENT,
        "summary": log.summary(warmup_ticks=warmup_ticks, end_tick=warmup_ticks + window_ticks),
    }
    for name in ("cap", "p_minimax", "plan"):
        if hasattr(sched, name):
            out[name] = getattr(sched, name)
    return out


def _pooled_se(series: list[np.ndarray]) -> float:
    from nonstop.metrics.regret import batch_means_stderr

    ses = [batch_means_stderr(s) for s in series]
    return float(math.sqrt(sum(se * se for se in ses)) / len(ses)) if ses and all(map(math.isfinite, ses)) else math.nan


def return_at(
    scheduler: str,
    n_workers: int | str,
    latency: Any,
    *,
    p_minimax: float,
    seeds: list[int],
    warmup_ticks: int,
    window_ticks: int,
    n_states: int = 64,
    undelayed: dict[int, float] | None = None,
    fill_p: str = "tolerance",
) -> dict[str, Any]:
    """``scheduler``'s return with ``n_workers`` over ``seeds`` (`measure_return`), with Equation 1's split.

    ``fill_p``: where ``fill`` gets the world's cost of delay: ``"tolerance"``, the world's p̂ as
    ``nonstop tolerance`` measures it (`world_tolerance`), ``"rewards"``, fitted as it runs, or
    ``"prior"``, neither (its prior, 0.99: what ``nonstop train --scheduler fill`` runs with).

    ``undelayed[seed]``: the same policy's reward per tick acting every tick with no delay on that seed's
    world (measured here when not given). Returns the mean, spread (sd over seeds) and pooled standard
    error of the reward per tick, the split against the optimum (1 per tick on these worlds) and against
    the undelayed rate, the inaction fraction and delay, and the per-seed reward series (``_series``,
    for paired comparisons; not JSON)."""
    from nonstop.metrics.regret import regret_split

    env, kwargs = world_for(p_minimax, n_states)
    undelayed = dict(undelayed or {})
    runs, splits = [], []
    for seed in seeds:
        if seed not in undelayed:
            undelayed[seed] = undelayed_rate(p_minimax, seed=seed, window_ticks=window_ticks, n_states=n_states)
        p_given = world_tolerance(p_minimax, n_states) if fill_p == "tolerance" else None
        got = measure_return(env=env, env_kwargs=kwargs, scheduler=scheduler, n_workers=n_workers, latency=latency,
                             seed=seed, warmup_ticks=warmup_ticks, window_ticks=window_ticks, fill_p=p_given,
                             show_rewards=fill_p != "prior")  # fmt: skip
        runs.append(got)
        # Equation 1 against the optimum (1 per tick on these worlds), the undelayed rate between
        splits.append(regret_split(got["rewards"], got["agent"], optimal_rate=1.0, undelayed_rate=undelayed[seed]))
    means = np.array([s.reward_per_tick for s in splits])

    def avg(values: list[float]) -> float:
        return float(np.mean(values))

    out: dict[str, Any] = {
        "scheduler": scheduler,
        "n_workers": n_workers,
        "return_mean": float(means.mean()),
        "return_sd": float(means.std(ddof=1)) if means.size > 1 else None,
        "return_se": _finite(_pooled_se([r["rewards"] for r in runs])),
        "inaction_fraction": avg([s.inaction_fraction for s in splits]),
        "delay_mean_ticks": _finite(avg([r["summary"]["delay_mean_ticks"] for r in runs])),
        "undelayed_rate": avg([undelayed[s] for s in seeds]),
        "regret": avg([s.regret for s in splits]),
        "regret_learning": avg([s.learning for s in splits]),
        "regret_inaction": avg([s.inaction for s in splits]),
        "regret_delay": avg([s.delay for s in splits]),
        "seeds": len(seeds),
        "_series": [r["rewards"] for r in runs],
    }
    if "cap" in runs[0]:
        out["cap_ticks"] = [r["cap"] for r in runs]
        out["plan"] = [r["plan"] for r in runs]
        out["p_used"] = [round(float(r["p_minimax"]), 5) for r in runs]
        out["p_from"] = fill_p
    return out


#: the figures of a `return_at` cell that `returns_in_two_worlds` keeps
_TWO_WORLD_KEYS = ("return_mean", "return_sd", "return_se", "inaction_fraction", "delay_mean_ticks", "undelayed_rate",
                   "regret", "regret_learning", "regret_inaction", "regret_delay", "seeds")  # fmt: skip


def returns_in_two_worlds(
    scheduler: str,
    n_workers: int | str,
    latency: Any,
    *,
    p_minimax: float,
    seeds: list[int],
    warmup_ticks: int,
    window_ticks: int,
) -> dict[str, Any]:
    """`return_at` on ``theory/delay-cycle`` at ``p_minimax`` (delay costs) and on ``theory/still``
    (it does not), each cell's figures without its series: what ``nonstop bench nstar`` reports beside
    N_I*."""
    out: dict[str, Any] = {}
    for key, p in (("delay_world", p_minimax), ("still_world", 1.0)):
        cell = return_at(scheduler, n_workers, latency, p_minimax=p, seeds=seeds, warmup_ticks=warmup_ticks,
                         window_ticks=window_ticks)  # fmt: skip
        out[key] = {"p_minimax": p, **{k: cell[k] for k in _TWO_WORLD_KEYS}}
    return out


_TOLERANCE: dict[tuple[float, int], float] = {}


def world_tolerance(p_minimax: float, n_states: int = 64, horizon: int = 8) -> float:
    """The world's per-tick stay probability as ``nonstop tolerance`` measures it from copies of the env
    (`nonstop.metrics.tolerance.estimate_predictability`: ``q_k**(1/k)`` at k = ``horizon``, 50 start
    states × 32 copies), what a user hands ``fill`` as ``p_minimax``. Cached per world."""
    from nonstop.metrics.tolerance import estimate_predictability

    key = (float(p_minimax), int(n_states))
    if key not in _TOLERANCE:
        env, kwargs = world_for(p_minimax, n_states)
        kwargs = {k: v for k, v in kwargs.items() if k != "max_steps"}
        est = estimate_predictability(env, env_kwargs=kwargs, horizon=horizon, starts=50, flock=32, seed=0)
        _TOLERANCE[key] = min(1.0, float(est.p_hat[-1]))
    return _TOLERANCE[key]


def undelayed_rate(p_minimax: float, *, seed: int, window_ticks: int, n_states: int = 64) -> float:
    """The policy's reward per tick acting at every tick with no delay (one worker, τ_θ = τ_M: each action
    is applied one tick after its observation, zero transitions late) on ``seed``'s world."""
    from nonstop.policies import Constant

    env, kwargs = world_for(p_minimax, n_states)
    got = measure_return(env=env, env_kwargs=kwargs, scheduler="sequential", n_workers=1, latency=Constant(1 / 60),
                         seed=seed, warmup_ticks=30, window_ticks=window_ticks)  # fmt: skip
    return float(got["rewards"].mean())


def public(cell: dict[str, Any]) -> dict[str, Any]:
    """A `return_at` cell without its series (JSON-safe)."""
    return {k: v for k, v in cell.items() if not k.startswith("_")}


def paired(candidate: dict[str, Any], other: dict[str, Any]) -> tuple[float, float]:
    """Mean and pooled batch-means standard error of the per-tick reward difference ``candidate − other``
    (the same seeds, the same state trajectories)."""
    diffs = [a - b for a, b in zip(candidate["_series"], other["_series"])]
    return float(np.mean([d.mean() for d in diffs])), _pooled_se(diffs)


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tau-theta", default=None, help="mean τ_θ in ticks, comma-separated (default 5,20; quick 5)")
    parser.add_argument("--p-minimax", default="0.97,0.999",
                        help="the world's stay probability per tick, comma-separated; 1 is theory/still, where delay "
                        "costs nothing (default 0.97,0.999)")  # fmt: skip
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal log-spread of τ_θ (default 0.5)")
    parser.add_argument("--n-workers", default=None,
                        help="N_I, comma-separated (default: every N from ⌈τ̄_θ/τ_M⌉ to twice it; quick: the bound, "
                        "1.5× and 2×)")  # fmt: skip
    parser.add_argument("--schedulers", default=DEFAULT_SCHEDULERS,
                        help=f"comma-separated scheduler names (default {DEFAULT_SCHEDULERS})")
    parser.add_argument("--candidate", default="fill", help="the scheduler held to the others (default fill)")
    parser.add_argument("--fill-p", choices=("tolerance", "rewards", "prior"), default="tolerance",
                        help="where fill gets the cost of delay: the world's p̂ as `nonstop tolerance` measures it "
                        "(default), fitted to the rewards it is shown as it runs, or neither (its prior, as in "
                        "`nonstop train`)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 2; quick 1)")
    parser.add_argument("--seconds", type=float, default=None, help="measured world seconds per run (default 120; quick 40)")
    parser.add_argument("--warmup-ticks", type=int, default=None,
                        help=f"ticks before the window (default {WARMUP_TICKS} + 3 × the 99.9 %% point of τ_θ)")
    parser.add_argument("--n-states", type=int, default=64, help="states on the cycle (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.envs.theory import THEORY_TICK_HZ, check_delay_cycle_args
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.metrics.nstar import theoretical_nstar
    from nonstop.policies import LogNormal

    quick = bool(getattr(args, "quick", False))
    taus = parse_positive_list(args.tau_theta, "--tau-theta") if args.tau_theta else ([5.0] if quick else [5.0, 20.0])
    ps = parse_positive_list(args.p_minimax, "--p-minimax")
    for p in ps:
        check_delay_cycle_args(args.n_states, min(p, 1.0))
    names = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    for name in names:
        make_scheduler(name, 2)  # an unknown name fails before any run
    if args.candidate not in names:
        raise ValueError(f"--candidate {args.candidate!r} must be one of --schedulers ({', '.join(names)})")
    n_seeds = args.seeds if args.seeds is not None else (1 if quick else 2)
    seconds = args.seconds if args.seconds is not None else (40.0 if quick else 120.0)
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 1:
        raise ValueError(f"--seeds must be an int >= 1, got {n_seeds!r}")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--seconds must be a positive number of world seconds, got {seconds!r}")
    if not 0.0 < args.sigma < 3.0:
        raise ValueError(f"--sigma must be in (0, 3), got {args.sigma!r}")
    tau_m = 1.0 / THEORY_TICK_HZ
    seeds = [args.seed + i for i in range(n_seeds)]
    window = int(round(seconds * THEORY_TICK_HZ))
    cells, comparisons = [], []
    for tau in taus:
        latency = LogNormal(tau * tau_m / math.exp(args.sigma**2 / 2), args.sigma)
        bound = theoretical_nstar(latency.mean, tau_m)
        if args.n_workers:
            ns = [int(n) for n in parse_positive_list(args.n_workers, "--n-workers")]
        elif quick:
            ns = sorted({bound, math.ceil(1.5 * bound), 2 * bound})
        else:
            ns = list(range(bound, 2 * bound + 1))
        warm = args.warmup_ticks if args.warmup_ticks is not None else WARMUP_TICKS + 3 * math.ceil(latency.max_hint / tau_m)
        for p in ps:
            undelayed = {s: undelayed_rate(p, seed=s, window_ticks=window, n_states=args.n_states) for s in seeds}
            for n in ns:
                here = {name: return_at(name, n, latency, p_minimax=p, seeds=seeds, warmup_ticks=warm, window_ticks=window,
                                        n_states=args.n_states, undelayed=undelayed, fill_p=args.fill_p)
                        for name in names}  # fmt: skip
                for cell in here.values():
                    cells.append({"tau_theta_ticks": tau, "p_minimax": p, "sigma": args.sigma, "bound": bound,
                                  **public(cell)})  # fmt: skip
                others = {k: v for k, v in here.items() if k != args.candidate}
                if not others:
                    continue
                best = max(others, key=lambda k: others[k]["return_mean"])
                cand = here[args.candidate]
                diff, se = paired(cand, others[best])
                comparisons.append({
                    "tau_theta_ticks": tau, "p_minimax": p, "n_workers": n, "bound": bound,
                    "candidate": args.candidate, "candidate_return": cand["return_mean"],
                    "best_other": best, "best_other_return": others[best]["return_mean"],
                    "difference": diff, "difference_se": _finite(se),
                    "margin": cand["return_mean"] / others[best]["return_mean"] - 1 if others[best]["return_mean"] > 0 else None,
                    "passes": bool(diff >= -PASS_Z * (se if math.isfinite(se) else 0.0) - 1e-12),
                })  # fmt: skip
    margins = [c["margin"] for c in comparisons if c["margin"] is not None]
    all_pass = all(c["passes"] for c in comparisons) if comparisons else None
    return {
        "clock": "virtual",
        "latency": "lognormal",
        "sigma": args.sigma,
        "n_states": args.n_states,
        "seeds": seeds,
        "window_ticks": window,
        "schedulers": names,
        "candidate": args.candidate,
        "fill_p": args.fill_p,
        "tolerance_p": {str(p): world_tolerance(p, args.n_states) for p in ps} if args.fill_p == "tolerance" else None,
        "cells": cells,
        "comparisons": comparisons,
        "candidate_passes_everywhere": all_pass,
        "candidate_max_margin": max(margins) if margins else None,
        "meets_target": bool(all_pass and margins and max(margins) >= TARGET_MARGIN),
        "judged_by": (
            f"paired per-tick reward differences (one world seed gives every scheduler the same state trajectory); "
            f"a cell passes when the candidate's mean is at least the best other's less {PASS_Z:g} pooled batch-means "
            f"standard errors of the difference; the target: every cell passes and the margin reaches "
            f"{TARGET_MARGIN:.0%} somewhere"
        ),
    }


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    console = Console()
    names = result["schedulers"]
    groups = sorted({(c["tau_theta_ticks"], c["p_minimax"]) for c in result["cells"]})
    for tau, p in groups:
        table = Table(title=f"reward per tick — τ̄_θ = {tau:g} ticks (lognormal σ {result['sigma']:g}), "
                            f"{'theory/still' if p >= 1 else f'delay-cycle p = {p:g}'}, {len(result['seeds'])} seed(s) × "
                            f"{result['window_ticks']} ticks")  # fmt: skip
        table.add_column("N_I", justify="right")
        for name in names:
            table.add_column(name, justify="right")
        table.add_column("margin", justify="right")
        table.add_column("pass", justify="right")
        cells = {(c["n_workers"], c["scheduler"]): c for c in result["cells"] if (c["tau_theta_ticks"], c["p_minimax"]) == (tau, p)}
        comps = {c["n_workers"]: c for c in result["comparisons"] if (c["tau_theta_ticks"], c["p_minimax"]) == (tau, p)}
        for n in sorted({n for n, _ in cells}):
            row = [str(n)]
            for name in names:
                c = cells[(n, name)]
                row.append(f"{c['return_mean']:.3f} ({c['inaction_fraction']:.0%} β, d {c['delay_mean_ticks'] or 0:.1f})")
            comp = comps.get(n)
            row += [f"{comp['margin']:+.1%}" if comp and comp["margin"] is not None else "—",
                    ("yes" if comp["passes"] else "NO") if comp else "—"]  # fmt: skip
            table.add_row(*row)
        console.print(table)
    print(f"{result['candidate']}: passes everywhere: {result['candidate_passes_everywhere']}, largest margin "
          f"{(result['candidate_max_margin'] or 0):+.1%}, target met: {result['meets_target']} ({result['judged_by']})")  # fmt: skip
