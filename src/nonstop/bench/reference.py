"""``nonstop bench reference``: a nonstop learner on the ordinary MDP beside Stable-Baselines3's same algorithm.

A nonstop learner behind a 1-tick model (``--latency 1t --scheduler max_time --n-inference 1``, virtual
clock) faces the ordinary MDP: the action decided on tick t's observation is applied at the next step
(docs/concepts.md). So its learning curve can be read against a reference implementation's, run here
in the same command with the same hyper-parameters, seeds and step budget:

* ``sac``: nonstop's SAC against SB3's ``SAC`` (train_freq 1, one gradient step, α learned from the same
  start, the same Adam step size, batch, τ, γ, widths, and as many uniformly random steps first);
* ``dqn``: nonstop's DQN against SB3's ``DQN``, with the RL Zoo's CartPole-v1 settings on both sides.

Per side and checkpoint (``--checkpoints`` evenly spaced steps), a run's return is the mean of its last
``--last`` finished training episodes; the bench gives the mean over ``--seeds`` with a 95 % interval
(Student's t), the random policy's return beside them, and at the last checkpoint the ratio of the two
sides read relative to the random policy, ``(R_nonstop − R_random) / (R_sb3 − R_random)`` (target ≥ 0.9),
and each side's updates per second and wall time (one torch thread a run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from nonstop.bench.common import interval

__all__ = ["DESCRIPTION", "REFERENCES", "add_arguments", "run", "render", "settings_for", "return_at", "interval"]

DESCRIPTION = (
    "a nonstop learner on the ordinary MDP (1-tick model, virtual clock) beside Stable-Baselines3's same "
    "algorithm: returns at checkpoints with 95-percent intervals, the ratio, updates/s"
)

#: the ratio nonstop's return must reach of SB3's at the last checkpoint, read relative to the random policy
TARGET_RATIO = 0.9

#: per (algorithm, world): what the bench changes in nonstop's defaults, on both sides; a quick run's sizes
REFERENCES: dict[tuple[str, str], dict[str, Any]] = {
    ("sac", "Pendulum-v1"): {
        "settings": {},
        "steps": 10_000,
        # quick: small enough for CI, yet both sides learn the swing-up (small networks, a larger Adam step)
        "quick": {
            "steps": 4000,
            "settings": {"learning_starts": 250, "hidden": (64, 64), "batch_size": 64, "lr": 2e-3},
        },
    },
    ("sac", "HalfCheetah-v5"): {
        "settings": {},
        "steps": 100_000,
        "quick": {"steps": 1200, "settings": {"learning_starts": 500, "hidden": (64, 64), "batch_size": 64}},
    },
    # the RL Zoo's CartPole-v1 settings (hyperparams/dqn.yml): 2.3e-3, batch 64, 1,000 steps first, 128
    # updates each 256 steps (nonstop: at most 0.5 a transition), ε to 0.04 over 16 % of 50,000 steps, 2 × 256;
    # plain DQN and Adam's ε 1e-8 as SB3's. Its target every 10 env steps copies only between two bursts of
    # 128 updates (SB3 counts env steps, and learns only at a rollout's end): nonstop's every 128 updates
    ("dqn", "CartPole-v1"): {
        "settings": {
            "lr": 2.3e-3,
            "batch_size": 64,
            "replay_capacity": 100_000,
            "learning_starts": 1000,
            "gamma": 0.99,
            "target_update": 128,
            "updates_per_transition": 0.5,
            "epsilon_end": 0.04,
            "epsilon_ticks": 8000,
            "hidden": (256, 256),
            "double": False,
            "adam_eps": 1e-8,
        },
        "steps": 50_000,
        "quick": {"steps": 3000, "settings": {}},
    },
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--algo", default="sac", choices=sorted({a for a, _ in REFERENCES}), help="the algorithm (default sac)"
    )
    p.add_argument(
        "--env",
        default=None,
        help=f"the world (default Pendulum-v1 for sac, CartPole-v1 for dqn; covered: "
        f"{', '.join(sorted({f'{e} ({a})' for a, e in REFERENCES}))})",
    )
    p.add_argument("--steps", type=int, default=None, help="env steps a run (default: the world's; --quick: small)")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="seeds, each run by both sides (default 0 1 2; quick 0)"
    )
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each in a process of its own (default 1)")
    p.add_argument("--checkpoints", type=int, default=5, help="evenly spaced steps the returns are read at (default 5)")
    p.add_argument(
        "--last", type=int, default=None, help="finished episodes whose mean is a run's return (default 10, quick 5)"
    )
    p.add_argument(
        "--algo-arg",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of both sides, repeatable (learning_starts=10000, lr=0.001; default: the bench's)",
    )
    p.add_argument(
        "--sides",
        default="nonstop,sb3",
        help="which sides run: nonstop, sb3 or both (default nonstop,sb3; one side: no ratio)",
    )


# ----------------------------------------------------------------------------- settings


def settings_for(algo: str, env: str, quick: bool, steps: int, extra: dict[str, Any] | None = None) -> Any:
    """nonstop's config for ``algo`` on ``env`` with the bench's changes (``quick``: its small sizes) and
    ``extra`` (``--algo-arg``), for a run of ``steps`` (what nonstop leaves to a run's length, SAC's random
    steps first, filled in): the one source both sides take their hyper-parameters from."""
    from nonstop.envs import env_info
    from nonstop.experiment.registry import lookup

    ref = reference_of(algo, env)
    changes = {**ref["settings"], **(ref["quick"]["settings"] if quick else {}), **(extra or {})}
    algo_class = lookup("algo", algo)
    return algo_class.config_class.for_family(env_info(env).family, **changes).for_run(steps)


def reference_of(algo: str, env: str) -> dict[str, Any]:
    """The bench's entry for ``algo`` on ``env``, or one line naming those it has."""
    if (algo, env) not in REFERENCES:
        covered = ", ".join(f"--algo {a} --env {e}" for a, e in REFERENCES)
        raise ValueError(f"bench reference has no reference run for --algo {algo} --env {env}: it covers {covered}")
    return REFERENCES[(algo, env)]


