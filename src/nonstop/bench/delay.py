"""``nonstop bench delay``: what delay costs a learner, and what learning that pays for delay recovers.

Staggering removes inaction, not delay: with a model of ``τ`` ticks staggered over ``τ`` workers the
agent acts at every tick, yet every action lands ``τ`` ticks after the observation it was computed
on. Per world (``--envs``), model latency (``--taus``, ticks, staggered: N_I = τ, Algorithm 1) and
algorithm (``--algos``: ``sac``, ``sac+delay`` for SAC with ``--delay-aware``, ``bpql``, ``rtac``, ``dcac``,
any registered ``--algo`` with or without ``+delay``), ``nonstop train`` runs on the virtual clock
for ``--ticks`` agent ticks, for each seed of ``--seeds``. A run's return is the mean of its last
``--last`` finished training episodes (the policy as it trains, exploring); per cell the bench
reports the mean over seeds with a 95 % confidence interval (Student's t over the seeds), and the
tick log's inaction and delay. A cell whose algorithm refuses its τ (`Algorithm.check_timing`: RTAC
needs 2 ticks or more) is not run, and the output says so (``skipped``).

The judged figure, per delay-paying algorithm at the largest τ: the share of plain SAC's loss it
recovers, ``(R_algo(τ) − R_sac(τ)) / (R_sac(τ_min) − R_sac(τ))`` (target: ≥ 85 % for ``sac+delay``,
``bpql``, ``dmsac`` or ``dcac``). Plain SAC must show the loss: its interval at τ_min lies above its interval at τ_max, or the
bench says it cannot judge. Beside the shares of the means, the loss and each share come with a 95 %
interval over seeds paired by seed (the same seed runs every cell: its loss ``R_sac,s(τ_min) − R_sac,s(τ)``
and its share, Student's t over the seeds that ran all three). ``--budget`` sizes the whole grid as ``nonstop paper`` does (tiny: a CI
smoke run under a minute; ``--quick`` is tiny); a flag given beside it wins.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from nonstop.bench.common import interval

__all__ = ["DESCRIPTION", "BUDGETS", "add_arguments", "run", "render", "run_cell", "interval", "recovered"]

DESCRIPTION = "return with 95-percent intervals, inaction and delay of SAC, delay-aware SAC, BPQL, RTAC and DCAC at model latencies of 1-6 ticks (virtual clock)"

#: each budget's grid (a flag given beside ``--budget`` wins)
BUDGETS: dict[str, dict[str, Any]] = {
    "tiny": {"envs": "Pendulum-v1", "taus": "1,6", "algos": "sac,sac+delay", "seeds": 1, "ticks": 400, "last": 1},
    "small": {
        "envs": "Pendulum-v1",
        "taus": "1,3,6",
        "algos": "sac,sac+delay,bpql,rtac,dcac",
        "seeds": 3,
        "ticks": 15_000,
        "last": 10,
    },
    "full": {
        "envs": "Pendulum-v1,HalfCheetah-v5",
        "taus": "1,3,6",
        "algos": "sac,sac+delay,bpql,rtac,dcac",
        "seeds": 5,
        "ticks": 100_000,
        "last": 10,
    },
}
#: the share of plain SAC's loss a delay-paying algorithm must recover at the largest τ
TARGET_RECOVERY = 0.85
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--budget",
        choices=sorted(BUDGETS),
        default=None,
        help="the grid's size: tiny (CI, under a minute), small (Pendulum, 3 seeds, 15k ticks a run), "
        "full (and HalfCheetah-v5, 5 seeds, 100k ticks) (default: small; --quick: tiny)",
    )
    p.add_argument("--envs", default=None, help="comma-separated worlds (default: the budget's)")
    p.add_argument(
        "--taus", default=None, help="comma-separated model latencies in ticks, staggered (default: the budget's)"
    )
    p.add_argument(
        "--algos",
        default=None,
        help="comma-separated algorithms, NAME or NAME+delay (with --delay-aware) (default: the budget's)",
    )
    p.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: the budget's)")
    p.add_argument("--ticks", type=int, default=None, help="agent ticks per run (default: the budget's)")
    p.add_argument(
        "--last", type=int, default=None, help="finished episodes whose mean return is a run's (default: the budget's)"
    )
    p.add_argument(
        "--algo-arg",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of every algorithm in the grid, repeatable (hidden=[64,64], batch_size=128; "
        "default: each algorithm's own)",
    )
    p.add_argument("--plot", default=None, metavar="PATH", help="also write a figure to PATH (.png)")
    p.add_argument(
        "--judged-cells",
        action="store_true",
        help="run the cells the verdict reads only: plain SAC at every τ, the other algorithms at the largest "
        "(a third fewer runs at two τ)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at once, each in a process of its own (default: 1, one after another; a run's figures do not "
        "depend on it: the virtual clock)",
    )


def grid(args: argparse.Namespace) -> dict[str, Any]:
    """The grid the flags and the budget describe, each value checked at the door."""
    budget = args.budget or ("tiny" if getattr(args, "quick", False) else "small")
    g = dict(BUDGETS[budget], budget=budget)
    for key in ("envs", "taus", "algos", "seeds", "ticks", "last"):
        if getattr(args, key, None) is not None:
            g[key] = getattr(args, key)
    envs = [e.strip() for e in str(g["envs"]).split(",") if e.strip()]
    try:
        taus = [int(t) for t in str(g["taus"]).split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--taus takes comma-separated whole numbers of ticks, got {g['taus']!r}") from None
    algos = [a.strip() for a in str(g["algos"]).split(",") if a.strip()]
    if not envs or not algos or not taus or min(taus) < 1:
        raise ValueError("--envs, --algos and --taus need at least one value each, and every τ at least 1 tick")
    g["jobs"] = getattr(args, "jobs", 1)
    g["judged_cells"] = bool(getattr(args, "judged_cells", False))
    for key in ("seeds", "ticks", "last", "jobs"):
        if not (isinstance(g[key], int) and g[key] >= 1):
            raise ValueError(f"--{key} must be a whole number >= 1, got {g[key]!r}")
    from nonstop.envs.registry import parse_env_args

    try:
        g["algo_args"] = parse_env_args(getattr(args, "algo_arg", None))  # KEY=VALUE, values read as JSON
    except ValueError as exc:
        raise ValueError(str(exc).replace("--env-arg", "--algo-arg")) from None
    from nonstop.experiment.registry import names

    known = set(names("algo"))
    for a in algos:
        if a.removesuffix("+delay") not in known:
            raise ValueError(
                f"unknown algorithm {a!r} in --algos: use NAME or NAME+delay with NAME one of {sorted(known)}"
            )
    return {**g, "envs": envs, "taus": sorted(set(taus)), "algos": algos}


def run_cell(
    env: str, tau: int, algo: str, seed: int, ticks: int, last: int, algo_args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One training run on the virtual clock: ``algo`` (``NAME`` or ``NAME+delay``, with the settings
    ``algo_args`` changes) behind a ``tau``-tick model staggered over ``tau`` workers; its recent
    return, inaction and delay, and its wall time."""
    from nonstop.envs import env_info
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.loop import train

    name, aware = algo.removesuffix("+delay"), algo.endswith("+delay")
    tick_hz = env_info(env).tick_hz
    from nonstop.experiment.registry import lookup

    algo_class = lookup("algo", name)
    settings = (
        {algo_class.settings_field: algo_class.config_class.for_family(env_info(env).family, **algo_args)}
        if algo_args
        else {}
    )
    cfg = TrainConfig(
        env=env,
        clock="virtual",
        seconds=(ticks + 0.5) / tick_hz,
        latency=f"{tau}t",
        scheduler="max_time",
        n_inference=tau,
        algo=name,
        delay_aware=aware,
        seed=seed,
        **settings,
    )
    started = time.monotonic()
    out = train(
        cfg,
        on_progress=_say_progress(f"{env} τ {tau} {algo} seed {seed}", ticks, started),
        progress_every=_tenth(ticks, tick_hz),
    )
    returns = [float(r) for r in out["episode_returns"]]
    summary = out["summary"]
    return {
        "env": env,
        "tau": tau,
        "algo": algo,
        "seed": seed,
        "return": float(np.mean(returns[-last:])) if returns else None,
        "episodes": len(returns),
        "inaction": float(summary["inaction_fraction"]),
        "delay_ticks": float(summary["delay_mean_ticks"]) if summary["agent_ticks"] else None,
        "updates": int(out["updates"] or 0),
        "wall_s": time.monotonic() - started,
    }


