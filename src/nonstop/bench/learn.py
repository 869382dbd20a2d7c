"""``nonstop bench learn``: DQN through the whole realtime machinery (virtual clock).

Two measurements, each a `nonstop.experiment.train` run on realtime CartPole (50 Hz):

1. **Zero latency** (``--ticks``, default 100k): the mean return over the last 20 episodes, and
   the first tick at which that mean reached ``--target`` (default 400). Target: reached within
   100k env ticks.
2. **The paper's ordering** (Figure 4) at one model latency (``--latency``, default 5 ticks):
   staggered inference with asynchronous learning against the two sequential baselines
   (infer-then-learn, learn-then-infer), same env, seed, budget and τ_L. The numbers are
   reported, not asserted: a short run is noisy.
3. **Updates per second** (``update_rate``): DQN updates of the paper's ResNet at ``--update-k`` on 84×84
   uint8 frames from a shared replay, on ``--device``, by the host path (gradient on the device, Adam on
   the host's shared master parameters, a publish to `SharedWeights`) and by the device learner (Adam, the
   target and the version on the device: `nonstop.learning.devicelearner`). ``--updates-only`` runs this
   part alone.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

__all__ = ["DESCRIPTION", "add_arguments", "run", "render", "first_reaching", "update_rates"]

DESCRIPTION = (
    "DQN on realtime CartPole: return within 100k ticks, staggered vs sequential baselines; updates/s of "
    "host Adam vs the device learner"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="CartPole", help="env id (default CartPole)")
    p.add_argument("--ticks", type=int, default=100_000, help="env ticks of the zero-latency run")
    p.add_argument("--target", type=float, default=400.0, help="mean return over the last 20 episodes to reach")
    p.add_argument("--latency", default="5t", help="model latency of the ordering comparison (default 5 ticks)")
    p.add_argument("--compare-ticks", type=int, default=30_000, help="env ticks of each ordering run")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env keyword argument, repeatable")
    p.add_argument(
        "--learning-starts", type=int, default=None, help="transitions before learning (default: the family's)"
    )
    p.add_argument(
        "--tau-l",
        type=float,
        default=None,
        help="virtual seconds per update (default τ_M; ~0.25 for k=1 on 2 CPU cores)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--update-k", type=float, default=1, help="ResNet width k of the update-rate part (default 1)")
    p.add_argument("--update-count", type=int, default=30, help="timed updates per path (default 30; --quick: 3)")
    p.add_argument("--updates-only", action="store_true", help="only the update-rate part: host Adam vs device learner")
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(p, what="every model of the runs (workers and learners)")


def first_reaching(returns: list[float], end_ticks: list[int], target: float, window: int = 20) -> int | None:
    """The env tick at which the mean of the last ``window`` returns first reached ``target``.

    >>> first_reaching([1, 5, 9, 9], [10, 20, 30, 40], 7, window=2)
    30
    """
    for i in range(window - 1, len(returns)):
        if np.mean(returns[i - window + 1 : i + 1]) >= target:
            return int(end_ticks[i])
    return None


def _episodes(log: Any) -> tuple[list[float], list[int]]:
    from nonstop.metrics.timing import episode_returns

    ended = (log["terminated"] | log["truncated"]).astype(bool)
    return episode_returns(log), log["tick"][ended].astype(int).tolist()


def _train(
    env: str, ticks: int, seed: int, env_args: list[str] | None = None, learning_starts: int | None = None, **kw: Any
) -> dict[str, Any]:
    from nonstop.envs import env_info
    from nonstop.learning.dqn import DQNConfig
    from nonstop.envs.registry import parse_env_args
    from nonstop.experiment import TrainConfig, default_env_kwargs, train

    info = env_info(env)
    overrides = {} if learning_starts is None else {"learning_starts": learning_starts}
    cfg = TrainConfig(
        env=env,
        env_kwargs={**default_env_kwargs(info.family), **parse_env_args(env_args)},
        seconds=ticks / info.tick_hz,
        seed=seed,
        algo_settings=DQNConfig.for_family(info.family, **overrides),
        **kw,
    )
    result = train(cfg, progress_every=max(1.0, ticks / info.tick_hz / 20))
    returns, ends = _episodes(result["tick_log"])
    s = result["summary"]
    return {
        "ticks": result["ticks"],
        "updates": result["updates"],
        "episodes": len(returns),
        "return_last20": float(np.mean(returns[-20:])) if returns else None,
        "return_max": float(max(returns)) if returns else None,
        "inaction_fraction": s["inaction_fraction"],
        "delay_mean_ticks": s["delay_mean_ticks"],
        "tau_i_mean_ticks": s["tau_i_mean_ticks"],
        "wall_s": round(result["wall_s"], 1),
        "_returns": returns,
        "_ends": ends,
    }


def update_rates(k: float, device: str, count: int, *, batch_size: int = 16, seed: int = 0) -> dict[str, Any]:
    """Updates per second of the host path and of the device learner (one over the median time of an update;
    ``count`` timed updates each, interleaved, after two untimed), on the same replay of random 84×84 uint8
    frames, from the same initial θ. On CUDA each timed update ends with a synchronise: what it measures is
    an update's whole time, not the rate of updates queued without waiting."""

    import torch

    from nonstop.inference.device import resolve_device
    from nonstop.learning.devicelearner import DeviceLearner, DeviceTrainingState
    from nonstop.learning.dqn import DQNConfig, build_q_network, init_training
    from nonstop.learning.learners import Learner, LearnerSettings, Segments, apply
    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.weights import SharedWeights, TrainingState

    if count < 1:
        raise ValueError(f"--update-count must be at least 1, got {count}")
    dev = resolve_device(device)
    cfg = DQNConfig.for_family("atari", k=k, batch_size=batch_size, learning_starts=0)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = build_q_network((84, 84), 18, cfg)
    n = sum(p.numel() for p in model.parameters())
    replay = ReplayBuffer.create(capacity=512, obs_shape=(84, 84), dtype=np.uint8)
    segments: list[Any] = [replay]
    try:
        _fill(replay, rng, 256)
        for _ in range(4):
            segments.append(TrainingState.create(n) if len(segments) % 2 else SharedWeights.create(n))
        host_state, host_weights, dev_state, dev_weights = segments[1:]
        for state, weights in ((host_state, host_weights), (dev_state, dev_weights)):
            init_training(model, state, weights)
        settings = LearnerSettings((84, 84), 18, cfg, device=str(dev))
        host = Learner(0, settings, Segments(host_state, host_weights, replay), seed)
        dstate = DeviceTrainingState.from_host(dev_state, dev)
        learner = DeviceLearner(settings, dstate, Segments(dev_state, dev_weights, replay), seed)

        def host_update() -> None:
            out = host.gradient()
            assert out is not None
            apply(host_state, host_weights, out[0], out[1], cfg)

        def device_update() -> None:
            loss = learner.gradient()
            assert loss is not None
            learner.apply(loss)

        host_rate, device_rate = _interleaved_rates(host_update, device_update, dev, count)
    finally:
        for seg in segments:
            seg.unlink()
    return {
        "k": k,
        "params": n,
        "device": str(dev),
        "batch_size": batch_size,
        "updates_timed": count,
        "host_apply_updates_per_s": round(host_rate, 2),
        "device_learner_updates_per_s": round(device_rate, 2),
        "device_over_host": round(device_rate / host_rate, 3),
    }


