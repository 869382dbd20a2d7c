"""``nonstop bench return``: what each scheduler earns, at N_I from the bound ⌈τ̄_θ/τ_M⌉ to twice it.

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

The rivals are tuned per cell: quantile_hold at each hold quantile of `QUANTILES` and Algorithm 2 with
a fixed hold (``exp_hold@H``: Algorithm 2's starts, every action held H·τ̄_θ after its observation) at
each H of `HOLDS`, beside plain Algorithm 2; the best setting of each in that cell is the rival (an
advantage to the rivals: tuned on the data they are judged on). fill runs three ways: given the world's
p̂ (``fill``, as ``nonstop tolerance`` measures it), on its prior (``fill@prior``, what ``nonstop train``
runs with when no p is given) and fitting p to the rewards it is shown (``fill@rewards``).

The comparison: per cell (τ̄_θ, σ, p, N_I), ``--candidate`` (default ``fill@prior``: fill *without*
p) against the best tuned rival there. Every scheduler runs on the same world seed, and the world draws its
transition every tick whatever is played, so the state trajectories are identical and the per-tick
rewards are paired: the difference's standard error (SE) is the batch-means error of the per-tick
differences, pooled over seeds. The candidate *meets* the best rival in a cell when the difference is at
least −2 SE (`PASS_Z`), and *leads* it when the difference is at least +3 SE (`LEAD_Z`); the *target* is
met when it meets in every cell and is at least 10 % above the best rival somewhere.

The cells: the development cells (``--tau-theta`` × ``--p-minimax`` at ``--sigma``, seeds from
``--seed``: what fill's plans were chosen on) and the held-out cells (τ̄_θ 8, 70 × σ 0.25, 1 × p 0.9,
0.99 on seeds 1000–1004), never used in development; each at the bound, 1.5× and 2× (``--n-workers``
for others). A full run is long on 2 cores (hours: 12 schedulers × 5 seeds per held-out cell);
``--cells`` and, for the held-out cells, ``--tau-theta``/``--p-minimax`` run it in parts.

A scheduler shown rewards (`FillScheduler.observe_reward`) is fed every tick's reward and delay by a
host recorder, so ``fill`` fits the world's cost of delay as it runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from nonstop.bench.common import parse_positive_list

__all__ = [
    "DESCRIPTION",
    "add_arguments",
    "run",
    "render",
    "CellSettings",
    "ReturnRun",
    "measure_return",
    "return_at",
    "returns_in_two_worlds",
    "RewardFeed",
]

DESCRIPTION = (
    "return and regret split (Eq. 1) per scheduler, N_I from the bound to 2×; fill without p against the best "
    "tuned rival, on development and held-out cells (theory/delay-cycle, virtual clock)"
)
DEFAULT_SCHEDULERS = "exp_time,quantile_hold,fill"
#: warm-up ticks before the window, beyond 3 × the 99.9 % point of τ_θ (running estimates settle)
WARMUP_TICKS = 600
#: a cell passes when the candidate is within this many standard errors of the best other
PASS_Z = 2.0
#: the target's margin somewhere
TARGET_MARGIN = 0.10


#: quantile_hold's hold quantiles tried per cell (its best is the tuned rival)
QUANTILES = (0.5, 0.7, 0.9, 0.99, 0.999)
#: Algorithm 2 with a fixed hold (``exp_hold@H``): each action held to H·τ̄_θ after its observation
HOLDS = (1.25, 1.5, 2.0)
#: where fill gets the cost of delay, as ``fill@FROM``: the world's p̂ (``fill`` alone), its prior, or fitted
FILL_FROM = ("tolerance", "prior", "rewards")
#: the paired difference a candidate must reach over the best tuned rival to *lead* a cell (in standard errors)
LEAD_Z = 3.0
#: the development cells' schedulers: every rival at every setting, and fill with and without p
FULL_SCHEDULERS = ",".join(
    [
        "exp_time",
        *(f"quantile_hold@{q:g}" for q in QUANTILES),
        *(f"exp_hold@{h:g}" for h in HOLDS),
        "fill",
        "fill@prior",
        "fill@rewards",
    ]
)
QUICK_SCHEDULERS = "exp_time,quantile_hold@0.9,quantile_hold@0.999,exp_hold@1.5,fill,fill@prior"
#: held-out cells, never used while fill was developed: τ̄_θ, σ, p, and their own seeds
HELD_OUT_TAUS, HELD_OUT_SIGMAS, HELD_OUT_PS = (8.0, 70.0), (0.25, 1.0), (0.9, 0.99)
HELD_OUT_SEEDS = (1000, 1001, 1002, 1003, 1004)


def parse_spec(spec: str, mean_ticks: float) -> tuple[str, dict[str, Any], str | None]:
    """A scheduler of the bench, ``NAME`` or ``NAME@SETTING``, as (scheduler name, its options, where
    fill gets p): ``quantile_hold@Q`` (the hold at quantile Q of τ_θ), ``exp_hold@H`` (Algorithm 2's
    starts, every action held H·τ̄_θ ticks after its observation: `FillScheduler` plan ``now+fixed``),
    ``fill@tolerance|prior|rewards`` (``fill`` alone: tolerance).

    >>> parse_spec("quantile_hold@0.9", 5.0), parse_spec("exp_hold@1.5", 5.0)
    (('quantile_hold', {'quantile': 0.9}, None), ('fill', {'plan': 'now+fixed', 'cap': 8}, None))
    >>> parse_spec("fill@prior", 5.0)
    ('fill', {}, 'prior')
    """
    name, _, setting = spec.partition("@")
    if name == "fill":
        source = setting or "tolerance"
        if source not in FILL_FROM:
            raise ValueError(f"fill@FROM takes {', '.join(FILL_FROM)}, got {spec!r}")
        return "fill", {}, source
    if not setting:
        return name, {}, None
    try:
        value = float(setting)
    except ValueError:
        value = math.nan
    if name == "quantile_hold" and 0.0 < value < 1.0:
        return name, {"quantile": value}, None
    if name == "exp_hold" and 0.0 < value < 100.0:
        return "fill", {"plan": "now+fixed", "cap": max(1, math.ceil(value * mean_ticks - 1e-9))}, None
    raise ValueError(f"scheduler {spec!r}: quantile_hold@Q (0 < Q < 1), exp_hold@H (H > 0, × τ̄_θ) or fill@FROM")


def family(spec: str) -> str:
    """The rival a spec is one setting of (``quantile_hold@0.9`` → ``quantile_hold``); fill's ways of
    getting p are each their own (``fill``, ``fill@prior``, ``fill@rewards``)."""
    return spec if spec.startswith("fill") else spec.partition("@")[0]


class RewardFeed:
    """Host recorder that shows every tick's reward, and the applied action's delay (None on β's
    ticks), to a scheduler that takes them (``observe_reward``); nothing for one that does not."""

    def __init__(self, scheduler: Any) -> None:
        self.observe = getattr(scheduler, "observe_reward", None)

    def on_observation(self, tick: int, obs: Any) -> None:
        pass

    def on_tick(
        self,
        tick: int,
        *,
        agent: bool,
        action: Any,
        obs_tick: int,
        reward: float,
        terminated: bool,
        truncated: bool,
        terminal_obs: Any = None,
    ) -> None:
        if self.observe is not None:
            self.observe(float(reward), int(tick - obs_tick) if agent else None)


def world_for(p_minimax: float, n_states: int) -> tuple[str, dict[str, Any]]:
    """``theory/delay-cycle`` at ``p_minimax``, or ``theory/still`` at 1 (delay costs nothing), never
    truncating."""
    if p_minimax >= 1.0:
        return "theory/still", {"n": n_states, "max_steps": 10**12}
    return "theory/delay-cycle", {"n": n_states, "p_minimax": p_minimax, "max_steps": 10**12}


@dataclass(frozen=True)
class ReturnRun:
    """One virtual-clock run of `measure_return`: ``n_workers`` workers (or ``"auto"``) of ``scheduler``
    running `ObservedStatePolicy` behind ``latency`` on ``env``, measured over the ``window_ticks`` ticks
    after ``warmup_ticks``."""

    env: str
    env_kwargs: dict[str, Any]
    scheduler: str
    n_workers: int | str
    latency: Any
    seed: int
    warmup_ticks: int
    window_ticks: int
    #: the cost of delay ``fill`` is given (else it fits one to the rewards it is shown, with
    #: ``show_rewards``, or keeps its prior, as in ``nonstop train``)
    fill_p: float | None = None
    show_rewards: bool = True
    #: the scheduler's own settings (`parse_spec`)
    options: dict[str, Any] | None = None


def measure_return(run: ReturnRun) -> dict[str, Any]:
    """One run (`ReturnRun`): the rewards and agent flags of its window's ticks, the window's tick-log
    summary and, for a scheduler with a tuned cap, its end state."""
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.metrics.regret import ObservedStatePolicy
    from nonstop.policies import LatencyPolicy
    from nonstop.realtime.host import Session
    from nonstop.realtime.ticklog import SOURCE_AGENT

    # "auto" sizes N_I itself, from one worker (as `InferencePool` does for n_inference="auto")
    n_workers, latency, seed = run.n_workers, run.latency, run.seed
    warmup_ticks, window_ticks = run.warmup_ticks, run.window_ticks
    if isinstance(n_workers, str):
        if n_workers != "auto":
            raise ValueError(f"n_workers must be an int or 'auto', got {n_workers!r}")
        sched = make_scheduler("auto", 1, max_workers=512)
    else:
        given = {"p_minimax": run.fill_p} if run.scheduler == "fill" and run.fill_p is not None else {}
        sched = make_scheduler(run.scheduler, n_workers, **given, **(run.options or {}))
    recorder = RewardFeed(sched) if run.show_rewards else None
    with Session(run.env, clock="virtual", seed=seed, env_kwargs=run.env_kwargs, recorder=recorder) as world:
        space = world.action_space
        pool = InferencePool(
            world, lambda i: LatencyPolicy(ObservedStatePolicy(space), latency, seed=seed * 100_003 + i), sched
        ).start()
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


@dataclass(frozen=True)
class CellSettings:
    """What the cells of one `return_at` sweep share."""

    #: states of the delay-cycle world
    n_states: int = 64
    #: the same policy's reward per tick acting every tick with no delay on each seed's world
    #: (measured by `return_at` where a seed is missing)
    undelayed: dict[int, float] | None = None
    #: where ``fill`` gets the world's cost of delay: ``"tolerance"``, the world's p̂ as ``nonstop
    #: tolerance`` measures it (`world_tolerance`), ``"rewards"``, fitted as it runs, or ``"prior"``,
    #: neither (its prior, 0.99: what ``nonstop train --scheduler fill`` runs with)
    fill_p: str = "tolerance"


def return_at(
    scheduler: str,
    n_workers: int | str,
    latency: Any,
    *,
    p_minimax: float,
    seeds: list[int],
    warmup_ticks: int,
    window_ticks: int,
    settings: CellSettings = CellSettings(),
) -> dict[str, Any]:
    """``scheduler``'s return with ``n_workers`` over ``seeds`` (`measure_return`), with Equation 1's split.
    ``scheduler`` may carry a setting (`parse_spec`: ``quantile_hold@0.9``, ``exp_hold@1.5``, ``fill@prior``;
    a fill@FROM overrides ``settings.fill_p``). Returns the mean, spread (sd over seeds) and pooled standard
    error of the reward per tick, the split against the optimum (1 per tick on these worlds) and against
    the undelayed rate, the inaction fraction and delay, and the per-seed reward series (``_series``,
    for paired comparisons; not JSON)."""
    from nonstop.metrics.regret import regret_split

    n_states = settings.n_states
    env, kwargs = world_for(p_minimax, n_states)
    from nonstop.envs.theory import THEORY_TICK_HZ

    name, options, source = parse_spec(scheduler, latency.mean * THEORY_TICK_HZ)
    fill_p = source or settings.fill_p
    undelayed = dict(settings.undelayed or {})
    runs, splits = [], []
    for seed in seeds:
        if seed not in undelayed:
            undelayed[seed] = undelayed_rate(p_minimax, seed=seed, window_ticks=window_ticks, n_states=n_states)
        p_given = world_tolerance(p_minimax, n_states) if fill_p == "tolerance" else None
        got = measure_return(
            ReturnRun(
                env=env,
                env_kwargs=kwargs,
                scheduler=name,
                n_workers=n_workers,
                latency=latency,
                seed=seed,
                warmup_ticks=warmup_ticks,
                window_ticks=window_ticks,
                fill_p=p_given,
                show_rewards=fill_p != "prior",
                options=options,
            )
        )
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
    if "cap" in runs[0] and name == "fill" and not options:  # fill as it tunes itself (not a fixed-hold rival)
        out["cap_ticks"] = [r["cap"] for r in runs]
        out["plan"] = [r["plan"] for r in runs]
        out["p_used"] = [round(float(r["p_minimax"]), 5) for r in runs]
        out["p_from"] = fill_p
    return out


#: the figures of a `return_at` cell that `returns_in_two_worlds` keeps
_TWO_WORLD_KEYS = (
    "return_mean",
    "return_sd",
    "return_se",
    "inaction_fraction",
    "delay_mean_ticks",
    "undelayed_rate",
    "regret",
    "regret_learning",
    "regret_inaction",
    "regret_delay",
    "seeds",
)


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
        cell = return_at(
            scheduler,
            n_workers,
            latency,
            p_minimax=p,
            seeds=seeds,
            warmup_ticks=warmup_ticks,
            window_ticks=window_ticks,
        )
        out[key] = {"p_minimax": p, **{k: cell[k] for k in _TWO_WORLD_KEYS}}
    return out


_TOLERANCE: dict[tuple[float, int], float] = {}


def world_tolerance(p_minimax: float, n_states: int = 64, horizon: int = 8) -> float:
    """The world's per-tick stay probability as ``nonstop tolerance`` measures it from copies of the env
    (`nonstop.studies.tolerance.estimate_predictability`: ``q_k**(1/k)`` at k = ``horizon``, 50 start
    states × 32 copies), what a user hands ``fill`` as ``p_minimax``. Cached per world."""
    from nonstop.studies.tolerance import estimate_predictability

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
    got = measure_return(
        ReturnRun(
            env=env,
            env_kwargs=kwargs,
            scheduler="sequential",
            n_workers=1,
            latency=Constant(1 / 60),
            seed=seed,
            warmup_ticks=30,
            window_ticks=window_ticks,
        )
    )
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
    parser.add_argument(
        "--p-minimax",
        default=None,
        help="the world's stay probability per tick, comma-separated; 1 is theory/still, where delay "
        "costs nothing (default 0.97,0.999; quick 0.97)",
    )
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal log-spread of τ_θ (default 0.5)")
    parser.add_argument(
        "--n-workers",
        default=None,
        help="N_I, comma-separated (default: the bound ⌈τ̄_θ/τ_M⌉, 1.5× and 2×; quick: the bound and 2×)",
    )
    parser.add_argument(
        "--schedulers",
        default=None,
        help="comma-separated schedulers, each NAME or NAME@SETTING: quantile_hold@Q, exp_hold@H "
        "(Algorithm 2, every action held H·τ̄_θ), fill@tolerance|prior|rewards (default: exp_time, "
        "quantile_hold at each q of 0.5,0.7,0.9,0.99,0.999, exp_hold at 1.25,1.5,2, fill with and "
        "without p; quick a few)",
    )
    parser.add_argument(
        "--candidate",
        default=None,
        help="the scheduler held to the best tuned rival (default fill@prior: fill without p; with "
        "fill@rewards and fill beside it)",
    )
    parser.add_argument(
        "--fill-p",
        choices=FILL_FROM,
        default="tolerance",
        help="where plain `fill` gets the cost of delay: the world's p̂ as `nonstop tolerance` measures "
        "it (default), fitted to the rewards it is shown as it runs, or neither (its prior, as in "
        "`nonstop train`); fill@FROM names one explicitly",
    )
    parser.add_argument(
        "--cells",
        choices=("dev", "held-out", "both"),
        default=None,
        help="dev: the --tau-theta × --p-minimax cells fill was developed on (seeds from --seed); "
        "held-out: τ̄_θ 8,70 × σ 0.25,1 × p 0.9,0.99 on seeds 1000-1004, never used in development; "
        "both (default; quick: dev)",
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds per dev cell (default 2; quick 1)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="measured world seconds per run (default 120, held-out 60; quick 20)",
    )
    parser.add_argument(
        "--warmup-ticks",
        type=int,
        default=None,
        help=f"ticks before the window (default {WARMUP_TICKS} + 3 × the 99.9 %% point of τ_θ)",
    )
    parser.add_argument("--n-states", type=int, default=64, help="states on the cycle (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")


def _groups(args: argparse.Namespace, quick: bool) -> list[dict[str, Any]]:
    """The cells' settings: (set, τ̄_θ, σ, p, seeds, held-out or not)."""
    cells = args.cells or ("dev" if quick else "both")
    out = []
    if cells in ("dev", "both"):
        taus = (
            parse_positive_list(args.tau_theta, "--tau-theta") if args.tau_theta else ([5.0] if quick else [5.0, 20.0])
        )
        ps = (
            parse_positive_list(args.p_minimax, "--p-minimax")
            if args.p_minimax
            else ([0.97] if quick else [0.97, 0.999])
        )
        n_seeds = args.seeds if args.seeds is not None else (1 if quick else 2)
        if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 1:
            raise ValueError(f"--seeds must be an int >= 1, got {n_seeds!r}")
        out += [
            {"set": "dev", "tau": t, "sigma": args.sigma, "p": p, "seeds": [args.seed + i for i in range(n_seeds)]}
            for t in taus
            for p in ps
        ]
    if cells in ("held-out", "both"):
        # with --cells held-out, --tau-theta / --p-minimax pick among the held-out settings (to run them in parts)
        only = cells == "held-out"
        taus = [
            t
            for t in HELD_OUT_TAUS
            if not (only and args.tau_theta) or t in parse_positive_list(args.tau_theta, "--tau-theta")
        ]
        ps = [
            p
            for p in HELD_OUT_PS
            if not (only and args.p_minimax) or p in parse_positive_list(args.p_minimax, "--p-minimax")
        ]
        if not taus or not ps:
            raise ValueError(
                f"--cells held-out runs τ̄_θ {HELD_OUT_TAUS} and p {HELD_OUT_PS}: --tau-theta and --p-minimax "
                f"pick among them, got {args.tau_theta!r}, {args.p_minimax!r}"
            )
        out += [
            {"set": "held-out", "tau": t, "sigma": sg, "p": p, "seeds": list(HELD_OUT_SEEDS)}
            for t in taus
            for sg in HELD_OUT_SIGMAS
            for p in ps
        ]
    return out