def _tenth(ticks: int, tick_hz: float) -> float:
    """World seconds between a run's progress lines: about a tenth of its ``ticks``, in whole slices of the run
    (`SLICE_TICKS`), so that saying how far a run is does not move where its slices fall (the virtual clock's
    figures stay the same)."""
    from nonstop.experiment.run import SLICE_TICKS

    slices = max(1, round(ticks / 10 / SLICE_TICKS))
    return slices * SLICE_TICKS / tick_hz


def _say_progress(label: str, ticks: int, started: float) -> Any:
    """A line on stderr per progress row of one run (a long grid shows its way between runs' ends)."""

    said = [-1]  # the ticks of the last line: the run's last half-tick slice says nothing new

    def say(row: dict[str, Any]) -> None:
        if row["env_ticks"] == said[0]:
            return
        said[0] = row["env_ticks"]
        recent = row["recent_return"]
        shown = "—" if recent != recent else f"{recent:,.1f}"  # NaN: no episode finished yet
        print(
            f"bench delay: {label}: {min(row['env_ticks'], ticks):,} of {ticks:,} ticks, recent return {shown}, "
            f"{row['updates']:,} updates, {time.monotonic() - started:,.0f} s",
            file=sys.stderr,
            flush=True,
        )

    return say


def recovered(plain_fast: float, plain_slow: float, other_slow: float) -> float | None:
    """The share of plain SAC's loss to delay that ``other`` wins back at the slow τ.

    >>> recovered(-169.0, -1352.0, -267.0)  # the anchor: SB3 SAC on Pendulum at d 0 and 6, with the buffer
    0.917...
    """
    loss = plain_fast - plain_slow
    return (other_slow - plain_slow) / loss if loss > 0 else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    g = grid(args)
    started = time.monotonic()
    plan = [
        (env, tau, algo, seed, g["ticks"], g["last"], g["algo_args"])
        for env in g["envs"]
        for tau in g["taus"]
        for algo in g["algos"]
        if not g["judged_cells"] or algo == "sac" or tau == g["taus"][-1]
        for seed in range(g["seeds"])
    ]
    plan, skipped = _premised(plan)
    runs = _run_all(plan, g["jobs"])
    cells = []
    for env in g["envs"]:
        for tau in g["taus"]:
            for algo in g["algos"]:
                mine = [r for r in runs if (r["env"], r["tau"], r["algo"]) == (env, tau, algo)]
                if not mine:
                    continue
                cells.append(
                    {
                        "env": env,
                        "tau": tau,
                        "algo": algo,
                        "return": interval([r["return"] for r in mine]),
                        "inaction": float(np.mean([r["inaction"] for r in mine])),
                        "delay_ticks": _mean([r["delay_ticks"] for r in mine]),
                        "wall_s": float(sum(r["wall_s"] for r in mine)),
                    }
                )
    result: dict[str, Any] = {
        "grid": {
            k: g[k] for k in ("budget", "envs", "taus", "algos", "seeds", "ticks", "last", "algo_args", "judged_cells")
        },
        "jobs": g["jobs"],
        "cells": cells,
        "skipped": skipped,
        "runs": runs,
        "verdicts": _verdicts(cells, g, runs),
        "wall_s": time.monotonic() - started,
    }
    if args.plot:
        result["plot"] = str(_plot(result, Path(args.plot)))
    return result