def sb3_kwargs(algo: str, cfg: Any, steps: int) -> dict[str, Any]:
    """SB3's constructor arguments carrying nonstop's ``cfg`` (one gradient step per env step for SAC)."""
    common = {
        "learning_rate": cfg.lr,
        "buffer_size": min(cfg.replay_capacity, steps),
        "learning_starts": cfg.learning_starts,
        "batch_size": cfg.batch_size,
        "gamma": cfg.gamma,
        "policy_kwargs": {"net_arch": list(cfg.hidden)},
    }
    if algo == "sac":
        return {
            **common,
            "tau": cfg.tau,
            "train_freq": 1,
            "gradient_steps": 1,
            "ent_coef": f"auto_{cfg.alpha}" if cfg.autotune else cfg.alpha,
        }
    every = 256  # the RL Zoo's: 128 updates each 256 steps, nonstop's updates_per_transition 0.5
    return {
        **common,
        "target_update_interval": max(1, round(cfg.target_update / cfg.updates_per_transition)),  # env steps
        "train_freq": every,
        "gradient_steps": max(1, round(cfg.updates_per_transition * every)),
        "exploration_initial_eps": cfg.epsilon_start,
        "exploration_fraction": min(1.0, cfg.epsilon_ticks / steps),
        "exploration_final_eps": cfg.epsilon_end,
        "max_grad_norm": cfg.max_grad_norm,
    }


# ----------------------------------------------------------------------------- one run each side


def run_nonstop(algo: str, env: str, seed: int, steps: int, cfg: Any) -> dict[str, Any]:
    """nonstop's learner behind a 1-tick model on the virtual clock for ``steps`` ticks: its episodes'
    returns and end steps, its updates and wall time."""
    import torch

    from nonstop.envs import env_info
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.loop import train
    from nonstop.experiment.registry import lookup
    from nonstop.metrics.timing import episode_returns

    torch.set_num_threads(1)
    tick_hz = env_info(env).tick_hz
    field_name = lookup("algo", algo).settings_field
    train_cfg = TrainConfig(
        env=env,
        clock="virtual",
        seconds=(steps + 0.5) / tick_hz,
        latency="1t",
        scheduler="max_time",
        n_inference=1,
        algo=algo,
        seed=seed,
        **{field_name: cfg},
    )
    started = time.monotonic()
    out = train(train_cfg, progress_every=max(1.0, train_cfg.seconds))
    wall = time.monotonic() - started
    log = out["tick_log"]
    ended = (log["terminated"] | log["truncated"]).astype(bool)
    updates = int(out["updates"] or 0)
    return {
        "side": "nonstop",
        "seed": seed,
        "returns": [float(r) for r in episode_returns(log)],
        "ends": [int(t) + 1 for t in log["tick"][ended]],
        "steps": int(out["ticks"]),
        "updates": updates,
        "wall_s": wall,
        "updates_per_s": updates / wall if wall > 0 else None,
    }


