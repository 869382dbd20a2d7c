"""Many worlds, one model: a batching inference server with request lanes (docs/your-model.md).

One `BatchingServer` owns the model of your_model_torch.py (50 ms a forward pass, whatever the batch:
what a GPU does for small batches) and serves every lane of every world; each world's inference pool
drives its own lanes, which the server answers in batches. The server runs one batch at a time, so
with a forward longer than a tick a lane's request first waits out the running batch and then its
own: τ_θ runs from L to 2L, and the lanes of one batch are answered together. That is why the route
needs a scheduler that releases each answer on its own tick (`quantile_hold`, or `auto`, which sizes
it) and lanes for 2L with room to spare (12 a world here, for L = 3 ticks: a busy machine stretches
τ_θ): under `exp_time` the lanes of a batch restart in lockstep and a world gets one fresh action a
batch. The last line is the run's figures as JSON.

    PYTHONPATH=src python examples/your_model_batched.py            # 2 worlds, quantile_hold, 12 lanes each, 30 s
    PYTHONPATH=src python examples/your_model_batched.py --scheduler auto --n-inference auto
    PYTHONPATH=src python examples/your_model_batched.py --scheduler exp_time --n-inference 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

from nonstop import Session
from nonstop.inference.batching import BatchingServer
from nonstop.inference.batchsize import LatencyCurve
from nonstop.inference.device import torch_forward
from nonstop.inference.workers import InferencePool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from your_model_torch import SlowNet


def _tick_now(world: Session) -> int:
    return int((world.clock.now() - world.origin) / world.tau_m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=2)
    parser.add_argument("--scheduler", default="quantile_hold")
    parser.add_argument("--n-inference", default="12", help="lanes a world, or auto (with --scheduler auto)")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    n_inference = args.n_inference if args.n_inference == "auto" else int(args.n_inference)

    # one torch thread: the server's forward shares 2 cores with the worlds' threads, and torch's
    # intra-op threads (one a core by default) then wait on each other (a TorchPolicy does the same)
    torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        worlds = [stack.enter_context(Session("Boxing", clock="wall", seed=i)) for i in range(args.worlds)]
        model = SlowNet(worlds[0].action_space.n)
        # L(b): 50 ms for any b; the server re-measures it as it runs on the wall clock
        server = BatchingServer(torch_forward(model, "cpu"), LatencyCurve.linear(0.05, 0.0), clock=worlds[0].clock)
        stack.callback(server.close)
        pools = []
        for world in worlds:
            lanes = lambda worker, w=world: server.lane(w.action_space, tau_m=w.tau_m, origin=w.origin)  # noqa: E731
            pools.append(stack.enter_context(InferencePool(world, lanes, args.scheduler, n_inference=n_inference)))
        begins = [_tick_now(world) + 180 for world in worlds]  # measured from 3 s after the last pool started
        stop_at = [world.now() + args.seconds for world in worlds]
        for world, t in zip(worlds, stop_at):  # each world ticks on its own thread; this waits and watches
            world.run_until(t)
        ends = [_tick_now(world) for world in worlds]  # the world ticks on while the lanes stop
        n_lanes = [pool.n_inference for pool in pools]
    summaries = [w.tick_log.summary(warmup_ticks=b, end_tick=e) for w, b, e in zip(worlds, begins, ends)]
    report = server.report()
    worst = max(s["inaction_fraction"] for s in summaries)
    delay = sum(s["delay_mean_ticks"] for s in summaries) / len(summaries)
    print(
        f"{args.worlds} worlds, {args.scheduler}, lanes {n_lanes}: inaction (worst world) {worst:.2%}, "
        f"delay {delay:.2f} ticks, batch mean {report['batch_size_mean']:.2f}"
    )
    print(
        json.dumps(
            {
                "worlds": args.worlds,
                "scheduler": args.scheduler,
                "n_inference": n_lanes,
                "ticks": [s["ticks"] for s in summaries],
                "inaction_fraction_worst": worst,
                "inaction_fraction": [s["inaction_fraction"] for s in summaries],
                "delay_mean_ticks": delay,
                "batch_size_mean": report["batch_size_mean"],
                "curve": report["curve"]["measured_s"],
            }
        )
    )


if __name__ == "__main__":
    main()
