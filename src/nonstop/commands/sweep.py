"""``nonstop sweep``: the paper's learning experiments as one command (`nonstop.studies.sweep` holds the cells,
their budgets, the aggregation and the plot; this module parses, runs and prints)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nonstop.studies.sweep import (
    ARCHS,
    INTERACTIONS,
    GAMES,
    BUDGETS,
    SweepPlan,
    plan_cells,
    cell_result,
    aggregate,
    plot,
    BUDGET_HELP,
    write_tables,
)
from nonstop.studies.cellrun import cell_state, children_cpu_s, run_cells

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = BUDGET_HELP
    _add_cell_arguments(p)
    _add_setting_arguments(p)
    _add_run_arguments(p)


def _add_cell_arguments(p: argparse.ArgumentParser) -> None:
    """Which cells: the budget, its games, sizes, interactions, seeds and networks."""
    p.add_argument(
        "--budget",
        choices=tuple(BUDGETS),
        default="small",
        help="what to run (default small); the budgets are listed below",
    )
    p.add_argument("--games", default=None, metavar="G,G", help=f"worlds (default: the budget's): {', '.join(GAMES)}")
    p.add_argument(
        "--sizes", default=None, metavar="K,K", help="ResNet widths k the declared times stand for (default 1,7,29,98)"
    )
    p.add_argument(
        "--interactions",
        default=None,
        metavar="I,I",
        help=f"how the agent acts, compared per cell: {', '.join(INTERACTIONS)} (default staggered,sequential; "
        "with --schedulers staggered)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds per (game, size, interaction) (default: the budget's; the paper's 3 at --budget paper)",
    )
    p.add_argument(
        "--arch",
        default="impala",
        metavar="A,A",
        help=f"networks whose declared delays the cells take: {', '.join(ARCHS)} (2xdeep: Figure 6's "
        "30-layer curve at the appendix's widths; default impala)",
    )
    p.add_argument(
        "--deep-sizes",
        default=None,
        metavar="K,K",
        help="2xDeep widths (default 0.75,4.75,18.5,63: the appendix's 1M-1B)",
    )


def _add_setting_arguments(p: argparse.ArgumentParser) -> None:
    """How each cell learns and acts: the paper's settings, schedulers, latencies and env arguments."""
    p.add_argument(
        "--gb-actions",
        type=int,
        choices=(6, 7),
        default=6,
        help="Game Boy agent actions: 6 = the paper's buttons, noop left to β (default); 7 = noop too",
    )
    p.add_argument(
        "--atari-learn-every",
        type=int,
        default=4,
        help="Atari cells: one update per this many transitions, on either clock (default 4, the paper's)",
    )
    p.add_argument(
        "--delay-start",
        choices=("beta", "zeros"),
        default="beta",
        help="how staggered cells start each episode: beta (nonstop's realtime cell: the first τ_θ ticks are "
        "β's; default) or zeros (the authors' delay simulation: the policy acts on zero frames for the "
        "first d steps and stores (o_{t-d}, a, r, o_{t+1}); `nonstop paper` uses it)",
    )
    p.add_argument("--episodes", type=int, default=None, help="training episodes per cell (default: the budget's)")
    p.add_argument(
        "--schedulers",
        default=None,
        metavar="S,S",
        help="the learned-policy table: each staggered cell once per scheduler (max_time, exp_time, fill, "
        "quantile_hold@Q, auto) and per --workers, in place of Algorithm 1 (default: none)",
    )
    p.add_argument(
        "--workers",
        default="bound",
        metavar="W,W",
        help="N_I of --schedulers cells: bound (⌈τ̄_θ/τ_M⌉), a multiple of it (2x) or a number (default bound)",
    )
    p.add_argument(
        "--latency-sigma",
        type=float,
        default=0.0,
        metavar="SIGMA",
        help="τ_θ lognormal with the declared mean and this σ, as remote workers see it (default 0: constant)",
    )
    p.add_argument(
        "--latency-source",
        choices=("paper", "measured"),
        default="paper",
        help="paper: the authors' measured 5/8/70/599 ticks; measured: this machine's forward time of each k",
    )
    p.add_argument(
        "--latency",
        action="append",
        default=[],
        metavar="K=SPEC",
        help="declare size k's inference time yourself, e.g. 98=empirical:times.txt or 29=1.2s (repeatable)",
    )
    p.add_argument(
        "--game-arg",
        action="append",
        default=[],
        metavar="GAME:KEY=VALUE",
        help="an env argument for one game's cells, e.g. PokemonBattle:state=battle1.state (repeatable)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the sweep runs: jobs, its directory, where models go, and what it prints."""
    p.add_argument("--jobs", type=int, default=None, help="cells run at once (default: the cores this process may use)")
    p.add_argument("--out", default="runs/sweep", help="sweep directory (default runs/sweep); run again to resume")
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(p, what="each cell's models (its inference workers and learners)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and their state, run nothing")
    p.add_argument("--json", action="store_true", help="one JSON object on the last line of stdout")


def _list_arg(text: str | None, option: str, kind: Any = str) -> list[Any] | None:
    if text is None:
        return None
    try:
        items = [kind(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{option} takes a comma-separated list, got {text!r}") from None
    if not items:
        raise ValueError(f"{option} takes a comma-separated list, got {text!r}")
    return items


def _latency_overrides(items: list[str]) -> dict[float, str]:
    from nonstop.policies.latency import parse_latency

    out: dict[float, str] = {}
    for item in items:
        k, sep, spec = item.partition("=")
        try:
            key = float(k)
        except ValueError:
            key = math.nan
        if not sep or not spec or not key > 0:
            raise ValueError(f"--latency takes K=SPEC (e.g. 29=70t), got {item!r}")
        parse_latency(spec, tick_hz=60.0)  # a bad spec is refused here, not in a cell an hour later
        out[int(key) if key.is_integer() else key] = spec
    return out


def _game_args(items: list[str]) -> dict[str, list[str]]:
    """``["PokemonBattle:state=b.state"]`` → ``{"PokemonBattle": ["state=b.state"]}``.

    >>> _game_args(["PokemonBattle:state=b.state"])
    {'PokemonBattle': ['state=b.state']}
    """
    out: dict[str, list[str]] = {}
    for item in items:
        game, sep, kv = item.partition(":")
        if not sep or "=" not in kv or not kv.partition("=")[0]:
            raise ValueError(f"--game-arg takes GAME:KEY=VALUE (e.g. PokemonBattle:state=battle1.state), got {item!r}")
        out.setdefault(game, []).append(kv)
    return out


def _placement_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The train flags that place each cell's models, when they are not train's defaults; a device
    torch cannot find is refused here, in one line, before any cell starts."""
    from nonstop.inference.device import resolve_device

    device, dtype = args.device, args.dtype  # add_device_arguments always sets both
    if device != "cpu":
        resolve_device(device)
    return (*(("--device", device) if device != "cpu" else ()), *(("--dtype", dtype) if dtype else ()))


@dataclasses.dataclass(frozen=True)
class _Outcome:
    """What a sweep ran and found: every planned cell, the rows of those with episodes, their aggregate."""

    cells: list[Any]
    rows: list[dict[str, Any]]
    results: list[dict[str, Any]]
    failed: list[tuple[str, str]]
    picture: Any
    elapsed_s: float
    cpu_s: float
    jobs: int


def run_sweep(args: argparse.Namespace) -> int:
    from nonstop._console import Console

    console = Console(stderr=True)
    budget = BUDGETS[args.budget]
    jobs = _jobs(args)
    cells, notes = plan_cells(budget, _plan(args, budget))
    if not cells:
        raise ValueError("nothing to run: " + ("; ".join(notes) if notes else "no cells"))
    placement = _placement_args(args)
    if placement:  # every cell's train places its models there (a resumed cell may move)
        cells = [dataclasses.replace(c, extra=c.extra + placement) for c in cells]
    out = Path(args.out)
    states = {c.name: cell_state(c, out / "cells" / c.name) for c in cells}
    for note in notes + ([budget.note] if budget.note and not args.games else []):
        console.print(f"note: {note}", style="yellow", markup=False)
    # the longest cells first, so the last minutes are not one long cell running alone
    todo = sorted(
        (c for c in cells if states[c.name] != "done"), key=lambda c: -c.episodes * GAMES[c.game].max_episode_s
    )
    console.print(
        f"sweep ({args.budget}): {len(cells)} cells, {len(cells) - len(todo)} done, "
        f"{sum(states[c.name] == 'resume' for c in todo)} to resume, {jobs} at a time; {out}"
    )
    if args.dry_run:
        return _dry_run(args, console, cells, states)
    outcome = _run_and_collect(args, console, cells, todo, jobs)
    _print_results(console, outcome.results)
    return _finish(args, console, outcome)


def _jobs(args: argparse.Namespace) -> int:
    """``--jobs``, or the cores this process may use."""
    jobs = (
        args.jobs
        if args.jobs is not None
        else len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1)
    )
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    return jobs


def _plan(args: argparse.Namespace, budget: Any) -> SweepPlan:
    """The sweep's flags as the settings `plan_cells` takes beyond the budget."""
    sizes = _list_arg(args.sizes, "--sizes", float)
    if sizes is not None:
        if any(not (k * 16 >= 1) for k in sizes):
            raise ValueError(f"--sizes takes widths k >= 1/16 such as 1,7,29,98, got {args.sizes!r}")
        sizes = [int(k) if k.is_integer() else k for k in sizes]
    return SweepPlan(
        games=_list_arg(args.games, "--games"),
        sizes=sizes,
        seeds=args.seeds,
        episodes=args.episodes,
        interactions=_list_arg(args.interactions, "--interactions")
        or (["staggered"] if args.schedulers else ["staggered", "sequential"]),
        latency_source=args.latency_source,
        latency_overrides=_latency_overrides(args.latency),
        game_args=_game_args(args.game_arg),
        small_replay=budget.small_replay,
        archs=_list_arg(args.arch, "--arch") or ["impala"],
        deep_sizes=_list_arg(args.deep_sizes, "--deep-sizes", float),
        gb_actions=args.gb_actions,
        atari_learn_every=args.atari_learn_every,
        delay_start=args.delay_start,
        schedulers=_list_arg(args.schedulers, "--schedulers") or (),
        workers=_list_arg(args.workers, "--workers") or ["bound"],
        sigma=args.latency_sigma,
    )


def _dry_run(args: argparse.Namespace, console: Any, cells: list[Any], states: dict[str, str]) -> int:
    """List the cells and their state; run nothing."""
    from rich.table import Table

    table = Table("cell", "episodes", "state", box=None)
    for c in cells:
        table.add_row(c.name, str(c.episodes), states[c.name])
    console.print(table)
    if args.json:
        print(json.dumps({"sweep": args.budget, "cells": [{"cell": c.name, "state": states[c.name]} for c in cells]}))
    return 0


def _run_and_collect(args: argparse.Namespace, console: Any, cells: list[Any], todo: list[Any], jobs: int) -> _Outcome:
    """Run the cells not yet done, then aggregate every cell with episodes into tables and the plot."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    cpu0 = children_cpu_s()
    failed = run_cells(todo, out, jobs, console)
    # CPU seconds the cells used: on a busy machine wall time says little, this says what the work costs
    cpu_s = children_cpu_s() - cpu0
    rows = [r for c in cells if (r := cell_result(c, out / "cells" / c.name)) is not None]
    results = aggregate(rows)
    write_tables(out, rows, results)
    picture = None
    curves = [r for r in results if not r.get("scheduler")]  # the learned-policy table is a table, not a curve
    if curves:
        try:
            picture = plot(
                curves,
                out / "sweep.png",
                title=f"nonstop sweep --budget {args.budget}: mean episodic return over each cell's episodes "
                "(95 % t interval over seeds)",
            )
        except ImportError:
            console.print("no plot: matplotlib is not installed (pip install 'nonstop[plot]')", style="yellow")
    return _Outcome(cells, rows, results, failed, picture, time.monotonic() - t0, cpu_s, jobs)


def _finish(args: argparse.Namespace, console: Any, outcome: _Outcome) -> int:
    out = Path(args.out)
    cells, rows, failed, picture, jobs = outcome.cells, outcome.rows, outcome.failed, outcome.picture, outcome.jobs
    elapsed, cpu_s = outcome.elapsed_s, outcome.cpu_s
    console.print(
        f"{len(rows)} of {len(cells)} cells have episodes; tables in {out}/results.csv and cells.csv"
        + (f", picture {picture}" if picture else "")
        + f"; this run took {elapsed / 60:.1f} min, its cells "
        f"{cpu_s / 60:.1f} CPU-min (≥ {cpu_s / 60 / jobs:.1f} min on {jobs} idle cores)"
    )
    for name, why in failed:
        console.print(
            f"cell {name} failed: {why} (log: {out}/logs/{name}.log; run the sweep again to retry)",
            style="red",
            markup=False,
        )
    from nonstop.bench.common import machine_info

    document = {
        "sweep": args.budget,
        "cells": len(cells),
        "cells_complete": sum(bool(r["complete"]) for r in rows),
        "failed": [n for n, _ in failed],
        "results": outcome.results,
        "plot": str(picture) if picture else None,
        "elapsed_s": round(elapsed, 1),
        "cells_cpu_s": round(cpu_s, 1),
        "jobs": jobs,
        "machine": machine_info(),
    }
    (out / "sweep.json").write_text(json.dumps(document, indent=1) + "\n")
    if args.json:
        print(json.dumps(document))
    return 1 if failed else 0


def _print_scheduler_results(console: Any, results: Sequence[dict[str, Any]]) -> None:
    """The learned-policy table: per (game, N_I) a column per scheduler, mean return ± 95 % t interval."""
    from rich.table import Table

    schedulers = list(dict.fromkeys(r["scheduler"] for r in results))
    table = Table(
        "game", "τ_θ", "N_I", *schedulers, title="mean episodic return ± 95 % CI over seeds (learned policies)"
    )
    for game, delay, workers in dict.fromkeys((r["game"], r["delay"], r["workers"]) for r in results):
        by = {r["scheduler"]: r for r in results if (r["game"], r["delay"], r["workers"]) == (game, delay, workers)}
        cells = [by.get(s) for s in schedulers]
        table.add_row(
            game,
            delay
            + (f" σ {by[schedulers[0]]['sigma']:g}" if schedulers[0] in by and by[schedulers[0]]["sigma"] else ""),
            str(workers),
            *[
                "—"
                if r is None or r["mean_return"] is None
                else f"{r['mean_return']:.2f}"
                + (f" ± {r['ci95']:.2f}" if r["ci95"] is not None else "")
                + f" ({r['seeds']})"
                for r in cells
            ],
        )
    console.print(table)


def _print_results(console: Any, results: Sequence[dict[str, Any]]) -> None:
    from rich.table import Table

    if any(r.get("scheduler") for r in results):
        _print_scheduler_results(console, [r for r in results if r.get("scheduler")])
        results = [r for r in results if not r.get("scheduler")]
    if not results:
        return
    interactions = [i for i in INTERACTIONS if any(r["interaction"] == i for r in results)]
    short = {
        "staggered": "stag.",
        "sequential": "seq.",
        "infer_then_learn": "i→l",
        "learn_then_infer": "l→i",
        "parallel_learning": "par.",
    }
    table = Table(
        "game",
        "|θ|",
        "τ_θ",
        *[f"{short[i]} return" for i in interactions],
        *[f"{short[i]} inaction" for i in interactions],
        title="mean episodic return ± 95 % CI (seeds) vs model size",
        caption=" · ".join(f"{short[i]} = {i.replace('_', '-')}" for i in interactions),
    )
    keys = sorted({(r["game"], r.get("arch", "impala"), r["k"]) for r in results})
    for game, arch, k in keys:
        by = {
            r["interaction"]: r
            for r in results
            if r["game"] == game and r["k"] == k and r.get("arch", "impala") == arch
        }
        any_row = next(iter(by.values()))

        def ret(r: dict[str, Any] | None) -> str:
            if r is None or r["mean_return"] is None:
                return "—"
            ci = f" ± {r['ci95']:.2f}" if r["ci95"] is not None else ""
            return f"{r['mean_return']:.2f}{ci} ({r['seeds']})"

        def idle(r: dict[str, Any] | None) -> str:
            return "—" if r is None or r["inaction_fraction"] is None else f"{r['inaction_fraction']:.1%}"

        table.add_row(
            game + ("" if arch == "impala" else f" ({arch})"),
            any_row["params"],
            any_row["delay"],
            *[ret(by.get(i)) for i in interactions],
            *[idle(by.get(i)) for i in interactions],
        )
    console.print(table)


HELP = "the paper's learning experiments (return vs model size, staggered vs sequential) as one command"


run = run_sweep