def run_sb3(algo: str, env: str, seed: int, steps: int, cfg: Any) -> dict[str, Any]:
    """SB3's same algorithm with ``cfg``'s hyper-parameters for ``steps`` env steps: its training episodes'
    returns and end steps, its gradient steps and wall time."""
    import gymnasium
    import torch
    from stable_baselines3 import DQN, SAC
    from stable_baselines3.common.monitor import Monitor

    torch.set_num_threads(1)
    world = Monitor(gymnasium.make(env))
    model_class = SAC if algo == "sac" else DQN
    model = model_class("MlpPolicy", world, seed=seed, device="cpu", verbose=0, **sb3_kwargs(algo, cfg, steps))
    started = time.monotonic()
    model.learn(total_timesteps=steps)
    wall = time.monotonic() - started
    updates = int(model._n_updates)
    return {
        "side": "sb3",
        "seed": seed,
        "returns": [float(r) for r in world.get_episode_rewards()],
        "ends": np.cumsum(world.get_episode_lengths()).astype(int).tolist(),
        "steps": int(model.num_timesteps),
        "updates": updates,
        "wall_s": wall,
        "updates_per_s": updates / wall if wall > 0 else None,
    }


def _run_one(side: str, algo: str, env: str, seed: int, steps: int, cfg: Any) -> dict[str, Any]:
    return (run_nonstop if side == "nonstop" else run_sb3)(algo, env, seed, steps, cfg)


def random_return(env: str, episodes: int, seed: int = 0) -> float:
    """The uniformly random policy's mean return over ``episodes`` episodes of ``env`` (seeded)."""
    import gymnasium

    world = gymnasium.make(env)
    world.action_space.seed(seed)
    total = []
    for k in range(episodes):
        world.reset(seed=seed + k)
        ret, done = 0.0, False
        while not done:
            _, r, terminated, truncated, _ = world.step(world.action_space.sample())
            ret += float(r)
            done = terminated or truncated
        total.append(ret)
    world.close()
    return float(np.mean(total))


# ----------------------------------------------------------------------------- figures


def return_at(returns: list[float], ends: list[int], step: int, last: int) -> float | None:
    """The mean of the last ``last`` episodes that ended by ``step`` (None: none had).

    >>> return_at([1.0, 2.0, 6.0], [10, 20, 30], 25, 2)
    1.5
    """
    done = [r for r, e in zip(returns, ends) if e <= step]
    return float(np.mean(done[-last:])) if done else None


def ratio(ours: float | None, theirs: float | None, random: float) -> float | None:
    """``(ours − random) / (theirs − random)``; None where the reference did not beat the random policy.

    >>> ratio(-300.0, -200.0, -1200.0)
    0.9
    """
    if ours is None or theirs is None or not theirs > random:
        return None
    return (ours - random) / (theirs - random)


# ----------------------------------------------------------------------------- the bench


