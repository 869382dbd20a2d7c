"""Your own torch model in a realtime world: a `TorchPolicy` around any `nn.Module` (docs/your-model.md).

The model below stands for any network whose forward pass takes 50 ms (3 ticks of Atari's 60 Hz):
it sleeps instead of computing, so the example runs on any machine without taking a core. Boxing
ticks on the wall clock whatever the model does; staggered inference (`auto`: it sizes N_I itself)
keeps an action ready at every tick. The last line is the run's figures as JSON.

    PYTHONPATH=src python examples/your_model_torch.py                          # auto, 20 s
    PYTHONPATH=src python examples/your_model_torch.py --scheduler exp_time --n-inference 3
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from nonstop import Session
from nonstop.inference.workers import InferencePool
from nonstop.policies import TorchPolicy


class SlowNet(torch.nn.Module):
    """Any nn.Module: (1, 3, 210, 160) frames in [0, 1] -> one score per action."""

    def __init__(self, n_actions: int, seconds: float = 0.05) -> None:
        super().__init__()
        self.head = torch.nn.Linear(3 * 14 * 10, n_actions)
        self.seconds = seconds

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)  # a big model's forward pass, without taking a core
        return self.head(frames[:, :, ::15, ::16].flatten(1))  # a 14 x 10 glimpse of each channel


#: ticks left out of the figures at the start (2 s): `auto` grows N_I from 1 until an action is ready each tick
WARMUP_TICKS = 120


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default="auto")
    parser.add_argument("--n-inference", default="auto", help="N_I, or auto (with --scheduler auto)")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    n_inference = args.n_inference if args.n_inference == "auto" else int(args.n_inference)

    with Session("Boxing", clock="wall", seed=0) as world:
        model = SlowNet(world.action_space.n)
        policy = lambda worker: TorchPolicy(model, world.action_space)  # noqa: E731 - one per worker
        with InferencePool(world, policy, args.scheduler, n_inference=n_inference) as pool:
            world.run_for(args.seconds)
            n_workers, end = pool.n_inference, int((world.clock.now() - world.origin) / world.tau_m)
    # the figures from the tick log: after the warm-up (the pool finds its size), up to the last tick
    # before the workers were stopped (the world ticks on while they finish)
    summary = world.tick_log.summary(warmup_ticks=WARMUP_TICKS, end_tick=end)
    print(
        f"{args.scheduler} N_I {n_workers}: inaction {summary['inaction_fraction']:.2%}, "
        f"delay {summary['delay_mean_ticks']:.2f} ticks, τ_I {summary['tau_i_mean_ticks']:.2f} ticks"
    )
    print(
        json.dumps(
            {
                "scheduler": args.scheduler,
                "n_inference": n_workers,
                **{
                    k: summary[k]
                    for k in (
                        "ticks",
                        "inaction_fraction",
                        "delay_mean_ticks",
                        "delay_p50_ticks",
                        "tau_i_mean_ticks",
                        "actions_per_s",
                    )
                },
            }
        )
    )


if __name__ == "__main__":
    main()
