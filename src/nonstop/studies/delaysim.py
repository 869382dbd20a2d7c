"""The authors' delay simulation (``nonstop sweep --delay-start zeros``), run as they ran it.

The authors' released Atari script simulates an inference delay of ``d`` steps without a clock: the
env steps synchronously, the action taken at step ``t`` is the policy's on ``o_{t−d}`` — a zero frame
for the first ``d`` steps of every episode — and the replay stores ``(o_{t−d}, a_t, r_t, o_{t+1})``.
nonstop's own cells run the world on the virtual clock instead: ``d`` staggered workers, the first
``d`` ticks of an episode left to β (the actions in flight were computed in the previous episode and
are dropped as stale), and transitions formed in the induced delayed semi-MDP. Either can be argued;
the paper's figures used the authors', so ``nonstop paper`` runs its staggered cells this way.

This module is that loop, a study rather than a training run: DQN's own part (`nonstop.learning.dqn.DQN`
with the cell's settings: its network, Huber loss and clip, its ε annealed per step) with an Adam and a
target network of its own, stepped inline, written to a run directory the sweep reads like a
``nonstop train`` one: ``episodes.csv`` (episode, return, ticks) and ``summary.json``. Every step is
an agent step (no β, no inaction), each ``d`` ticks late. Run it as
``python -m nonstop.studies.delaysim --env ENV --delay D --episodes N --out DIR [train's DQN flags]``.

>>> h, seen = ZeroStartHistory(2, np.ones(1)), []     # d = 2: steps 0 and 1 act on zero frames
>>> for x in (2.0, 3.0, 4.0):
...     seen.append(float(h.oldest()[0])); h.push(np.full(1, x))
>>> seen
[0.0, 0.0, 1.0]
"""

from __future__ import annotations

import argparse
import dataclasses
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
    """`DQNConfig` from ``nonstop train``'s DQN flags among ``argv`` (the cell's: one per number-valued
    field, and ``--preset``), the rest ignored."""
    from dataclasses import fields

    from nonstop.learning.dqn import DQN, PAPER_EPSILON_TICKS, DQNConfig

    p = argparse.ArgumentParser(add_help=False)
    kinds = {"float": float, "int": int}  # a field typed "int | None" is an int flag too (--epsilon-ticks)
    names = [f.name for f in fields(DQNConfig) if str(f.type).removesuffix(" | None") in kinds]
    for name in names:
        kind = kinds[str(next(f.type for f in fields(DQNConfig) if f.name == name)).removesuffix(" | None")]
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=None)
    p.add_argument("--preset", default=None)
    args, _ = p.parse_known_args(argv)
    given = vars(args)  # every flag this parser defines is set, typed or not
    overrides: dict[str, Any] = dict(DQN.presets.get(args.preset or "", {}))
    overrides.update({name: given[name] for name in names if given[name] is not None})
    # the simulation runs by episodes, so no run length sizes an unset ε span: the paper's 100,000 steps
    cfg = DQNConfig.for_family(family, **overrides)
    return cfg if cfg.epsilon_ticks is not None else dataclasses.replace(cfg, epsilon_ticks=PAPER_EPSILON_TICKS)


class _Replay:
    """The authors' ring of ``(o_{t−d}, a_t, r_t, o_{t+1}, done)``, sampled as a `Batch` for DQN's update."""

    def __init__(self, capacity: int, obs: np.ndarray, gamma: float) -> None:
        self.capacity, self.gamma = capacity, gamma
        self.obs = np.zeros((capacity, *obs.shape), obs.dtype)
        self.next = np.zeros((capacity, *obs.shape), obs.dtype)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, np.float32)
        self.size = self.head = 0

    def add(self, seen: np.ndarray, action: int, reward: float, nxt: np.ndarray, terminated: bool) -> None:
        i = self.head
        self.obs[i], self.next[i], self.action[i], self.reward[i], self.done[i] = seen, nxt, action, reward, terminated
        self.head, self.size = (i + 1) % self.capacity, min(self.size + 1, self.capacity)

    def sample(self, n: int, rng: np.random.Generator) -> Any:
        from nonstop.learning.replay import Batch

        idx = rng.integers(self.size, size=n)
        discount = (self.gamma * (1.0 - self.done[idx])).astype(np.float32)  # one step; 0 at a terminal
        return Batch(self.obs[idx], self.action[idx], self.reward[idx], discount, self.next[idx], np.ones(n, np.int64))


