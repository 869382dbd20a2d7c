"""``nonstop tolerance``: how large a delay a world tolerates (its stochasticity over the inference horizon, Eq. 4)."""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "how large a delay a world tolerates: its stochasticity over the inference horizon (Eq. 4)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env", required=True, help="env id (see `nonstop envs`; any Gymnasium id whose randomness is np_random)"
    )
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env keyword argument, repeatable")
    p.add_argument(
        "--max-regret",
        type=float,
        default=0.05,
        help="delay regret per step allowed, as a fraction of a right action's reward (default 0.05)",
    )
    p.add_argument("--horizon", type=int, default=32, help="largest delay k measured, in steps (default 32)")
    p.add_argument("--starts", type=int, default=50, help="start states (default 50)")
    p.add_argument("--flock", type=int, default=32, help="copies of the env per start state (default 32)")
    p.add_argument(
        "--decimals", type=int, default=None, help="round float observations first (worlds with continuous noise)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")


def run(args: argparse.Namespace) -> int:
    import json

    from nonstop.envs import parse_env_args

    if not 0.0 <= args.max_regret <= 1.0:
        raise ValueError(f"--max-regret must be a fraction in [0, 1], got {args.max_regret}")
    from nonstop.studies.tolerance import estimate_predictability, tolerable_delay

    est = estimate_predictability(
        args.env,
        env_kwargs=parse_env_args(args.env_arg),
        horizon=args.horizon,
        starts=args.starts,
        flock=args.flock,
        decimals=args.decimals,
        seed=args.seed,
    )
    k = tolerable_delay(est, args.max_regret)
    ms = None if est.tick_hz is None else k / est.tick_hz * 1000
    result = {
        "env": args.env,
        "max_regret": args.max_regret,
        "tolerable_delay_steps": k,
        "tolerable_delay_ms": ms,
        "at_least": k == args.horizon,
        "tick_hz": est.tick_hz,
        "p_minimax_hat": float(est.q[0]),
        "q": [float(x) for x in est.q],
        "stderr": [float(x) for x in est.stderr],
        "delay_regret": [float(x) for x in est.delay_regret],
        "starts": est.starts,
        "flock": est.flock,
    }
    from nonstop._console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{args.env}: how often the world is where a k-step-old action expects it")
    for col in ("delay k (steps)", "q_k", "± s.e.", "delay regret 1 − q_k"):
        table.add_column(col, justify="right")
    for i in sorted({0, 1, 3, 7, 15, 31, 63, 127, k - 1, min(k, len(est.q) - 1)} & set(range(len(est.q)))):
        table.add_row(str(i + 1), f"{est.q[i]:.3f}", f"{est.stderr[i]:.3f}", f"{est.delay_regret[i]:.3f}")
    console.print(table)
    when = f" (= {ms:.0f} ms at {est.tick_hz:g} Hz)" if ms is not None else ""
    more = " or more: raise --horizon to see where it ends" if k == args.horizon else ""
    console.print(
        f"one-step p_minimax ≈ {est.q[0]:.3f}; with delay regret ≤ {args.max_regret:g} per step, this world "
        f"tolerates a delay of {k} steps{when}{more}",
        markup=False,
    )
    if args.json:
        print(json.dumps(result))
    return 0
