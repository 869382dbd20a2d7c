"""The authors' delay simulation (``nonstop sweep --delay-start zeros``), run as they ran it.

The authors' released Atari script simulates an inference delay of ``d`` steps without a clock: the
env steps synchronously, the action taken at step ``t`` is the policy's on ``o_{t−d}`` — a zero frame
for the first ``d`` steps of every episode — and the replay stores ``(o_{t−d}, a_t, r_t, o_{t+1})``.
nonstop's own cells run the world on the virtual clock instead: ``d`` staggered workers, the first
``d`` ticks of an episode left to β (the actions in flight were computed in the previous episode and
are dropped as stale), and transitions formed in the induced delayed semi-MDP. Either can be argued;
the paper's figures used the authors', so ``nonstop paper`` runs its staggered cells this way.

This module is that loop (a DQN with the cell's settings: `DQNConfig`, `build_q_network`, Huber loss,
a target network, Adam, ε annealed per step), written to a run directory the sweep reads like a
``nonstop train`` one: ``episodes.csv`` (episode, return, ticks) and ``summary.json``. Every step is
an agent step (no β, no inaction), each ``d`` ticks late. Run it as
``python -m nonstop.experiment.delaysim --env ENV --delay D --episodes N --out DIR [train's DQN flags]``.

>>> h, seen = ZeroStartHistory(2, np.ones(1)), []     # d = 2: steps 0 and 1 act on zero frames
>>> for x in (2.0, 3.0, 4.0):
...     seen.append(float(h.oldest()[0])); h.push(np.full(1, x))
>>> seen
[0.0, 0.0, 1.0]
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ZeroStartHistory", "simulate", "main"]


class ZeroStartHistory:
    """The last ``delay + 1`` observations of an episode, zero frames before its first: `oldest`
    is ``o_{t−d}``, what the authors' agent acts on at step ``t``."""

    def __init__(self, delay: int, first: np.ndarray) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise ValueError(f"delay must be an int >= 0 (steps), got {delay!r}")
        zero = np.zeros_like(first)
        self._frames: deque[np.ndarray] = deque([zero] * delay + [first], maxlen=delay + 1)

    def oldest(self) -> np.ndarray:
        return self._frames[0]

    def push(self, obs: np.ndarray) -> None:
        self._frames.append(obs)


def _dqn_settings(argv: list[str], family: str) -> Any:
    """`DQNConfig` from ``nonstop train``'s DQN flags among ``argv`` (the cell's), the rest ignored."""
    from nonstop.learning.dqn import PAPER_PRESETS, DQNConfig

    p = argparse.ArgumentParser(add_help=False)
    names = {
        "--lr": float,
        "--batch-size": int,
        "--epsilon-ticks": int,
        "--epsilon-start": float,
        "--epsilon-end": float,
        "--learning-starts": int,
        "--target-update": int,
        "--replay-capacity": int,
        "--gamma": float,
        "--updates-per-transition": float,
        "--k": float,
    }
    for flag, kind in names.items():
        p.add_argument(flag, type=kind, default=None)
    p.add_argument("--preset", default=None)
    args, _ = p.parse_known_args(argv)
    overrides: dict[str, Any] = dict(PAPER_PRESETS.get(args.preset or "", {}))
    overrides.update(
        {
            flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
            for flag in names
            if getattr(args, flag[2:].replace("-", "_")) is not None
        }
    )
    return DQNConfig.for_family(family, **overrides)


