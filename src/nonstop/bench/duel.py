"""``nonstop bench duel``: what latency costs head to head, and how much staggering gives back.

The same policy on both seats, so skill is equal; one side is slowed. Two worlds:

* ``multi/Boxing`` (the default, the issue's experiment): two-player Atari Boxing, both seats played
  by `ScriptedBoxer` (it reads both boxers off the screen and punches from a post beside the
  opponent; with probability ``--epsilon`` it acts at random, so matches differ). A match is cut
  to ``--match-ticks`` ticks (default 600: 10 s of the 2-minute bout, stated in the output) or
  ends earlier by a KO (100 points); the score is the points each side landed. Short matches, many
  of them: a bout snowballs (a boxer pinned on the ropes takes a punch every few frames), so the
  spread between matches, not within one, is what the ±2 SE band needs samples of.
* ``multi/duel``: the built-in quick-draw duel (`DrawOnSignal`: draw on the first observation that
  shows the signal), ``--rounds`` rounds a match; here the first reaction wins, so the value of
  lower latency is exact.

The reference seat takes ``--base-ticks`` per inference; the slowed seat ``--extra`` more ticks (a
declared inference time, virtual clock), run twice: **sequential** (one worker; β, the env's no-op,
fills the ticks between its actions) and **staggered** (``max_time`` at N_I* = ⌈τ_θ/τ_M⌉ workers).
The reference seat always runs staggered at its own N_I*, so it never idles. The slowed side
alternates seats: half the matches it plays ``second_0``, half ``first_0`` (two worlds), so any
advantage of one seat (Boxing's boxers start in different corners) cancels out of the comparison.

Per pairing, over ``--matches`` matches: the slowed side's mean score differential (its score
minus the other's: points landed in Boxing, rounds won in the duel; both worlds are zero-sum, each
seat's reward the change in its score minus the other's, so this is the slowed seat's return) and win rate (ties count half), each with ±2 SE over matches (stratified by the
slowed side's seat: the SE of Σ_s n_s·mean_s / n, so a seat's advantage adds no spread), its inaction
fraction and mean delay (from its tick-log columns), and the world seconds simulated. Staggering
removes inaction; it cannot remove delay, so the table shows how much of the loss was which. A plot
of differential and win rate against the declared latency goes to ``--plot`` (default
``runs/duel.png``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nonstop.inference.schedulers import make_scheduler
from nonstop.inference.workers import InferencePool
from nonstop.policies import Constant, LatencyPolicy, Policy
from nonstop.realtime.host import Session

__all__ = ["DESCRIPTION", "RESULT_KEYS", "ENVS", "DuelSetup", "add_arguments", "run", "render", "play"]

DESCRIPTION = (
    "same policy both seats (scripted Boxing, or the quick-draw duel), one slowed by 0..30 ticks: "
    "score differential and win rate, sequential vs staggered"
)
RESULT_KEYS = ("pairings", "world_seconds_total")
ENVS = ("multi/Boxing", "multi/duel")
SEATS = ("first_0", "second_0")
_EXTRA: dict[bool, str] = {False: "0,2,6,15,30", True: "0,6,30"}  # extra ticks of the slowed seat, full and --quick
_MATCHES: dict[bool, dict[str, int]] = {
    False: {"multi/Boxing": 40, "multi/duel": 40},
    True: {"multi/Boxing": 6, "multi/duel": 12},
}
DEFAULT_MATCH_TICKS = 600
DEFAULT_EPSILON = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env",
        default="multi/Boxing",
        choices=ENVS,
        help="the world: multi/Boxing (scripted boxers; default) or multi/duel (the quick-draw)",
    )
    parser.add_argument(
        "--extra",
        default=None,
        help="extra inference ticks of the slowed seat, comma-separated "
        f"(default {_EXTRA[False]}; quick {_EXTRA[True]})",
    )
    parser.add_argument(
        "--base-ticks", type=int, default=1, help="the reference seat's inference time in ticks (default 1)"
    )
    parser.add_argument(
        "--matches",
        type=int,
        default=None,
        help=f"matches per pairing (default Boxing {_MATCHES[False]['multi/Boxing']}, duel {_MATCHES[False]['multi/duel']}; "
        f"quick {_MATCHES[True]['multi/Boxing']} and {_MATCHES[True]['multi/duel']})",
    )
    parser.add_argument(
        "--match-ticks",
        type=int,
        default=DEFAULT_MATCH_TICKS,
        help=f"Boxing: a match is cut after this many ticks (default {DEFAULT_MATCH_TICKS}: 10 s of the 2-minute bout)",
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        default=DEFAULT_EPSILON,
        help=f"Boxing: the scripted boxers' random-action probability (default {DEFAULT_EPSILON})",
    )
    parser.add_argument("--rounds", type=int, default=10, help="duel: rounds per match (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="world and policy seed (default 0)")
    parser.add_argument(
        "--plot", default="runs/duel.png", help="where to write the figure (default runs/duel.png; '' for none)"
    )


def _policy_factory(
    env: str, seat: str, ticks: int, tau_m: float, epsilon: float, seed: int
) -> Callable[[int], Policy]:
    """Worker ``i``'s policy for ``seat``: the env's equal-skill policy, declaring ``ticks`` ticks."""
    latency = Constant(ticks * tau_m)
    if env == "multi/duel":
        from nonstop.envs.duel import DrawOnSignal

        return lambda i: LatencyPolicy(DrawOnSignal(), latency)
    from nonstop.policies.scripted import ScriptedBoxer

    def make(i: int) -> Policy:
        policy_seed = int(np.random.SeedSequence([seed, SEATS.index(seat), ticks, i]).generate_state(1)[0])
        return LatencyPolicy(ScriptedBoxer(seat, epsilon=epsilon, seed=policy_seed), latency)

    return make


def _pool(world: Session, env: str, seat: str, ticks: int, staggered: bool, epsilon: float, seed: int) -> InferencePool:
    n = max(1, math.ceil(ticks - 1e-9)) if staggered else 1
    factory = _policy_factory(env, seat, ticks, world.tau_m, epsilon, seed)
    return InferencePool(world, factory, make_scheduler("max_time" if staggered else "sequential", n), seat=seat)


@dataclass(frozen=True)
class DuelSetup:
    """The matches of one pairing: ``matches`` matches of ``env`` on the virtual clock, the reference
    seat declaring ``base_ticks`` ticks per inference; checked when made."""

    env: str = "multi/duel"
    base_ticks: int = 1
    matches: int = 12
    rounds: int = 10  # duel: rounds per match
    match_ticks: int = DEFAULT_MATCH_TICKS  # Boxing: a match is cut after this many ticks
    epsilon: float = DEFAULT_EPSILON  # Boxing: the scripted boxers' random-action probability
    seed: int = 0

    def __post_init__(self) -> None:
        if self.env not in ENVS:
            raise ValueError(f"bench duel plays {list(ENVS)}, not {self.env!r}")
        for name, value in (
            ("base_ticks", self.base_ticks),
            ("matches", self.matches),
            ("rounds", self.rounds),
            ("match_ticks", self.match_ticks),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} is out of range: {value!r}")
        if not isinstance(self.epsilon, (int, float)) or not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be a probability in [0, 1], got {self.epsilon!r}")

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return {"rounds": self.rounds} if self.env == "multi/duel" else {"max_frames": self.match_ticks}


def _matches(
    setup: DuelSetup, slowed: str, matches: int, slow_ticks: int, staggered: bool
) -> tuple[np.ndarray, dict[str, Any], float]:
    """``matches`` matches with ``slowed`` as the slowed seat: the slowed side's score differential
    per match, its tick-log summary over those matches, and the world seconds they took."""
    env, env_kwargs, epsilon, seed = setup.env, setup.env_kwargs, setup.epsilon, setup.seed
    reference = SEATS[1 - SEATS.index(slowed)]
    match_ticks = env_kwargs.get("max_frames") or env_kwargs.get("rounds", 10) * 150
    with Session(env, clock="virtual", seed=seed, env_kwargs=env_kwargs) as world:
        with (
            _pool(world, env, reference, setup.base_ticks, True, epsilon, seed).start(),
            _pool(world, env, slowed, slow_ticks, staggered, epsilon, seed).start(),
        ):
            while world.slots[0].read().episode < matches:
                world.run_for(match_ticks * world.tau_m)
    log = world.tick_log
    episode = log["episode"]
    slow = log.seat(slowed)["reward"]  # zero-sum: its return is its score minus the other's
    differential = np.array([slow[episode == e].sum() for e in range(matches)])
    window = episode < matches
    last = int(log["tick"][window][-1])
    return differential, log.seat(slowed).summary(end_tick=last), float(window.sum() * log.tau_m)


def play(extra: int, staggered: bool, setup: DuelSetup = DuelSetup()) -> dict[str, Any]:
    """One pairing: ``setup.matches`` matches of the slowed side (``base_ticks + extra`` ticks per
    inference) against the reference, the slowed side on ``second_0`` in the first ⌈matches/2⌉
    and on ``first_0`` in the rest."""
    if not isinstance(extra, int) or isinstance(extra, bool) or extra < 0:
        raise ValueError(f"extra is out of range: {extra!r}")
    matches = setup.matches
    slow_ticks = setup.base_ticks + extra
    parts = [(seat, n) for seat, n in (("second_0", (matches + 1) // 2), ("first_0", matches // 2)) if n]
    differentials, summaries, seconds = [], [], 0.0
    for seat, n in parts:
        d, summary, t = _matches(setup, seat, n, slow_ticks, staggered)
        differentials.append(d)
        summaries.append(summary)
        seconds += t
    differential = np.concatenate(differentials)
    win = lambda d: np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0))  # noqa: E731
    wins = win(differential)
    agent = sum(s["agent_ticks"] for s in summaries)

    def se(per_seat: Callable[[np.ndarray], np.ndarray]) -> float:
        """SE of the mean over matches, stratified by the slowed side's seat when each seat has
        two matches or more (the seats' own advantage is then no part of the spread)."""
        parts = [per_seat(d) for d in differentials]
        if len(parts) == 2 and min(len(x) for x in parts) > 1:
            n = sum(len(x) for x in parts)
            return float(math.sqrt(sum(len(x) ** 2 * x.var(ddof=1) / len(x) for x in parts)) / n)
        x = np.concatenate(parts)
        return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")

    return {
        "extra_ticks": extra,
        "mode": "staggered" if staggered else "sequential",
        "slow_ticks": slow_ticks,
        "n_inference": max(1, slow_ticks) if staggered else 1,
        "matches": matches,
        "score_differential": float(differential.mean()),
        "score_differential_2se": 2 * se(lambda d: d),
        "win_rate": float(wins.mean()),
        "win_rate_2se": 2 * se(win),
        "inaction_fraction": sum(s["inaction_ticks"] for s in summaries) / sum(s["ticks"] for s in summaries),
        "delay_mean_ticks": sum(s["delay_mean_ticks"] * s["agent_ticks"] for s in summaries if s["agent_ticks"]) / agent
        if agent
        else float("nan"),
        "world_seconds": seconds,
        "differentials": differential.tolist(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    env = getattr(args, "env", "multi/Boxing")
    extras = [int(x) for x in (args.extra or _EXTRA[quick]).split(",") if x.strip()]
    matches = args.matches or _MATCHES[quick][env]
    setup = DuelSetup(
        env=env,
        base_ticks=args.base_ticks,
        matches=matches,
        rounds=args.rounds,
        match_ticks=args.match_ticks,
        epsilon=args.epsilon,
        seed=args.seed,
    )
    pairings = [play(extra, staggered, setup) for extra in extras for staggered in (False, True)]
    result: dict[str, Any] = {
        "env": env,
        "base_ticks": args.base_ticks,
        "matches": matches,
        "pairings": pairings,
        "world_seconds_total": sum(p["world_seconds"] for p in pairings),
    }
    if env == "multi/duel":
        result["rounds"] = args.rounds
    else:
        result.update(
            {
                "match_ticks": args.match_ticks,
                "match_seconds": args.match_ticks / 60.0,
                "epsilon": args.epsilon,
                "policy": "ScriptedBoxer",
            }
        )
    if getattr(args, "plot", ""):
        result["plot"] = str(_plot(result, Path(args.plot)))
    return result


def _title(result: dict[str, Any]) -> str:
    if result["env"] == "multi/duel":
        return f"quick-draw duel, {result['rounds']} rounds a match"
    return (
        f"Boxing, scripted boxers (ε {result['epsilon']}), matches cut at {result['match_ticks']} ticks "
        f"({result['match_seconds']:.0f} s)"
    )


def _plot(result: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.0))
    for key, ax, label in (
        ("score_differential", axes[0], "score differential (slowed − reference)"),
        ("win_rate", axes[1], "win rate of the slowed side"),
    ):
        for mode, marker in (("sequential", "o-"), ("staggered", "s-")):
            rows = [p for p in result["pairings"] if p["mode"] == mode]
            ax.errorbar(
                [p["extra_ticks"] for p in rows],
                [p[key] for p in rows],
                yerr=[p[f"{key}_2se"] for p in rows],
                fmt=marker,
                capsize=3,
                label=f"{mode} (±2 SE)",
            )
        ax.axhline(0.5 if key == "win_rate" else 0.0, color="k", lw=0.8, alpha=0.5)
        ax.set_xlabel("declared extra inference time of the slowed side (ticks)")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(f"{_title(result)}: {result['matches']} matches a pairing, reference {result['base_ticks']} tick(s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(result: dict[str, Any]) -> None:
    print(
        f"{_title(result)}; reference seat {result['base_ticks']} tick(s), {result['matches']} matches a pairing, "
        "the slowed side on each seat in turn"
    )
    print(
        f"{'extra':>5} {'mode':>10} {'N_I':>4} {'score diff':>16} {'win rate':>16} {'inaction':>9} {'delay':>6} {'world s':>8}"
    )
    for p in result["pairings"]:
        print(
            f"{p['extra_ticks']:>5} {p['mode']:>10} {p['n_inference']:>4} "
            f"{p['score_differential']:>8.2f} ±{p['score_differential_2se']:<6.2f} "
            f"{p['win_rate']:>8.2f} ±{p['win_rate_2se']:<6.2f} {p['inaction_fraction']:>9.3f} "
            f"{p['delay_mean_ticks']:>6.2f} {p['world_seconds']:>8.0f}"
        )
    print(
        f"world seconds simulated: {result['world_seconds_total']:.0f}"
        + (f"; plot: {result['plot']}" if "plot" in result else "")
    )