def _premised(plan: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """The runs whose algorithm accepts their τ (`Algorithm.check_timing`: RTAC needs 2 ticks or more),
    and one line per cell left out, saying why."""
    from nonstop.experiment.registry import lookup

    kept, skipped = [], []
    for spec in plan:
        env, tau, algo = spec[:3]
        try:
            lookup("algo", algo.removesuffix("+delay")).check_timing(float(tau), "max_time")
        except ValueError as exc:
            cell = {"env": env, "tau": tau, "algo": algo, "why": str(exc)}
            if cell not in skipped:
                skipped.append(cell)
            continue
        kept.append(spec)
    return kept, skipped


def _run_all(plan: list[tuple[Any, ...]], jobs: int) -> list[dict[str, Any]]:
    """Every run of ``plan`` (`run_cell`'s arguments), ``jobs`` at once in fresh processes, started seed by
    seed (1: here, in turn); a JSON line per run to stderr as each ends (a long grid shows its way, and one
    cut short keeps whole seeds), the runs in plan order."""
    if jobs == 1:
        runs = []
        for spec in plan:
            runs.append(r := run_cell(*spec))
            print(json.dumps(r), file=sys.stderr, flush=True)
        return runs
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done: dict[int, dict[str, Any]] = {}
    # each run in a session of its own: where the kernel shares the CPU by session (Linux's autogroup), N
    # jobs get N shares, as N separate commands would; the runs are ended here if the bench is
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=os.setsid)
    try:
        # seed by seed (a seed's cells all start before the next seed's): a grid cut short has whole seeds
        order = sorted(range(len(plan)), key=lambda k: (plan[k][3], k))
        futures = {pool.submit(run_cell, *plan[k]): k for k in order}
        for future in as_completed(futures):
            done[futures[future]] = r = future.result()
            print(json.dumps(r), file=sys.stderr, flush=True)
    except BaseException:
        for process in list(getattr(pool, "_processes", {}).values()):  # not in our process group any more
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [done[k] for k in range(len(plan))]


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _verdicts(
    cells: list[dict[str, Any]], g: dict[str, Any], runs: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Per world: plain SAC's loss from the fastest to the slowest τ, and each delay-paying algorithm's
    recovery; with ``runs``, each also as a 95 % interval over seeds, paired by seed."""
    fast, slow = g["taus"][0], g["taus"][-1]
    at = {(c["env"], c["tau"], c["algo"]): c["return"] for c in cells}
    seeded = {(r["env"], r["tau"], r["algo"], r["seed"]): r["return"] for r in runs or [] if r["return"] is not None}
    out = []
    for env in g["envs"]:
        plain_fast, plain_slow = at.get((env, fast, "sac")), at.get((env, slow, "sac"))
        if plain_fast is None or plain_slow is None or fast == slow or None in (plain_fast["mean"], plain_slow["mean"]):
            continue
        if plain_fast["low"] is not None and plain_slow["high"] is not None:
            shows_loss = plain_fast["low"] > plain_slow["high"]
        else:  # one seed: no intervals, the means say it
            shows_loss = plain_fast["mean"] > plain_slow["mean"]
        row: dict[str, Any] = {
            "env": env,
            "tau_fast": fast,
            "tau_slow": slow,
            "sac_loss": plain_fast["mean"] - plain_slow["mean"],
            "sac_shows_loss": bool(shows_loss),
            "recovered": {},
        }
        seeds = sorted({s for (e, t, a, s) in seeded if (e, t, a) == (env, fast, "sac") and (e, slow, a, s) in seeded})
        if seeds:
            row["sac_loss_interval"] = interval(
                [seeded[(env, fast, "sac", s)] - seeded[(env, slow, "sac", s)] for s in seeds]
            )
            row["recovered_interval"] = {}
        for algo in g["algos"]:
            if algo == "sac" or (env, slow, algo) not in at or at[(env, slow, algo)]["mean"] is None:
                continue
            row["recovered"][algo] = recovered(plain_fast["mean"], plain_slow["mean"], at[(env, slow, algo)]["mean"])
            if seeds:
                row["recovered_interval"][algo] = interval(
                    [
                        recovered(
                            seeded[(env, fast, "sac", s)], seeded[(env, slow, "sac", s)], seeded[(env, slow, algo, s)]
                        )
                        for s in seeds
                        if (env, slow, algo, s) in seeded
                    ]
                )
        judged = [
            v for a, v in row["recovered"].items() if a in ("sac+delay", "dcac", "bpql", "dmsac") and v is not None
        ]
        row["meets_target"] = bool(shows_loss and judged and max(judged) >= TARGET_RECOVERY)
        out.append(row)
    return out


def _plot(result: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = result["grid"]
    fig, axes = plt.subplots(1, len(g["envs"]), figsize=(5.5 * len(g["envs"]), 4.2), squeeze=False)
    for ax, env in zip(axes[0], g["envs"]):
        for k, algo in enumerate(g["algos"]):
            cells = [c for c in result["cells"] if c["env"] == env and c["algo"] == algo]
            x = np.array([c["tau"] for c in cells], float) + 0.06 * (k - len(g["algos"]) / 2)
            mean = np.array([np.nan if c["return"]["mean"] is None else c["return"]["mean"] for c in cells])
            low = np.array([np.nan if c["return"]["low"] is None else c["return"]["low"] for c in cells])
            high = np.array([np.nan if c["return"]["high"] is None else c["return"]["high"] for c in cells])
            err = np.nan_to_num(np.vstack([mean - low, high - mean]))
            ax.errorbar(x, mean, yerr=err, marker="o", capsize=3, label=algo)
        ax.set_title(f"{env}: return vs model latency (staggered)")
        ax.set_xlabel("τ (ticks): every action lands τ ticks after its observation")
        ax.set_ylabel(f"mean return, last {g['last']} episodes (95% CI over {g['seeds']} seeds)")
        ax.set_xticks(g["taus"])
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console

    console = Console()
    g = result["grid"]
    console.print(
        f"[bold]bench delay[/] ({g['budget']}: {g['seeds']} seeds × {g['ticks']:,} agent ticks a run, "
        f"virtual clock, {result['wall_s']:.0f} s)"
    )
    console.print(f"{'world':<16}{'τ':>3}  {'algorithm':<12}{'return (95% CI)':>30}{'inaction':>10}{'delay':>8}")
    for c in result["cells"]:
        r = c["return"]
        ci = f"[{r['low']:.0f}, {r['high']:.0f}]" if r["low"] is not None else ""
        mean = "—" if r["mean"] is None else f"{r['mean']:.1f}"
        delay = "—" if c["delay_ticks"] is None else f"{c['delay_ticks']:.1f}t"
        console.print(f"{c['env']:<16}{c['tau']:>3}  {c['algo']:<12}{mean:>12} {ci:>17}{c['inaction']:>9.1%}{delay:>8}")
    for c in result.get("skipped", []):
        console.print(f"{c['env']} τ {c['tau']} {c['algo']}: not run: {c['why']}")
    for v in result["verdicts"]:
        rec = ", ".join(
            f"{a} {'—' if x is None else format(x, '.0%')}{_ci(v.get('recovered_interval', {}).get(a), '.0%')}"
            for a, x in v["recovered"].items()
        )
        console.print(
            f"{v['env']}: SAC loses {v['sac_loss']:.0f}{_ci(v.get('sac_loss_interval'), '.0f')} "
            f"from τ {v['tau_fast']} to {v['tau_slow']} "
            f"({'shown' if v['sac_shows_loss'] else 'not shown'} by the intervals); recovered: {rec}; "
            f"target ≥ {TARGET_RECOVERY:.0%}: {'meets' if v['meets_target'] else 'misses'}"
        )
    if "plot" in result:
        console.print(f"figure: {result['plot']}")


def _ci(iv: dict[str, Any] | None, fmt: str) -> str:
    """`` [low, high]`` of a paired-by-seed interval, or nothing where there is none."""
    if not iv or iv["low"] is None:
        return ""
    return f" [{format(iv['low'], fmt)}, {format(iv['high'], fmt)}]"