def _fill(replay: Any, rng: np.random.Generator, n: int) -> None:
    """``n`` transitions between random 84×84 frames."""
    frames = [replay.add_frame(rng.integers(0, 256, (84, 84), dtype=np.uint8)) for _ in range(n + 1)]
    for i in range(n):
        replay.add_transition(frames[i], int(rng.integers(18)), float(rng.normal()), 0.99, 1, frames[i + 1])


def _interleaved_rates(host_update: Any, device_update: Any, dev: Any, count: int) -> tuple[float, float]:
    """Updates per second of each, over ``count`` timed updates after two untimed: interleaved, one
    update of each in turn, and the median kept (a busy machine slows both alike)."""
    import time

    import torch

    def timed(update: Any) -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        update()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter() - t0

    for _ in range(2):  # untimed: allocations, cuDNN's choices
        host_update()
        device_update()
    host_s, device_s = [], []
    for _ in range(count):
        host_s.append(timed(host_update))
        device_s.append(timed(device_update))
    return 1 / float(np.median(host_s)), 1 / float(np.median(device_s))


def run(args: argparse.Namespace) -> dict[str, Any]:
    ticks, compare_ticks = args.ticks, args.compare_ticks
    if args.quick:
        ticks, compare_ticks = min(ticks, 3000), min(compare_ticks, 1500)
    for name, value in (("--ticks", ticks), ("--compare-ticks", compare_ticks)):
        if value < 100 and not args.updates_only:
            raise ValueError(f"{name} must be at least 100 ticks, got {value}")
    count = min(args.update_count, 3) if args.quick else args.update_count
    rates = update_rates(args.update_k, getattr(args, "device", "cpu"), count, seed=args.seed)
    if args.updates_only:
        return {"update_rate": rates}
    common = {
        "env_args": args.env_arg,
        "learning_starts": args.learning_starts,
        "tau_l": args.tau_l,
        "device": getattr(args, "device", "cpu"),
        "dtype": getattr(args, "dtype", None),
    }
    zero = _train(args.env, ticks, args.seed, **common)
    reached = first_reaching(zero.pop("_returns"), zero.pop("_ends"), args.target)
    ordering = {}
    for interaction in ("staggered", "infer_then_learn", "learn_then_infer"):
        row = _train(args.env, compare_ticks, args.seed, interaction=interaction, latency=args.latency, **common)
        row.pop("_returns"), row.pop("_ends")
        ordering[interaction] = row
    stag = ordering["staggered"]["return_last20"]
    seq_best = max((ordering[k]["return_last20"] or float("-inf")) for k in ("infer_then_learn", "learn_then_infer"))
    return {
        "env": args.env,
        "zero_latency": zero,
        "target_return": args.target,
        "ticks_to_target": reached,
        "target_met": reached is not None and reached <= 100_000,
        "latency": args.latency,
        "ordering": ordering,
        "staggered_beats_sequential": None if stag is None else bool(stag > seq_best),
        "update_rate": rates,
    }