def simulate(
    env_id: str,
    env_kwargs: dict[str, Any],
    *,
    delay: int,
    episodes: int,
    seed: int,
    out: Path,
    dqn_argv: Sequence[str] = (),
    learn_every: int | None = None,
) -> dict[str, Any]:
    """Train ``episodes`` episodes of the authors' delay simulation at ``delay`` steps into ``out``;
    returns the summary it writes. ``learn_every``: an update per this many steps (default: the
    DQN settings' ``updates_per_transition``, 1 when it is 0)."""
    import torch

    from nonstop.envs.registry import env_info, make_env
    from nonstop.learning.dqn import build_q_network, epsilon_at

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"--episodes must be an int >= 1, got {episodes!r}")
    info = env_info(env_id, **env_kwargs)
    cfg = _dqn_settings(list(dqn_argv), info.family)
    every = learn_every or (max(1, round(1 / cfg.updates_per_transition)) if cfg.updates_per_transition > 0 else 1)
    env = make_env(env_id, **env_kwargs)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    space: Any = env.action_space
    n_actions = int(space.n)
    obs, _ = env.reset(seed=seed)
    obs = np.asarray(obs)
    online = build_q_network(tuple(obs.shape), n_actions, cfg)
    target = copy.deepcopy(online)
    optimiser = torch.optim.Adam(online.parameters(), lr=cfg.lr)
    capacity = cfg.replay_capacity
    store = {
        "obs": np.zeros((capacity, *obs.shape), obs.dtype),
        "next": np.zeros((capacity, *obs.shape), obs.dtype),
        "action": np.zeros(capacity, np.int64),
        "reward": np.zeros(capacity, np.float32),
        "done": np.zeros(capacity, np.float32),
    }
    size = head = steps = updates = 0
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()

    def q_of(x: np.ndarray, net: Any) -> Any:
        t = torch.as_tensor(x, dtype=torch.float32)
        return net(t / 255.0 if x.dtype == np.uint8 else t)

    try:
        for episode in range(episodes):
            if episode:
                obs, _ = env.reset()
                obs = np.asarray(obs)
            frames, total, ticks, over = ZeroStartHistory(delay, obs), 0.0, 0, False
            while not over:
                seen = frames.oldest()  # o_{t−d}: zeros for the first d steps
                if rng.random() < epsilon_at(steps, cfg):
                    action = int(rng.integers(n_actions))
                else:
                    with torch.no_grad():
                        action = int(q_of(seen[None], online).argmax(1).item())
                nxt, reward, terminated, truncated, _ = env.step(action)
                nxt = np.asarray(nxt)
                over = bool(terminated or truncated)
                store["obs"][head], store["next"][head], store["action"][head] = seen, nxt, action
                store["reward"][head], store["done"][head] = float(reward), float(terminated)
                head, size = (head + 1) % capacity, min(size + 1, capacity)
                frames.push(nxt)
                total, ticks, steps = total + float(reward), ticks + 1, steps + 1
                if size >= max(cfg.learning_starts, cfg.batch_size) and steps % every == 0:
                    idx = rng.integers(size, size=cfg.batch_size)
                    q = q_of(store["obs"][idx], online).gather(1, torch.as_tensor(store["action"][idx])[:, None])[:, 0]
                    with torch.no_grad():
                        best = q_of(store["next"][idx], target).max(1).values
                        goal = (
                            torch.as_tensor(store["reward"][idx])
                            + cfg.gamma * (1 - torch.as_tensor(store["done"][idx])) * best
                        )
                    loss = torch.nn.functional.smooth_l1_loss(q, goal)
                    optimiser.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(online.parameters(), cfg.max_grad_norm)
                    optimiser.step()
                    updates += 1
                    if updates % cfg.target_update == 0:
                        target.load_state_dict(online.state_dict())
            rows.append({"episode": episode, "return": total, "ticks": ticks})
    finally:
        env.close()
    with (out / "episodes.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["episode", "return", "ticks"])
        writer.writeheader()
        writer.writerows(rows)
    summary = {
        "delay_start": "zeros",
        "inaction_fraction": 0.0,
        "delay_mean_ticks": float(delay),
        "n_inference": None,
        "updates": updates,
        "ticks": steps,
        "wall_s": round(time.monotonic() - t0, 2),
        "complete": True,
        "episodes": len(rows),
    }
    (out / "summary.json").write_text(json.dumps(summary) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    from nonstop.envs.registry import parse_env_args

    p = argparse.ArgumentParser(prog="python -m nonstop.experiment.delaysim", description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True)
    p.add_argument("--env-arg", action="append", default=[])
    p.add_argument("--delay", type=int, required=True, help="steps of delay d (the declared inference ticks)")
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--learn-every", type=int, default=None, help="an update per this many steps")
    p.add_argument("--out", required=True)
    args, rest = p.parse_known_args(argv)
    try:
        simulate(
            args.env,
            parse_env_args(args.env_arg),
            delay=args.delay,
            episodes=args.episodes,
            seed=args.seed,
            out=Path(args.out),
            dqn_argv=rest,
            learn_every=args.learn_every,
        )
    except ValueError as exc:
        print(f"delaysim: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
