"""``nonstop bench duel``: what latency costs head to head, and how much staggering gives back.

The same policy on both seats of the quick-draw duel (``multi/duel``, `DrawOnSignal`: draw on the
first observation that shows the signal), so skill is equal. The reference seat (``first_0``)
takes ``--base-ticks`` per inference; the slowed seat (``second_0``) takes ``--extra`` more ticks
(a declared inference time, virtual clock), run twice: **sequential** (one worker) and
**staggered** (``max_time`` at N_I* = ⌈τ_θ/τ_M⌉ workers). The reference seat always runs staggered
at its own N_I*, so it never idles.

Per pairing, over ``--matches`` matches (episodes of ``--rounds`` rounds): the slowed seat's mean
score differential (its score minus the other's) and win rate (ties count half), each with ±2 SE
over matches, its inaction fraction and mean delay (from its tick-log columns), and the world
seconds simulated. Staggering removes inaction; it cannot remove delay, and in a quick-draw the
first reaction wins, so the table shows how much of the loss was which. A slowed side whose delay
reaches the duel's holster window (15 ticks) also starts drawing on the previous round's signal
after the next round began: false starts, which the score counts.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, TypedDict

import numpy as np

from nonstop.envs.duel import DrawOnSignal
from nonstop.inference.schedulers import make_scheduler
from nonstop.inference.workers import InferencePool
from nonstop.policies import Constant, LatencyPolicy
from nonstop.realtime.host import Session

__all__ = ["DESCRIPTION", "RESULT_KEYS", "add_arguments", "run", "render", "play"]

DESCRIPTION = "quick-draw duel, same policy both seats, one slowed by 0..30 ticks: score and win rate, sequential vs staggered"
RESULT_KEYS = ("pairings", "world_seconds_total")
class _Sizes(TypedDict):
    extra: str  # extra inference ticks of the slowed seat, comma-separated
    matches: int


_FULL: _Sizes = {"extra": "0,2,6,15,30", "matches": 40}
_QUICK: _Sizes = {"extra": "0,2,6,15", "matches": 12}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extra", default=None, help="extra inference ticks of the slowed seat, comma-separated "
                        "(default 0,2,6,15,30; quick 0,2,6,15)")  # fmt: skip
    parser.add_argument("--base-ticks", type=int, default=1, help="the reference seat's inference time in ticks (default 1)")
    parser.add_argument("--matches", type=int, default=None, help="matches per pairing (default 40, quick 12)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per match (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="world seed (default 0)")


def _pool(world: Session, seat: str, ticks: int, staggered: bool) -> InferencePool:
    tau = ticks * world.tau_m
    n = max(1, math.ceil(ticks - 1e-9)) if staggered else 1
    factory = lambda i: LatencyPolicy(DrawOnSignal(), Constant(tau))  # noqa: E731
    return InferencePool(world, factory, make_scheduler("max_time" if staggered else "sequential", n), seat=seat)


def play(extra: int, staggered: bool, *, base_ticks: int = 1, matches: int = 12, rounds: int = 10,
         seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """One pairing: ``matches`` matches of the slowed seat (``base_ticks + extra``) against the reference."""
    for name, value in (("extra", extra), ("base_ticks", base_ticks - 1), ("matches", matches - 1), ("rounds", rounds - 1)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} is out of range: {value!r}")
    slow_ticks = base_ticks + extra
    # a match lasts at most rounds·(max_wait + timeout) ticks; run until `matches` have ended
    with Session("multi/duel", clock="virtual", seed=seed, env_kwargs={"rounds": rounds}) as world:
        with _pool(world, "first_0", base_ticks, True).start(), _pool(world, "second_0", slow_ticks, staggered).start():
            while world.slot.read().episode < matches:
                world.run_for(rounds * 150 * world.tau_m)
    log = world.tick_log
    episode, reward = log["episode"], log["seat1_reward"]
    returns = np.array([reward[episode == e].sum() for e in range(matches)])
    differential = 2 * returns  # zero-sum: its score minus the other's
    wins = np.where(returns > 0, 1.0, np.where(returns == 0, 0.5, 0.0))
    window = episode < matches
    slow = log.seat("second_0").summary(end_tick=int(log["tick"][window][-1]))
    se = lambda x: float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")  # noqa: E731
    return {
        "extra_ticks": extra, "mode": "staggered" if staggered else "sequential", "slow_ticks": slow_ticks,
        "n_inference": max(1, slow_ticks) if staggered else 1, "matches": matches,
        "score_differential": float(differential.mean()), "score_differential_2se": 2 * se(differential),
        "win_rate": float(wins.mean()), "win_rate_2se": 2 * se(wins),
        "inaction_fraction": slow["inaction_fraction"], "delay_mean_ticks": slow["delay_mean_ticks"],
        "world_seconds": float(window.sum() * log.tau_m),
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = _QUICK if getattr(args, "quick", False) else _FULL
    extras = [int(x) for x in (args.extra or sizes["extra"]).split(",") if x.strip()]
    matches = args.matches or sizes["matches"]
    pairings = [
        play(extra, staggered, base_ticks=args.base_ticks, matches=matches, rounds=args.rounds, seed=args.seed)
        for extra in extras
        for staggered in (False, True)
    ]
    return {
        "env": "multi/duel", "base_ticks": args.base_ticks, "rounds": args.rounds, "pairings": pairings,
        "world_seconds_total": sum(p["world_seconds"] for p in pairings),
    }  # fmt: skip


def render(result: dict[str, Any]) -> None:
    print(f"quick-draw duel, reference seat {result['base_ticks']} tick(s), {result['rounds']} rounds a match")
    print(f"{'extra':>5} {'mode':>10} {'N_I':>4} {'score diff':>16} {'win rate':>16} {'inaction':>9} {'delay':>6}")
    for p in result["pairings"]:
        print(f"{p['extra_ticks']:>5} {p['mode']:>10} {p['n_inference']:>4} "
              f"{p['score_differential']:>8.2f} ±{p['score_differential_2se']:<6.2f} "
              f"{p['win_rate']:>8.2f} ±{p['win_rate_2se']:<6.2f} {p['inaction_fraction']:>9.3f} "
              f"{p['delay_mean_ticks']:>6.2f}")  # fmt: skip