def render(result: dict[str, Any]) -> None:
    u = result.get("update_rate")  # absent from a result saved before the device learner was timed
    if u:
        print(
            f"updates/s at k={u['k']:g} ({u['params']:,} parameters) on {u['device']}, batch {u['batch_size']}: "
            f"host Adam {u['host_apply_updates_per_s']}, device learner {u['device_learner_updates_per_s']} "
            f"(x{u['device_over_host']})"
        )
    if "zero_latency" not in result:
        return
    z = result["zero_latency"]
    reached = result["ticks_to_target"]
    target = f"reached at tick {reached:,}" if reached is not None else f"not reached in {z['ticks']:,} ticks"
    print(
        f"zero latency, {z['ticks']:,} ticks: last-20 return {z['return_last20']}, "
        f"target {result['target_return']} {target} ({z['wall_s']} s)"
    )
    from nonstop._console import Console
    from rich.table import Table

    table = Table(title=f"latency {result['latency']}: the paper's ordering (Figure 4)")
    for col in ("interaction", "return (last 20)", "inaction", "delay (ticks)", "updates", "episodes"):
        table.add_column(col)
    for name, r in result["ordering"].items():
        table.add_row(
            name,
            f"{r['return_last20']:.1f}" if r["return_last20"] is not None else "—",
            f"{r['inaction_fraction']:.1%}",
            f"{r['delay_mean_ticks']:.2f}",
            f"{r['updates']:,}",
            str(r["episodes"]),
        )
    Console().print(table)