def compare(candidate: str, here: dict[str, dict[str, Any]], z: float = PASS_Z) -> dict[str, Any]:
    """``candidate`` against the best tuned rival in one cell: the rivals are every scheduler that is not a
    fill (each family at its best setting: quantile_hold at its best q, exp_hold at its best H); the
    paired difference and its standard error; *meets* (difference ≥ −``z`` SE) and *leads* (≥ `LEAD_Z` SE)."""
    rivals = {k: v for k, v in here.items() if not k.startswith("fill")}
    if not rivals:
        raise ValueError("the comparison needs at least one rival that is not fill")
    best = max(rivals, key=lambda k: rivals[k]["return_mean"])
    by_family: dict[str, str] = {}
    for k in rivals:
        f = family(k)
        if f not in by_family or rivals[k]["return_mean"] > rivals[by_family[f]]["return_mean"]:
            by_family[f] = k
    cand = here[candidate]
    diff, se = paired(cand, rivals[best])
    se_ = se if math.isfinite(se) else 0.0
    rival_mean = rivals[best]["return_mean"]
    return {
        "candidate": candidate,
        "candidate_return": cand["return_mean"],
        "best_rival": best,
        "best_rival_return": rival_mean,
        "best_per_family": {f: {"setting": k, "return": rivals[k]["return_mean"]} for f, k in by_family.items()},
        "difference": diff,
        "difference_se": _finite(se),
        "z": diff / se if se > 0 and math.isfinite(se) else None,
        "margin": cand["return_mean"] / rival_mean - 1 if rival_mean > 0 else None,
        "meets": bool(diff >= -z * se_ - 1e-12),
        "leads": bool(diff >= LEAD_Z * se_ and diff > 0),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.envs.theory import check_delay_cycle_args

    quick = bool(getattr(args, "quick", False))
    groups = _groups(args, quick)
    for g in groups:
        check_delay_cycle_args(args.n_states, min(g["p"], 1.0))
    names, candidate = _schedulers(args, quick)
    seconds = args.seconds if args.seconds is not None else (20.0 if quick else None)
    if seconds is not None and not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--seconds must be a positive number of world seconds, got {seconds!r}")
    if not 0.0 < args.sigma < 3.0:
        raise ValueError(f"--sigma must be in (0, 3), got {args.sigma!r}")
    cells: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    for g in groups:
        _group(args, g, names, candidate, seconds, cells, comparisons)
    return _summary(args, groups, names, candidate, cells, comparisons)


def _schedulers(args: argparse.Namespace, quick: bool) -> tuple[list[str], str]:
    """The schedulers compared (each checked before any run) and the candidate among them."""
    from nonstop.inference.schedulers import make_scheduler

    names = [
        s.strip() for s in (args.schedulers or (QUICK_SCHEDULERS if quick else FULL_SCHEDULERS)).split(",") if s.strip()
    ]
    for name in names:
        make_scheduler(parse_spec(name, 5.0)[0], 2)  # an unknown name or setting fails before any run
    candidate = args.candidate or ("fill@prior" if "fill@prior" in names else "fill")
    if candidate not in names:
        raise ValueError(f"--candidate {candidate!r} must be one of --schedulers ({', '.join(names)})")
    if not any(not n.startswith("fill") for n in names):
        raise ValueError(
            "--schedulers needs at least one rival that is not fill (exp_time, quantile_hold@Q, exp_hold@H)"
        )
    return names, candidate


def _group(
    args: argparse.Namespace,
    g: dict[str, Any],
    names: list[str],
    candidate: str,
    seconds: float | None,
    cells: list[dict[str, Any]],
    comparisons: list[dict[str, Any]],
) -> None:
    """One group's cells (τ̄_θ, σ, p; each N of workers), every scheduler in each, added to ``cells``
    and the candidate's comparison with its rivals to ``comparisons``."""
    from nonstop.envs.theory import THEORY_TICK_HZ
    from nonstop.metrics.nstar import theoretical_nstar
    from nonstop.policies import LogNormal

    quick = bool(getattr(args, "quick", False))
    fills = [n for n in names if n.startswith("fill")]
    tau_m = 1.0 / THEORY_TICK_HZ
    tau, sigma, p, seeds = g["tau"], g["sigma"], g["p"], g["seeds"]
    held = g["set"] == "held-out"
    window = int(round((seconds or (60.0 if held else 120.0)) * THEORY_TICK_HZ))
    latency = LogNormal(tau * tau_m / math.exp(sigma**2 / 2), sigma)
    bound = theoretical_nstar(latency.mean, tau_m)
    if args.n_workers:
        ns = [int(n) for n in parse_positive_list(args.n_workers, "--n-workers")]
    elif quick:
        ns = sorted({bound, 2 * bound})
    else:  # every N from the bound to twice it: --n-workers
        ns = sorted({bound, math.ceil(1.5 * bound), 2 * bound})
    warm = (
        args.warmup_ticks if args.warmup_ticks is not None else WARMUP_TICKS + 3 * math.ceil(latency.max_hint / tau_m)
    )
    undelayed = {s: undelayed_rate(p, seed=s, window_ticks=window, n_states=args.n_states) for s in seeds}
    settings = CellSettings(n_states=args.n_states, undelayed=undelayed, fill_p=args.fill_p)
    for n in ns:
        here = {
            name: return_at(
                name, n, latency, p_minimax=p, seeds=seeds, warmup_ticks=warm, window_ticks=window, settings=settings
            )
            for name in names
        }
        key = {
            "set": g["set"],
            "tau_theta_ticks": tau,
            "sigma": sigma,
            "p_minimax": p,
            "n_workers": n,
            "bound": bound,
            "seeds": seeds,
        }
        for cell in here.values():
            cells.append({**key, **public(cell), "scheduler": cell["scheduler"]})
        row = {**key, **compare(candidate, here)}
        row["fills"] = {f: compare(f, here) for f in fills if f != candidate}  # fill with p, and fitted, beside it
        comparisons.append(row)
        print(
            f"return: {g['set']} τ̄_θ {tau:g} σ {sigma:g} p {p:g} N {n}: {candidate} {row['candidate_return']:.3f}, "
            f"{row['best_rival']} {row['best_rival_return']:.3f}, diff {row['difference']:+.3f} ± "
            f"{row['difference_se'] or 0:.3f}",
            file=sys.stderr,
            flush=True,
        )


#: what `run`'s ``candidate_short_of_best`` says of each cell where the candidate falls short
_SHORT_KEYS = ("set", "tau_theta_ticks", "sigma", "p_minimax", "n_workers", "best_rival", "difference", "difference_se")


def _summary(
    args: argparse.Namespace,
    groups: list[dict[str, Any]],
    names: list[str],
    candidate: str,
    cells: list[dict[str, Any]],
    comparisons: list[dict[str, Any]],
) -> dict[str, Any]:
    """Every cell and comparison, and whether the candidate meets the best tuned rival everywhere."""
    margins = [c["margin"] for c in comparisons if c["margin"] is not None]
    all_meet = all(c["meets"] for c in comparisons) if comparisons else None
    held_rows = [c for c in comparisons if c["set"] == "held-out"]
    return {
        "clock": "virtual",
        "latency": "lognormal",
        "sigma": args.sigma,
        "n_states": args.n_states,
        "schedulers": names,
        "candidate": candidate,
        "fill_p": args.fill_p,
        "tolerance_p": (
            {str(g["p"]): world_tolerance(g["p"], args.n_states) for g in groups}
            if "fill" in names and args.fill_p == "tolerance"
            else None
        ),
        "cells": cells,
        "comparisons": comparisons,
        "candidate_meets_everywhere": all_meet,
        # where the candidate (fill without p, by default) does not meet the best tuned rival
        "candidate_short_of_best": [{k: c[k] for k in _SHORT_KEYS} for c in comparisons if not c["meets"]],
        "held_out_meets": all(c["meets"] for c in held_rows) if held_rows else None,
        "candidate_leads_in": sum(c["leads"] for c in comparisons),
        "candidate_max_margin": max(margins) if margins else None,
        "meets_target": bool(all_meet and margins and max(margins) >= TARGET_MARGIN),
        "judged_by": (
            f"paired per-tick reward differences (one world seed gives every scheduler the same state trajectory), "
            f"their standard error the pooled batch-means error; the candidate *meets* the best tuned rival (each "
            f"rival at its best setting in that cell) when the difference is at least −{PASS_Z:g} SE, and *leads* "
            f"when it is at least +{LEAD_Z:g} SE; the target: it meets everywhere and its margin reaches "
            f"{TARGET_MARGIN:.0%} somewhere"
        ),
    }


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"{result['candidate']} against the best tuned rival, per cell (reward per tick; paired "
        f"difference ± its SE; virtual clock, theory/delay-cycle)"
    )
    for col in (
        "set",
        "τ̄_θ",
        "σ",
        "p",
        "N_I",
        result["candidate"],
        "best rival",
        "its return",
        "diff ± SE",
        "meets",
        "leads",
        "others of fill (diff ± SE)",
    ):
        table.add_column(col, justify="right")
    for c in result["comparisons"]:
        others = "; ".join(
            f"{f}: {o['difference']:+.3f} ± {o['difference_se'] or 0:.3f}" for f, o in c["fills"].items()
        )
        table.add_row(
            c["set"],
            f"{c['tau_theta_ticks']:g}",
            f"{c['sigma']:g}",
            f"{c['p_minimax']:g}",
            str(c["n_workers"]),
            f"{c['candidate_return']:.3f}",
            c["best_rival"],
            f"{c['best_rival_return']:.3f}",
            f"{c['difference']:+.3f} ± {c['difference_se'] or 0:.3f}",
            "yes" if c["meets"] else "NO",
            "yes" if c["leads"] else "no",
            others or "—",
        )
    console.print(table)
    short = result["candidate_short_of_best"]
    print(
        f"{result['candidate']}: meets the best tuned rival in {len(result['comparisons']) - len(short)} of "
        f"{len(result['comparisons'])} cells (held-out: {result['held_out_meets']}), leads in "
        f"{result['candidate_leads_in']}, largest margin {(result['candidate_max_margin'] or 0):+.1%}; "
        f"{result['judged_by']}"
    )
    for c in short:
        print(
            f"  short: {c['set']} τ̄_θ {c['tau_theta_ticks']:g} σ {c['sigma']:g} p {c['p_minimax']:g} N {c['n_workers']}: "
            f"{c['difference']:+.3f} ± {c['difference_se'] or 0:.3f} against {c['best_rival']}"
        )
