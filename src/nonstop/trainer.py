"""``nonstop train``: a realtime training run a user can start, watch, stop and resume.

The run directory (see `nonstop.learning.runlog`) gets the config, a progress row
every ``--progress-every`` world seconds (shown live), every finished episode,
checkpoints every ``--checkpoint-every`` world seconds and on Ctrl-C/SIGTERM,
TensorBoard events, the tick log and a summary; ``nonstop report RUN`` plots it. A ``--self-play``
run also writes every match against its snapshot pool to ``matches.csv`` (`nonstop.selfplay`).

``--resume`` continues from the newest whole checkpoint: parameters, Adam
moments, target network, update and tick counters (so ε continues its anneal),
and the replay's contents when they were saved (``--checkpoint-replay``, on by
default when the replay is small enough to write out). The world itself starts
a fresh episode: a realtime world cannot be rewound.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_arguments", "run_train", "config_from_args", "RunEnd", "Checkpointer"]

#: Above this many bytes the replay is not written into checkpoints unless asked.
REPLAY_CHECKPOINT_LIMIT = 512 * 2**20


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nonstop.compare import n_workers_arg
    from nonstop.inference.schedulers import SCHEDULER_NAMES
    from nonstop.learning.learners import LEARNER_MODES
    from nonstop.realtime.defaults import DEFAULT_NAMES
    from nonstop.run import INTERACTIONS

    p.add_argument("--env", default="CartPole", help="env id (see `nonstop envs`; default CartPole)")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env keyword argument, repeatable (max_episode_steps=900)")
    p.add_argument("--clock", choices=("virtual", "wall"), default="virtual", help="virtual: simulated time (fast, exact); wall: real time")
    p.add_argument("--seconds", type=float, default=600.0, help="world seconds to run (default 600)")
    p.add_argument("--episodes", type=int, default=None, metavar="N",
                   help="also stop once the run has N finished episodes in all (a resumed run counts its earlier "
                        "segments'), whichever of --seconds and --episodes comes first (default: --seconds alone)")  # fmt: skip
    p.add_argument("--interaction", choices=INTERACTIONS, default="staggered", help="staggered, or a sequential baseline")
    p.add_argument("--scheduler", choices=SCHEDULER_NAMES, default="exp_time", help="inference scheduler (staggered)")
    p.add_argument("--n-inference", type=n_workers_arg, default=None, help="N_I (default ⌈τ̄_θ/τ_M⌉), or 'auto': grown and shrunk online")
    p.add_argument("--latency", default="0", help="declared model latency: 5t, 80ms, lognormal:6t,0.5 (default 0)")
    p.add_argument("--default", choices=DEFAULT_NAMES, default=None,
                   help="β, applied on every tick without an agent action: noop, repeat the last action, or a uniformly "
                        "random action (the paper's authors' setting); default: the env's own (noop for Atari)")  # fmt: skip
    p.add_argument("--n-learners", type=int, default=1, help="N_L learners (default 1)")
    p.add_argument("--learner-mode", choices=LEARNER_MODES, default="round_robin")
    p.add_argument("--tau-l", type=float, default=None, help="virtual seconds per update (default τ_M)")
    p.add_argument("--learner-backend", default="process", metavar="process|ray",
                   help="wall-clock learners: processes on this host (default), or Ray actors on any node; the replay "
                        "and the master parameters stay here, batches go out and gradients come back")  # fmt: skip
    p.add_argument("--backend", default="thread", metavar="thread|process|ray",
                   help="wall-clock inference workers: threads, processes, or Ray actors on any node (pip install -e '.[ray]')")
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="Ray cluster for --backend ray (default: start a local Ray)")
    p.add_argument("--trim-above", default=None, metavar="BYTES|never",
                   help="process and Ray inference workers: after each forward pass, hand its working set back to the "
                        "OS when the heap holds more than this free (0, 512KiB, 16MiB, or never; default 4MiB: keeps "
                        "k=1's small heap, trims k=7's; see nonstop.policies.memory)")  # fmt: skip
    p.add_argument("--max-restarts", type=int, default=5,
                   help="restarts of dead learners, and apart of dead inference workers, allowed within "
                        "--restart-window; one more death ends the run (summary incomplete, exit 1). Default 5")  # fmt: skip
    p.add_argument("--restart-window", type=float, default=60.0, metavar="SECONDS",
                   help="the window of --max-restarts, in the run's clock seconds (default 60)")
    add_self_play_arguments(p)
    add_dqn_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", metavar="RUN", default=None, help="run directory (default runs/<env>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    p.add_argument("--track", action="append", metavar="wandb|mlflow",
                   help="also send the progress rows, episodes, config and summary to Weights & Biases or MLflow "
                        "(repeat, or a comma list; pip install 'nonstop[track]'; see nonstop.learning.tracking)")  # fmt: skip
    p.add_argument("--progress-every", type=float, default=5.0, help="world seconds between progress rows")
    p.add_argument("--checkpoint-every", type=float, default=120.0, help="world seconds between checkpoints")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--checkpoint-replay", choices=("auto", "yes", "no"), default="auto",
                   help=f"write the replay into checkpoints (auto: when under {REPLAY_CHECKPOINT_LIMIT >> 20} MiB and the disk has room)")  # fmt: skip


def add_self_play_arguments(p: argparse.ArgumentParser) -> None:
    """``--self-play`` and its settings (`nonstop.selfplay`); the settings default to None so that one given
    without ``--self-play`` is an error rather than ignored."""
    from nonstop.selfplay import OPPONENT_WEIGHTINGS

    g = p.add_argument_group("self-play (a two-seat world: the learner against a pool of its own past snapshots)")
    g.add_argument("--self-play", action="store_true",
                   help="the learner plays the first seat, a snapshot of its past self the second; RUN/matches.csv "
                        "records every match")  # fmt: skip
    g.add_argument("--opponents", choices=OPPONENT_WEIGHTINGS, default=None,
                   help="how each match's snapshot is drawn: uniform over the pool, or latest (weight ∝ rank: the "
                        "newest most often). Default uniform")  # fmt: skip
    g.add_argument("--snapshot-every", type=float, default=None, metavar="SECONDS",
                   help="world seconds between snapshots of the learner (default 30)")
    g.add_argument("--pool-size", type=int, default=None, help="snapshots kept, the newest (default 8)")
    g.add_argument("--opponent-latency", default=None,
                   help="the pool side's declared latency (5t, 80ms, lognormal:6t,0.5; default: --latency)")


def _self_play_settings(args: argparse.Namespace) -> dict[str, Any]:
    names = ("opponents", "snapshot_every", "pool_size", "opponent_latency")
    given = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if not getattr(args, "self_play", False):
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in given)
            raise ValueError(f"{flags} set{'s' if len(given) == 1 else ''} up self-play: add --self-play")
        return {}
    return {"self_play": True, **given}


def add_dqn_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per ``DQNConfig`` field, its help and default taken from the dataclass (one source of truth).

    A flag left out keeps the env family's value (``DQNConfig.for_family``), so the parsed default is None.

    >>> p = argparse.ArgumentParser()
    >>> add_dqn_arguments(p)
    >>> a = p.parse_args(["--gamma", "0.9", "--no-double", "--hidden", "64", "64"])
    >>> (a.gamma, a.double, a.hidden, a.target_update)
    (0.9, False, [64, 64], None)
    """
    from nonstop.learning.dqn import FAMILY_DEFAULTS, PAPER_PRESETS, DQNConfig

    p.add_argument("--preset", choices=sorted(PAPER_PRESETS), default=None,
                   help="the paper's stated DQN settings (γ, batch, Adam step, replay, k); flags given beside it win")  # fmt: skip
    group = p.add_argument_group("DQN settings (defaults: the paper's; the env family may override, see DQNConfig.for_family)")
    for f in fields(DQNConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        by_family = ", ".join(f"{family} {values[f.name]!r}" for family, values in FAMILY_DEFAULTS.items()
                              if f.name in values and values[f.name] != default)  # fmt: skip
        shown = f"default {default!r}" + (f"; {by_family}" if by_family else "")
        text = f"{f.metadata.get('help', '')} ({shown})".replace("%", "%%")
        if isinstance(default, bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif isinstance(default, tuple):
            group.add_argument(flag, type=int, nargs="+", default=None, metavar="N", help=text)
        else:
            type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            kind = {"float": float, "int": int, "str": str}[type_name]
            group.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(), help=text)


def config_from_args(args: argparse.Namespace) -> Any:
    from nonstop.envs import env_info
    from nonstop.learning.dqn import PAPER_PRESETS, DQNConfig
    from nonstop.run import TrainConfig, default_env_kwargs, parse_env_args

    preset = PAPER_PRESETS[args.preset] if getattr(args, "preset", None) else {}
    given = {f.name: getattr(args, f.name) for f in fields(DQNConfig) if getattr(args, f.name, None) is not None}
    overrides = {**preset, **given}
    if isinstance(overrides.get("hidden"), list):
        overrides["hidden"] = tuple(overrides["hidden"])
    family = env_info(args.env).family
    dqn = DQNConfig.for_family(family, **overrides)
    env_kwargs = {**default_env_kwargs(family), **parse_env_args(args.env_arg)}
    return TrainConfig(
        env=args.env, env_kwargs=env_kwargs, clock=args.clock, seconds=args.seconds, interaction=args.interaction, scheduler=args.scheduler,
        n_inference=args.n_inference, latency=args.latency, n_learners=args.n_learners,
        learner_mode=args.learner_mode, tau_l=args.tau_l, backend=args.backend, ray_address=args.ray_address,
        learner_backend=getattr(args, "learner_backend", "process"),
        seed=args.seed, dqn=dqn, default=getattr(args, "default", None), max_restarts=getattr(args, "max_restarts", 5), restart_window=getattr(args, "restart_window", 60.0),
        **_self_play_settings(args), **_trim_setting(args),
    )  # fmt: skip


def _trim_setting(args: argparse.Namespace) -> dict[str, Any]:
    """``trim_above`` from ``--trim-above``, refused where no worker process exists to trim."""
    from nonstop.policies.memory import parse_min_free

    text = getattr(args, "trim_above", None)
    if text is None:
        return {}
    value = parse_min_free(text)
    if args.clock != "wall" or args.backend not in ("process", "ray"):
        raise ValueError(f"--trim-above {text} trims worker processes: it needs --clock wall and --backend process or ray "
                         f"(these workers are threads of this process, which keeps its heap)")  # fmt: skip
    return {"trim_above": value}


def _default_out(env: str) -> Path:
    return Path("runs") / f"{env.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"


def _replay_in_checkpoint(choice: str, run: Any, out: Path) -> bool:
    if choice != "auto":
        return choice == "yes"
    size = run.replay.nbytes
    return size <= REPLAY_CHECKPOINT_LIMIT and shutil.disk_usage(out).free > 4 * size


def run_train(args: argparse.Namespace) -> int:
    from nonstop._console import Console

    from nonstop.learning.checkpoint import latest_checkpoint
    from nonstop.learning.replay import check_replay_fits
    from nonstop.learning.runlog import Progress, RunLog, RunPaths, begin_ticklog_segment, read_config
    from nonstop.learning.tracking import parse_track, require_trackers
    from nonstop.run import ProgressRows, TrainingRun

    track = parse_track(getattr(args, "track", None))
    require_trackers(track)  # a missing tracker library is named before anything runs or is written
    for name in ("seconds", "progress_every", "checkpoint_every"):
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value}")
    episodes = getattr(args, "episodes", None)
    if episodes is not None and episodes < 1:
        raise ValueError(f"--episodes must be a whole number >= 1, got {episodes}")
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
    if cfg.backend == "ray" and cfg.interaction == "staggered" and cfg.scheduler in ("max_time", "exp_time") \
            and cfg.n_inference != "auto":
        # measured (README, Ray): a Ray call's overhead varies, and the paper's schedulers lose their stagger under
        # any spread; quantile_hold keeps it
        console.print(f"note: Ray workers' calls vary in time, and {cfg.scheduler} loses its stagger under that "
                      "spread (more inaction at the same N_I); --scheduler quantile_hold or --n-inference auto keeps it",
                      style="yellow", markup=False)  # fmt: skip
    if cfg.self_play:
        assert run.seats is not None  # a self-play run has its two seats
        console.print(f"self-play: the learner on {run.seats[0]}, a snapshot of it on {run.seats[1]} (N_I="
                      f"{run.opponent_n_inference}, latency {cfg.opponent_latency or cfg.latency}); a snapshot every "
                      f"{cfg.snapshot_every:g} world s, the newest {cfg.pool_size} kept, drawn {cfg.opponents}")  # fmt: skip
    config = cfg.to_dict()
    # Ray: the cluster answers, has CPUs for every actor and memory for its model; a refusal writes nothing
    run.connect_cluster()
    try:
        log = RunLog(out, config, resume=args.resume, note=lambda msg: console.print(msg, style="dim", markup=False),
                     tensorboard=getattr(args, "tensorboard", True), track=track)  # the demo turns it off: its CSVs and report say it all
    except BaseException:
        run.teardown()  # the Ray connection, if any
        raise
    wall0 = time.monotonic()
    end = RunEnd()
    summary: dict[str, Any] = {}
    rows: ProgressRows | None = None
    last_row: dict[str, Any] = {}
    checkpoints = Checkpointer(out, args.keep_checkpoints, warn=lambda msg: console.print(msg, style="yellow", markup=False))
    with log:
        try:
            # the tick log streams to RUN/ticklog/ as the world runs; a resumed run keeps the earlier segment beside it
            run.build(log_dir=begin_ticklog_segment(out, ckpt.state["env_ticks"]) if ckpt is not None else RunPaths(out).ticklog_dir)
            if ckpt is not None:
                run.restore(ckpt.state)
                console.print(f"resumed from {ckpt.path.name}: {run.state.updates:,} updates, {run.tick_offset:,} env ticks"
                              + ("" if run.replay_restored else "; the replay was not in it, so it refills from empty"))  # fmt: skip
            run.start()
            rows = ProgressRows(run, wall0, wall_offset=_wall_before(log))
            total = math.ceil(cfg.seconds / run.tau_m)
            done, next_ckpt = 0.0, args.checkpoint_every
            with Progress(total_ticks=run.tick_offset + total) as view:
                while done < cfg.seconds - 1e-9 and not (episodes is not None and run.episodes_total >= episodes):
                    chunk = min(args.progress_every, cfg.seconds - done)
                    run.advance(chunk)
                    done += chunk
                    _log_episodes(run, log, rows)
                    last_row = row = rows.progress()
                    log.log_progress(row)
                    view.update(row)
                    if done >= next_ckpt - 1e-9:
                        next_ckpt += args.checkpoint_every
                        checkpoints.save(lambda: run.snapshot(include_replay=_replay_in_checkpoint(args.checkpoint_replay, run, out)),
                                         run.state.updates)  # fmt: skip
        except BaseException as exc:  # every end reaches the same path: checkpoint, teardown, summary
            end.failed(exc)
            console.print(f"{end.reason}: " + ("writing a final checkpoint and stopping cleanly (Ctrl-C again skips the checkpoint)"
                                               if end.world_alive(run) else "keeping the newest checkpoint and stopping"),
                          markup=False)  # fmt: skip
        with end.second_signal_skips():
            if end.world_alive(run) and getattr(run, "state", None) is not None:
                run.quiesce()
                if rows is not None:
                    _log_episodes(run, log, rows)
                checkpoints.save(lambda: run.snapshot(include_replay=_replay_in_checkpoint(args.checkpoint_replay, run, out)),
                                 run.state.updates)  # fmt: skip
        with end.signals_held():  # nothing may stop the teardown: reap and unlink everything, then say what happened
            try:
                run.teardown()
            except Exception as exc:  # noqa: BLE001 - the run's own end is the news; the teardown's is a note
                end.note(f"teardown: {type(exc).__name__}: {exc}")
            summary = _finish_log(run, log, out, end, last_row, wall0)
    if summary.get("inaction_fraction") is not None:
        recent = "—" if summary["recent_return"] is None else f"{summary['recent_return']:.2f}"
        after = summary.get("inaction_fraction_after_startup")
        startup = "" if after is None else \
            f" ({after:.1%} after the workers' first {summary['startup_ticks']:,} ticks of starting up)"
        console.print(f"{'done' if end.complete else 'stopped'}: {summary['env_ticks_total']:,} env ticks, {summary['updates']:,} updates, "
                      f"inaction {summary['inaction_fraction']:.1%}{startup}, recent return {recent}; "
                      f"`nonstop report {out}` draws the plots")  # fmt: skip
    for line in summary.get("machine_limits") or []:
        console.print(line, style="yellow", markup=False)
    print(json.dumps({"run_dir": str(out), "updates": summary.get("updates"), "recent_return": summary.get("recent_return"),
                      "complete": end.complete}))  # fmt: skip
    if end.error is not None:
        raise end.error  # the CLI names it in one line and exits non-zero
    return end.exit_code


