"""``nonstop compare``: schedulers side by side on one env and latency (`nonstop.studies.compare` runs them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


from nonstop.studies.compare import (
    SCHEDULERS,
    CLOCKS,
    default_plot_path,
    compare,
    plot_compare,
    cell,
    to_json,
)

__all__ = ["HELP", "add_arguments", "run"]


def n_workers_arg(text: str) -> int | str:
    """argparse type for a worker count: a positive int or ``auto`` (``--n-workers``, ``--n-inference``)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'auto', got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (or 'auto'), got {n}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nonstop compare``."""
    parser.add_argument(
        "--env",
        default="Boxing",
        help="env id (default Boxing; see `nonstop envs`), or MODULE:ID for a world your own module registers",
    )
    from nonstop.commands._flags import add_env_module_argument

    add_env_module_argument(parser)
    parser.add_argument(
        "--latency",
        default="6t",
        metavar="SPEC",
        help="model inference time: constant:V | V | normal:MEAN,STD | lognormal:MEDIAN,SIGMA | "
        "empirical:PATH; units s, ms or t (ticks of the env). Default 6t",
    )
    parser.add_argument(
        "--n-workers",
        type=n_workers_arg,
        default="auto",
        metavar="N|auto",
        help="workers for unstaggered, max_time and exp_time (default auto = ⌈τ̄_θ/τ_M⌉)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="world seconds per scheduler (default 10)")
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="virtual",
        help="virtual (default: fast, reproducible) or wall (real time: seconds × 4 in all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="env and policy seed, the same for every scheduler")
    parser.add_argument(
        "--backend",
        default="thread",
        metavar="thread|ray",
        help="where each worker's policy runs: thread (default) or ray (a Ray actor; needs --clock wall)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="Ray cluster to use with --backend ray (default: start a local Ray)",
    )
    parser.add_argument(
        "--plot", default=None, metavar="PATH", help="figure path (default runs/compare-<env>.png; '' for none)"
    )
    parser.add_argument(
        "--schedulers",
        type=schedulers_arg,
        default=SCHEDULERS,
        metavar="A,B,…",
        help=f"schedulers to compare, comma-separated, from {', '.join(_scheduler_names())} "
        f"(default {','.join(SCHEDULERS)})",
    )
    parser.add_argument("--json", action="store_true", help="also print the summaries as one JSON object (last line)")


def _scheduler_names() -> tuple[str, ...]:
    from nonstop.inference.schedulers import SCHEDULER_NAMES

    return SCHEDULER_NAMES


def schedulers_arg(text: str) -> tuple[str, ...]:
    """argparse type for ``--schedulers``: comma-separated names of `SCHEDULER_NAMES`, each once.

    >>> schedulers_arg("exp_time, fill")
    ('exp_time', 'fill')
    """
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in _scheduler_names()]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown scheduler {unknown[0]!r}: valid names are {', '.join(_scheduler_names())}"
            if unknown
            else "name at least one scheduler"
        )
    return names


def render_machine_limits(result: dict[str, Any], console: Any) -> None:
    """`machine_diagnosis`'s lines, each in yellow (as `nonstop train` prints its own)."""
    for line in result.get("machine_limits") or []:
        console.print(line, style="yellow", markup=False)


def render_table(result: dict[str, Any], console: Any = None) -> None:
    """One rich table: a row per scheduler."""
    from nonstop._console import Console
    from rich.table import Table

    from nonstop.metrics.plots import latency_words

    console = console or Console()
    table = Table(
        title=f"{result['env']} at {result['tick_hz']:g} Hz, {latency_words(result['latency'])} "
        f"(τ̄_θ = {result['latency_mean_ticks']:.2f} ticks), {result['clock']} clock, {result['seconds']:g} s each",
        caption=f"figures after {result['warmup_ticks']} warm-up ticks; return: mean over completed episodes, "
        f"or the whole run's reward total if none completed",
        pad_edge=False,
    )
    table.add_column("scheduler", no_wrap=True)
    for col in (
        "N_I",
        "mean τ_I (ticks)",
        "τ_I CV",
        "inaction",
        "mean delay (ticks)",
        "acts/s",
        "reward /tick",
        "return",
    ):
        table.add_column(
            col, justify="right", min_width=max(len(word) for word in col.split())
        )  # whole words at 80 columns
    for name, s in result["schedulers"].items():
        if s["episode_return_kind"] == "mean_completed":
            ret = f"{s['episode_return']:.1f} (mean, {s['episodes_ended']} ep.)"
        else:
            ret = f"{s['episode_return']:.1f} (total)"
        table.add_row(
            name,
            str(s["n_workers"]),
            cell(s["tau_i_mean_ticks"], ".2f"),
            cell(s["tau_i_cv"], ".3f"),
            cell(s["inaction_fraction"], ".1%"),
            cell(s["delay_mean_ticks"], ".2f"),
            cell(s["actions_per_s"], ".1f"),
            cell(s.get("reward_per_tick"), ".3f"),
            ret,
        )
    console.print(table)
    for name, s in result["schedulers"].items():
        if s["stale"]:
            console.print(
                f"{name}: {s['stale']} actions dropped as stale (computed in an earlier episode: the delay "
                f"outlasted the episode), {s['superseded']} superseded by a newer one"
            )


def run_compare(args: argparse.Namespace) -> int:
    """Entry point of ``nonstop compare`` (see `add_arguments`). Bad inputs raise ValueError/TypeError."""
    from nonstop._console import Console
    from nonstop.commands._flags import env_of

    args.env = env_of(args.env, args)
    console = Console()
    with console.status("running…") as status:
        result = compare(
            args.env,
            args.latency,
            n_workers=args.n_workers,
            seconds=args.seconds,
            clock=args.clock,
            seed=args.seed,
            backend=args.backend,
            ray_address=args.ray_address,
            schedulers=tuple(args.schedulers),
            progress=lambda name: status.update(f"running {name} on the {args.clock} clock…"),
        )
    render_table(result, console)
    render_machine_limits(result, console)
    plot = default_plot_path(args.env) if args.plot is None else (Path(args.plot) if args.plot else None)
    if plot is not None:
        result["plot"] = str(plot_compare(result, plot))
        console.print(f"plot: {result['plot']}")
    if args.json:
        print(to_json(result))
    return 0


HELP = "schedulers side by side on one env and latency: inaction, delay, return (default sequential, unstaggered, max_time, exp_time; --schedulers adds quantile_hold, auto, fill)"


run = run_compare