def plan_of(args: argparse.Namespace) -> dict[str, Any]:
    """The run the flags describe, each value checked at the door."""
    quick = bool(getattr(args, "quick", False))
    algo = args.algo
    env = args.env or ("Pendulum-v1" if algo == "sac" else "CartPole-v1")
    ref = reference_of(algo, env)
    steps = args.steps if args.steps is not None else ref["quick"]["steps"] if quick else ref["steps"]
    seeds = args.seeds if args.seeds is not None else [0] if quick else [0, 1, 2]
    sides = [s.strip() for s in str(args.sides).split(",") if s.strip()]
    if not sides or set(sides) - {"nonstop", "sb3"}:
        raise ValueError(f"--sides takes nonstop, sb3 or both, comma-separated, got {args.sides!r}")
    last = args.last if args.last is not None else 5 if quick else 10
    for name, value in (("steps", steps), ("jobs", args.jobs), ("checkpoints", args.checkpoints), ("last", last)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"--{name} must be a whole number >= 1, got {value!r}")
    from nonstop.envs.registry import parse_env_args

    try:
        extra = parse_env_args(getattr(args, "algo_arg", None))
    except ValueError as exc:
        raise ValueError(str(exc).replace("--env-arg", "--algo-arg")) from None
    cfg = settings_for(algo, env, quick, steps, extra)
    return {
        "algo": algo,
        "env": env,
        "steps": steps,
        "seeds": list(seeds),
        "sides": sides,
        "cfg": cfg,
        "quick": quick,
        "last": last,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    plan = plan_of(args)
    started = time.monotonic()
    specs = [
        (side, plan["algo"], plan["env"], seed, plan["steps"], plan["cfg"])
        for seed in plan["seeds"]
        for side in plan["sides"]
    ]
    runs = _run_all(specs, args.jobs)
    random = random_return(plan["env"], 10)
    checkpoints = [round(plan["steps"] * (k + 1) / args.checkpoints) for k in range(args.checkpoints)]
    sides: dict[str, Any] = {}
    for side in plan["sides"]:
        mine = [r for r in runs if r["side"] == side]
        sides[side] = {
            "returns": [
                {"step": c, **interval([return_at(r["returns"], r["ends"], c, plan["last"]) for r in mine])}
                for c in checkpoints
            ],
            "updates": [r["updates"] for r in mine],
            "updates_per_s": interval([r["updates_per_s"] for r in mine]),
            "wall_s": [round(r["wall_s"], 1) for r in mine],
            "episodes": [len(r["returns"]) for r in mine],
        }
    result: dict[str, Any] = {
        "algo": plan["algo"],
        "env": plan["env"],
        "steps": plan["steps"],
        "seeds": plan["seeds"],
        "last": plan["last"],
        "settings": plan["cfg"].to_dict(),
        "model": "1-tick model (--latency 1t --scheduler max_time --n-inference 1), virtual clock",
        "random_return": random,
        "sides": sides,
        "runs": [
            {
                **{k: v for k, v in r.items() if k not in ("returns", "ends")},
                "return": return_at(r["returns"], r["ends"], plan["steps"], plan["last"]),
            }
            for r in runs
        ],
        "wall_s": time.monotonic() - started,
    }
    if "nonstop" in sides and "sb3" in sides:
        ours, theirs = sides["nonstop"]["returns"][-1]["mean"], sides["sb3"]["returns"][-1]["mean"]
        result["ratio"] = ratio(ours, theirs, random)
        result["ratio_per_seed"] = interval(
            [
                ratio(
                    return_at(a["returns"], a["ends"], plan["steps"], plan["last"]),
                    return_at(b["returns"], b["ends"], plan["steps"], plan["last"]),
                    random,
                )
                for a in runs
                if a["side"] == "nonstop"
                for b in runs
                if b["side"] == "sb3" and b["seed"] == a["seed"]
            ]
        )
        result["target_ratio"] = TARGET_RATIO
        result["meets_target"] = bool(result["ratio"] is not None and result["ratio"] >= TARGET_RATIO)
        speed = sides["nonstop"]["updates_per_s"]["mean"], sides["sb3"]["updates_per_s"]["mean"]
        result["update_speed_ratio"] = speed[0] / speed[1] if None not in speed and speed[1] else None
    return result


def _run_all(specs: list[tuple[Any, ...]], jobs: int) -> list[dict[str, Any]]:
    """Every run of ``specs`` (`_run_one`'s arguments), ``jobs`` at once in fresh processes (1: here, in
    turn); a JSON line per run to stderr as each ends; the runs in ``specs``' order."""

    def line(r: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in r.items() if k not in ("returns", "ends")})

    if jobs == 1:
        runs = []
        for spec in specs:
            runs.append(r := _run_one(*spec))
            print(line(r), file=sys.stderr, flush=True)
        return runs
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done: dict[int, dict[str, Any]] = {}
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=os.setsid)
    try:
        futures = {pool.submit(_run_one, *spec): k for k, spec in enumerate(specs)}
        for future in as_completed(futures):
            done[futures[future]] = r = future.result()
            print(line(r), file=sys.stderr, flush=True)
    except BaseException:
        for process in list(getattr(pool, "_processes", {}).values()):  # each in its own session: end them here
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [done[k] for k in range(len(specs))]


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console

    console = Console()
    console.print(
        f"[bold]bench reference[/] {result['algo']} on {result['env']}: {result['steps']:,} steps a run, seeds "
        f"{' '.join(map(str, result['seeds']))}; nonstop: {result['model']}; {result['wall_s']:.0f} s"
    )
    console.print(
        f"return: mean of the last {result['last']} training episodes (95% CI over seeds); random policy {result['random_return']:.1f}"
    )
    names = list(result["sides"])
    console.print(f"{'step':>8}" + "".join(f"{n:>32}" for n in names))
    for k, row in enumerate(result["sides"][names[0]]["returns"]):
        cells = []
        for n in names:
            c = result["sides"][n]["returns"][k]
            ci = f" [{c['low']:.0f}, {c['high']:.0f}]" if c["low"] is not None else ""
            cells.append(f"{'—' if c['mean'] is None else format(c['mean'], '.1f')}{ci}")
        console.print(f"{row['step']:>8,}" + "".join(f"{c:>32}" for c in cells))
    for n in names:
        s = result["sides"][n]
        ups = s["updates_per_s"]["mean"]
        console.print(
            f"{n}: {'—' if ups is None else format(ups, '.0f')} updates/s, updates {s['updates']}, "
            f"wall {s['wall_s']} s, episodes {s['episodes']}"
        )
    if "ratio" in result:
        r = result["ratio"]
        console.print(
            f"ratio nonstop / sb3 at {result['steps']:,} steps, relative to random: "
            f"{'— (SB3 did not beat the random policy)' if r is None else format(r, '.2f')} "
            f"(target ≥ {result['target_ratio']}: {'meets' if result['meets_target'] else 'misses'}); "
            f"updates/s nonstop / sb3: {'—' if result['update_speed_ratio'] is None else format(result['update_speed_ratio'], '.2f')}"
        )