class _Learner:
    """DQN's part (`nonstop.learning.dqn.DQN`: its network, loss and clip, its ε) with its own Adam and target
    copy, stepped inline as the authors' script does."""

    def __init__(self, cfg: Any, obs: np.ndarray, action_space: Any, every: int) -> None:
        import torch

        self.algo = cfg.algorithm(tuple(obs.shape), action_space)
        self.online = self.algo.build_model()
        self.target = copy.deepcopy(self.online)
        self.optimiser = torch.optim.Adam(self.online.parameters(), lr=cfg.lr)
        self.replay = _Replay(cfg.replay_capacity, obs, cfg.gamma)
        self.cfg, self.every, self.steps, self.updates = cfg, every, 0, 0

    def act(self, seen: np.ndarray, rng: np.random.Generator) -> int:
        """ε-greedy on ``seen`` (ε the algorithm's, after this many steps)."""
        import torch

        from nonstop.learning.algos import to_tensor

        if rng.random() < self.algo.exploration(self.steps, np.empty(0, np.float32)):
            return int(rng.integers(int(self.algo.action_space.n)))
        with torch.no_grad():
            return int(self.online(to_tensor(seen[None])).argmax(1).item())

    def step(self, seen: np.ndarray, action: int, reward: float, nxt: np.ndarray, terminated: bool, rng: Any) -> None:
        """Store the step's transition; every ``every`` steps once learning starts, one update."""
        self.replay.add(seen, action, reward, nxt, terminated)
        self.steps += 1
        cfg = self.cfg
        if self.replay.size < max(cfg.learning_starts, cfg.batch_size) or self.steps % self.every:
            return
        self.algo.backward(self.online, self.target, self.replay.sample(cfg.batch_size, rng))
        self.optimiser.step()
        self.updates += 1
        if self.updates % cfg.target_update == 0:
            self.target.load_state_dict(self.online.state_dict())


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

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"--episodes must be an int >= 1, got {episodes!r}")
    cfg = _dqn_settings(list(dqn_argv), env_info(env_id, **env_kwargs).family)
    every = learn_every or (max(1, round(1 / cfg.updates_per_transition)) if cfg.updates_per_transition > 0 else 1)
    env = make_env(env_id, **env_kwargs)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    # one intra-op thread, as nonstop's learners: a sweep runs its cells side by side, and two threads a
    # cell on a busy machine wait on each other (a 300-step cell: 12 s of CPU in 106 s of wall at load 8)
    torch.set_num_threads(1)
    obs = np.asarray(env.reset(seed=seed)[0])
    learner = _Learner(cfg, obs, env.action_space, every)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        for episode in range(episodes):
            if episode:
                obs = np.asarray(env.reset()[0])
            frames, total, ticks, over = ZeroStartHistory(delay, obs), 0.0, 0, False
            while not over:
                seen = frames.oldest()  # o_{t−d}: zeros for the first d steps
                action = learner.act(seen, rng)
                nxt, reward, terminated, truncated, _ = env.step(action)
                nxt = np.asarray(nxt)
                over = bool(terminated or truncated)
                learner.step(seen, action, float(reward), nxt, bool(terminated), rng)
                frames.push(nxt)
                total, ticks = total + float(reward), ticks + 1
            rows.append({"episode": episode, "return": total, "ticks": ticks})
    finally:
        env.close()
    return _write(out, rows, delay, learner.updates, learner.steps, time.monotonic() - t0)


def _write(out: Path, rows: list[dict[str, Any]], delay: int, updates: int, steps: int, wall: float) -> dict[str, Any]:
    """``episodes.csv`` and ``summary.json``, as a ``nonstop train`` run writes them; returns the summary."""
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
        "wall_s": round(wall, 2),
        "complete": True,
        "episodes": len(rows),
    }
    (out / "summary.json").write_text(json.dumps(summary) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    from nonstop.envs.registry import parse_env_args

    p = argparse.ArgumentParser(prog="python -m nonstop.studies.delaysim", description=__doc__.splitlines()[0])
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
