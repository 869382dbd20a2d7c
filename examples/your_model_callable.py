"""Anything callable as a realtime agent: a `Policy` around a function (docs/your-model.md).

`ask_model` stands for any model behind a call, an LLM client included: here a stub that takes
250 ms (15 ticks of Atari's 60 Hz) and answers with an action. A `Policy` needs one method, `act`,
returning a `Decision`; the inference workers measure how long each call took (τ_θ), and `auto`
sizes N_I so that an answer lands at every tick. The last line is the run's figures as JSON.

    PYTHONPATH=src python examples/your_model_callable.py                 # auto, 20 s
    PYTHONPATH=src python examples/your_model_callable.py --scheduler sequential --n-inference 1
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nonstop import Session
from nonstop.inference.workers import InferencePool
from nonstop.policies import Decision, Policy


def ask_model(frame: np.ndarray) -> int:
    """A stand-in for an LLM client: 250 ms a call, an action id back."""
    time.sleep(0.25)
    return int(frame.mean()) % 18


class CallablePolicy(Policy):
    """Any ``obs -> action`` callable as a nonstop policy."""

    def __init__(self, call: Callable[[np.ndarray], Any], action_space: Any) -> None:
        self.call = call
        self.action_space = action_space

    def act(self, obs: np.ndarray) -> Decision:
        return Decision(self.call(obs))  # the worker times the call: that is τ_θ


#: ticks left out of the figures at the start (5 s): `auto` grows N_I from 1 until an action is ready each tick
WARMUP_TICKS = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default="auto")
    parser.add_argument("--n-inference", default="auto", help="N_I, or auto (with --scheduler auto)")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    n_inference = args.n_inference if args.n_inference == "auto" else int(args.n_inference)

    with Session("Boxing", clock="wall", seed=0) as world:
        policy = lambda worker: CallablePolicy(ask_model, world.action_space)  # noqa: E731 - one per worker
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