def _log_episodes(run: Any, log: Any, rows: Any) -> None:
    """Log the episodes finished since the last call, and (self-play) each one's match against the pool."""
    finished = rows.episodes()
    for ep in finished:
        log.log_episode(ep)
    if run.self_play is not None:
        for match in run.self_play.match_rows(finished, run.episode_offset):
            log.log_match(match)


def _wall_before(log: Any) -> float:
    """The wall time a resumed run had already spent: the newest ``wall_s`` in its progress or episode
    rows (0 for a new run), so both files keep one time axis across segments."""
    seen = [row.get("wall_s", math.nan) for row in (log.last_progress, log.last_episode) if row]
    seen = [w for w in seen if math.isfinite(w) and w >= 0]
    return max(seen, default=0.0)


def _machine_limits(run: Any, figures: dict[str, Any]) -> list[str]:
    """What `nonstop.metrics.limits.machine_limits` says of this run's tick figures on this machine."""
    from nonstop.metrics.limits import machine_limits

    cfg = run.cfg
    n_inference = int(run.n_inference) if isinstance(run.n_inference, int) else 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return machine_limits(figures, clock=cfg.clock, scheduler=cfg.scheduler if cfg.interaction == "staggered" else "sequential",
                          n_inference=max(1, n_inference), latency_mean_ticks=float(run.latency.mean / run.tau_m),
                          processes=max(1, n_inference) + (cfg.n_learners if cfg.learner_backend == "process" else 0) + 1
                          + _opponent_workers(run), cores=max(1, cores))  # fmt: skip


