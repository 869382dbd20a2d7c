"""``nonstop train``: a realtime training run a user can start, watch, stop and resume.

The run directory (see `nonstop.learning.runlog`) gets the config, a progress row
every ``--progress-every`` world seconds (shown live), every finished episode,
checkpoints every ``--checkpoint-every`` world seconds and on Ctrl-C/SIGTERM,
TensorBoard events, the tick log and a summary; ``nonstop report RUN`` plots it.

``--resume`` continues from the newest whole checkpoint: parameters, Adam
moments, target network, update and tick counters (so ε continues its anneal),
and the replay's contents when they were saved (``--checkpoint-replay``, on by
default when the replay is small enough to write out). The world itself starts
a fresh episode: a realtime world cannot be rewound.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_arguments", "run_train", "config_from_args"]

#: Above this many bytes the replay is not written into checkpoints unless asked.
REPLAY_CHECKPOINT_LIMIT = 512 * 2**20


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nonstop.compare import n_workers_arg
    from nonstop.inference.schedulers import SCHEDULER_NAMES
    from nonstop.learning.learners import LEARNER_MODES
    from nonstop.run import INTERACTIONS

    p.add_argument("--env", default="CartPole", help="env id (see `nonstop envs`; default CartPole)")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env keyword argument, repeatable (max_episode_steps=900)")
    p.add_argument("--clock", choices=("virtual", "wall"), default="virtual", help="virtual: simulated time (fast, exact); wall: real time")
    p.add_argument("--seconds", type=float, default=600.0, help="world seconds to run (default 600)")
    p.add_argument("--interaction", choices=INTERACTIONS, default="staggered", help="staggered, or a sequential baseline")
    p.add_argument("--scheduler", choices=SCHEDULER_NAMES, default="exp_time", help="inference scheduler (staggered)")
    p.add_argument("--n-inference", type=n_workers_arg, default=None, help="N_I (default ⌈τ̄_θ/τ_M⌉), or 'auto': grown and shrunk online")
    p.add_argument("--latency", default="0", help="declared model latency: 5t, 80ms, lognormal:6t,0.5 (default 0)")
    p.add_argument("--n-learners", type=int, default=1, help="N_L learners (default 1)")
    p.add_argument("--learner-mode", choices=LEARNER_MODES, default="round_robin")
    p.add_argument("--tau-l", type=float, default=None, help="virtual seconds per update (default τ_M)")
    p.add_argument("--backend", default="thread", metavar="thread|process|ray",
                   help="wall-clock inference workers: threads, processes, or Ray actors on any node (pip install -e '.[ray]')")
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="Ray cluster for --backend ray (default: start a local Ray)")
    p.add_argument("--k", type=float, default=None, help="IMPALA ResNet width for image observations")
    p.add_argument("--lr", type=float, default=None, help="Adam step size (default: the env family's)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--replay-capacity", type=int, default=None, help="transitions kept (paper: 1,000,000)")
    p.add_argument("--learning-starts", type=int, default=None)
    p.add_argument("--double", action="store_true", default=None, help="double DQN")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", metavar="RUN", default=None, help="run directory (default runs/<env>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    p.add_argument("--progress-every", type=float, default=5.0, help="world seconds between progress rows")
    p.add_argument("--checkpoint-every", type=float, default=120.0, help="world seconds between checkpoints")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--checkpoint-replay", choices=("auto", "yes", "no"), default="auto",
                   help=f"write the replay into checkpoints (auto: when under {REPLAY_CHECKPOINT_LIMIT >> 20} MiB and the disk has room)")  # fmt: skip


def config_from_args(args: argparse.Namespace) -> Any:
    from nonstop.envs import env_info
    from nonstop.learning.dqn import DQNConfig
    from nonstop.run import TrainConfig, default_env_kwargs, parse_env_args

    overrides = {name: getattr(args, name) for name in ("k", "lr", "batch_size", "replay_capacity", "learning_starts", "double")
                 if getattr(args, name, None) is not None}  # fmt: skip
    family = env_info(args.env).family
    dqn = DQNConfig.for_family(family, **overrides)
    env_kwargs = {**default_env_kwargs(family), **parse_env_args(args.env_arg)}
    return TrainConfig(
        env=args.env, env_kwargs=env_kwargs, clock=args.clock, seconds=args.seconds, interaction=args.interaction, scheduler=args.scheduler,
        n_inference=args.n_inference, latency=args.latency, n_learners=args.n_learners,
        learner_mode=args.learner_mode, tau_l=args.tau_l, backend=args.backend, ray_address=args.ray_address,
        seed=args.seed, dqn=dqn,
    )  # fmt: skip


def _default_out(env: str) -> Path:
    return Path("runs") / f"{env.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"


def _replay_in_checkpoint(choice: str, run: Any, out: Path) -> bool:
    if choice != "auto":
        return choice == "yes"
    size = run.replay.nbytes
    return size <= REPLAY_CHECKPOINT_LIMIT and shutil.disk_usage(out).free > 4 * size


def run_train(args: argparse.Namespace) -> int:
    from rich.console import Console

    from nonstop.learning.checkpoint import checkpoint_path, keep_last, latest_checkpoint, save_checkpoint
    from nonstop.learning.replay import check_replay_fits
    from nonstop.learning.runlog import Progress, RunLog, read_config
    from nonstop.run import ProgressRows, TrainingRun

    for name in ("seconds", "progress_every", "checkpoint_every"):
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value}")
    console = Console(stderr=True)
    cfg = config_from_args(args)
    out = Path(args.out) if args.out else _default_out(args.env)
    ckpt = None
    if args.resume:
        if not args.out:
            raise ValueError("--resume needs --out RUN: the run directory to continue")
        read_config(out)  # a clear error if RUN is not a run directory
        ckpt = latest_checkpoint(out, warn=lambda msg: console.print(msg, style="yellow", markup=False))
        if ckpt is None:
            raise FileNotFoundError(f"{out} has no checkpoint to resume from")
    run = TrainingRun(cfg)
    need = check_replay_fits(cfg.dqn.replay_capacity, run.obs_shape, run.obs_space.dtype)  # before RUN exists
    console.print(f"replay: {cfg.dqn.replay_capacity:,} transitions of {run.obs_shape} {run.obs_space.dtype} "
                  f"→ {need / 2**20:,.1f} MiB of shared memory; N_I={run.n_inference}, N_L={cfg.n_learners}, "
                  f"{cfg.interaction}, clock={cfg.clock}; run dir {out}")  # fmt: skip
    config = cfg.to_dict()
    log = RunLog(out, config, resume=args.resume, note=lambda msg: console.print(msg, style="dim", markup=False))
    wall0 = time.monotonic()
    interrupted = False
    summary: dict[str, Any] = {}
    rows: ProgressRows | None = None
    with log:
        try:
            run.build()
            if ckpt is not None:
                run.restore(ckpt.state)
                console.print(f"resumed from {ckpt.path.name}: {run.state.updates:,} updates, {run.tick_offset:,} env ticks"
                              + ("" if run.replay_restored else "; the replay was not in it, so it refills from empty"))  # fmt: skip
            run.start()
            rows = ProgressRows(run, wall0)
            total = math.ceil(cfg.seconds / run.tau_m)
            done, next_ckpt = 0.0, args.checkpoint_every
            with Progress(total_ticks=run.tick_offset + total) as view:
                while done < cfg.seconds - 1e-9:
                    chunk = min(args.progress_every, cfg.seconds - done)
                    run.advance(chunk)
                    done += chunk
                    for ep in rows.episodes():
                        log.log_episode(ep)
                    row = rows.progress()
                    log.log_progress(row)
                    view.update(row)
                    if done >= next_ckpt - 1e-9:
                        next_ckpt += args.checkpoint_every
                        snap = run.snapshot(include_replay=_replay_in_checkpoint(args.checkpoint_replay, run, out))
                        save_checkpoint(checkpoint_path(out, run.state.updates), snap)
                        keep_last(out, args.keep_checkpoints)
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM (the CLI turns it into SystemExit)
            interrupted = True
            console.print("interrupted: writing a final checkpoint and stopping cleanly")
        finally:
            try:
                if getattr(run, "world", None) is not None and run.world.slot is not None and getattr(run, "state", None) is not None:
                    run.quiesce()
                    for ep in rows.episodes() if rows is not None else []:
                        log.log_episode(ep)
                    snap = run.snapshot(include_replay=_replay_in_checkpoint(args.checkpoint_replay, run, out))
                    save_checkpoint(checkpoint_path(out, run.state.updates), snap)
                    keep_last(out, args.keep_checkpoints)
            finally:  # even if the final checkpoint fails (a full disk): reap and unlink everything
                run.teardown()
        tick_log = run.world.tick_log
        tick_log.meta["tick_offset"] = run.tick_offset  # this segment's tick 0 is the run's tick `tick_offset`
        previous = out / "ticklog.npz"
        if run.tick_offset and previous.exists():  # keep the earlier segment's log beside the newest
            previous.rename(out / f"ticklog-before-{run.tick_offset:09d}.npz")
        log.save_ticklog(tick_log)
        from nonstop.metrics.timing import episode_returns, summarize

        returns = episode_returns(tick_log)
        summary = {**summarize(tick_log), "updates": run.final_updates, "env_ticks_total": run.tick_offset + len(tick_log),
                   "recent_return": float(np.mean(returns[-20:])) if returns else None, "interrupted": interrupted,
                   "wall_s": round(time.monotonic() - wall0, 2)}  # fmt: skip
        log.write_summary(summary)
    recent = "—" if summary["recent_return"] is None else f"{summary['recent_return']:.2f}"
    console.print(f"done: {summary['env_ticks_total']:,} env ticks, {summary['updates']:,} updates, "
                  f"inaction {summary['inaction_fraction']:.1%}, recent return {recent}; "
                  f"`nonstop report {out}` draws the plots")  # fmt: skip
    print(json.dumps({"run_dir": str(out), "updates": summary["updates"], "recent_return": summary["recent_return"]}))
    return 130 if interrupted else 0