def _opponent_workers(run: Any) -> int:
    """Self-play's pool side: its inference workers share the machine too."""
    if getattr(run, "self_play", None) is None:
        return 0
    n = run.opponent_n_inference
    return n if isinstance(n, int) else 1


def _finish_log(run: Any, log: Any, out: Path, end: "RunEnd", last_row: dict[str, Any], wall0: float) -> dict[str, Any]:
    """Write the tick log (what exists of it) and ``summary.json``, marked incomplete with the reason
    when the run did not reach its end. Never raises: a run's summary must not hide how it ended."""
    from nonstop.metrics.timing import episode_returns, summarize

    summary: dict[str, Any] = {"updates": run.final_updates, "env_ticks_total": int(last_row.get("env_ticks", run.tick_offset)),
                               "recent_return": None, "n_inference": getattr(run, "n_inference", None)}  # fmt: skip
    try:
        tick_log = run.world.tick_log
        tick_log.meta["tick_offset"] = run.tick_offset  # this segment's tick 0 is the run's tick `tick_offset`
        log.save_ticklog(tick_log)  # streamed already: this records the final meta
        returns = episode_returns(tick_log)
        summary.update(summarize(tick_log), env_ticks_total=run.tick_offset + len(tick_log),
                       recent_return=float(np.mean(returns[-20:])) if returns else None)  # fmt: skip
        started = tick_log.meta.get("agents_started_at_tick")
        if started and started < len(tick_log):  # β alone while the workers started: the rest, apart
            summary["startup_ticks"] = int(started)
            summary["inaction_fraction_after_startup"] = tick_log.summary(warmup_ticks=int(started))["inaction_fraction"]
        summary["machine_limits"] = _machine_limits(run, summary)
        if run.self_play is not None:  # the figures above are the learner's seat; the pool side's beside them
            sp = run.self_play
            theirs = tick_log.seat(sp.opponent_seat).summary()
            summary["self_play"] = {"learner_seat": sp.learner_seat, "opponent_seat": sp.opponent_seat,
                                    "snapshots": sp.pool.ids, "snapshots_taken": sp.pool.next_id,
                                    **{f"opponent_{k}": theirs[k] for k in ("agent_ticks", "inaction_fraction",
                                                                            "tau_i_mean_ticks", "delay_mean_ticks")}}  # fmt: skip
    except BaseException as exc:  # noqa: BLE001 - a dead host's log, a full disk: said in the summary
        end.note(f"tick log not saved: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    summary["episodes_total"] = run.final_episodes  # earlier segments of a resumed run included
    learners = getattr(run, "learners", None)
    if learners is not None:  # restarts and events of the learners (Ray learners: their counts too)
        try:
            summary["learners"] = learners.report()
        except Exception as exc:  # noqa: BLE001 - never hide how the run ended
            end.note(f"learners' report not recorded: {type(exc).__name__}: {exc}")
    summary.update(end.as_dict(), wall_s=round(time.monotonic() - wall0, 2))
    try:
        log.write_summary(summary)
    except OSError as exc:
        end.note(f"summary.json not written: {exc}")
    return summary


class RunEnd:
    """How a training run ended, and what the trainer does about a signal while it stops.

    Every end takes one path (final checkpoint when the world still runs, teardown, tick log,
    ``summary.json`` with ``complete`` and ``reason``); this object says which end it was and the
    exit status: 0 complete, 130 Ctrl-C, 143 SIGTERM, the error re-raised (non-zero) otherwise.

    >>> end = RunEnd()
    >>> end.failed(KeyboardInterrupt()); (end.complete, end.exit_code, end.reason)
    (False, 130, 'interrupted (Ctrl-C)')
    """

    def __init__(self) -> None:
        self.complete = True
        self.reason: str | None = None
        self.exit_code = 0
        self.error: BaseException | None = None
        self.notes: list[str] = []

    def failed(self, exc: BaseException) -> None:
        from nonstop.realtime.host import HostError

        self.complete = False
        if isinstance(exc, KeyboardInterrupt):
            self.reason, self.exit_code = "interrupted (Ctrl-C)", 130
        elif isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else 1
            self.reason, self.exit_code = ("terminated (SIGTERM)" if code == 143 else f"exit requested ({code})"), code
        else:
            from nonstop.realtime.lifeline import PartFailed

            first = str(exc).splitlines()[0] if str(exc) else ""
            name = "the world's host died" if isinstance(exc, HostError) else type(exc).__name__
            if isinstance(exc, PartFailed):  # its message names the part and the cause
                name, first = first, ""
            self.reason, self.exit_code, self.error = f"{name}: {first}" if first else name, 1, exc

    def note(self, text: str) -> None:
        self.notes.append(text)

    @staticmethod
    def world_alive(run: Any) -> bool:
        world = getattr(run, "world", None)
        return world is not None and world.running

    def as_dict(self) -> dict[str, Any]:
        return {"complete": self.complete, "interrupted": self.exit_code in (130, 143), "reason": self.reason,
                **({"notes": self.notes} if self.notes else {})}  # fmt: skip

    @contextlib.contextmanager
    def second_signal_skips(self) -> Iterator[None]:
        """While the final checkpoint is written: Ctrl-C or SIGTERM again abandons it (the file is
        written atomically, so the older checkpoints stay whole) and the run goes on to its teardown."""
        try:
            yield
        except (KeyboardInterrupt, SystemExit) as exc:
            self.note("final checkpoint skipped: " + ("Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "SIGTERM") + " again")
            if self.complete:
                self.failed(exc)
        except Exception as exc:  # noqa: BLE001 - the teardown must still run; the failure is reported
            self.note(f"final checkpoint failed: {type(exc).__name__}: {exc}")
            if self.complete:
                self.failed(exc)

    @contextlib.contextmanager
    def signals_held(self) -> Iterator[None]:
        """Defer SIGINT and SIGTERM until the block ends (teardown must finish: it reaps children and
        unlinks shared memory); a signal that came meanwhile is noted, not lost."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        came: list[int] = []
        previous = {s: signal.signal(s, lambda signum, _: came.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if came:
                self.note("a signal during the teardown was held until it finished")
                if self.complete:
                    self.complete, self.exit_code = False, 128 + came[0]
                    self.reason = "interrupted (Ctrl-C)" if came[0] == signal.SIGINT else "terminated (SIGTERM)"


class Checkpointer:
    """Saves checkpoints and keeps the newest ``keep`` whole ones. A full disk (or any other failure
    to write) warns once and stops checkpointing; the world keeps ticking, the older checkpoints
    stay as they were (each file is written atomically)."""

    def __init__(self, out: Path, keep: int, *, warn: Callable[[str], None]) -> None:
        self.out, self.keep, self.warn = out, keep, warn
        self.disabled: str | None = None

    def save(self, snapshot: Callable[[], dict[str, Any]], updates: int) -> Path | None:
        from nonstop.learning.checkpoint import checkpoint_path, keep_last, save_checkpoint

        if self.disabled is not None:
            return None
        path = checkpoint_path(self.out, updates)
        try:
            save_checkpoint(path, snapshot())
            keep_last(self.out, self.keep)
        except OSError as exc:
            self.disabled = exc.strerror or str(exc)
            why = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"{exc.strerror or exc}"
            self.warn(f"warning: cannot write checkpoint {path.name} ({why}); checkpointing stops, the run goes on "
                      "(the older checkpoints are intact; free space and resume from them)")  # fmt: skip
            return None
        return path
