"""A run in its own directory: config, progress rows, episodes, checkpoints, tick log and summary.

`train_in_directory` is what ``nonstop train`` runs (the command parses, this does the work): the
run directory (see `nonstop.learning.runlog`) gets the config, a progress row every
``progress_every`` world seconds (shown live), every finished episode (and, from a self-play run,
every match), checkpoints every ``checkpoint_every`` world seconds and on Ctrl-C/SIGTERM,
TensorBoard events, the tick log and a summary. ``resume`` continues from the newest whole
checkpoint: every part's state (parameters, Adam moments, target network, counters, a self-play
pool) and the replay's contents when they were saved. The world itself starts a fresh episode: a
realtime world cannot be rewound.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.experiment import registry
from nonstop.experiment.config import TrainConfig
from nonstop.experiment.ending import Checkpointer, RunEnd, load_replay
from nonstop.experiment.loop import ProgressRows
from nonstop.experiment.run import Recorder
from nonstop.experiment.run import Run

__all__ = ["RecordConfig", "train_in_directory", "REPLAY_CHECKPOINT_LIMIT", "empty_replay_line"]

#: Above this many bytes the replay is not written into checkpoints unless asked.
REPLAY_CHECKPOINT_LIMIT: Final = 512 * 2**20
_CHECKPOINT_REPLAY: Final = ("auto", "yes", "no")
#: the run log's writer of each kind of row a part derives from episodes (`Run.records`)
_WRITERS: Final = {"matches": "log_match"}


def _positive(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value}")


@dataclass
class RecordConfig:
    """How a run is recorded (not part of what is learned: free to change on resume)."""

    out: Path | None = field(
        default=None, metadata={"help": "run directory (default runs/<env>-<time>)", "metavar": "RUN"}
    )
    resume: bool = field(default=False, metadata={"help": "continue the run in --out from its newest checkpoint"})
    track: tuple[str, ...] = field(default=(), metadata={"help": "experiment trackers (wandb, mlflow)"})
    episodes: int | None = field(
        default=None,
        metadata={
            "help": (
                "also stop once the run has N finished episodes in all (a resumed run counts its earlier segments'), "
                "whichever of --seconds and --episodes comes first (default: --seconds alone)"
            ),
            "metavar": "N",
        },
    )
    progress_every: float = field(default=5.0, metadata={"help": "world seconds between progress rows"})
    checkpoint_every: float = field(default=120.0, metadata={"help": "world seconds between checkpoints"})
    keep_checkpoints: int = field(default=3, metadata={"help": "checkpoints kept, the newest"})
    checkpoint_replay: str = field(
        default="auto",
        metadata={
            "help": (
                "keep the replay beside each checkpoint, compressed (replay-<updates>.npz), so a resume goes on with what "
                f"the run learned from: auto (the default: when it is at most {REPLAY_CHECKPOINT_LIMIT >> 20} MiB and the "
                "disk has 4 times that free; CartPole's is 6 MiB, a million Atari frames are not), yes or no; without it a "
                "resumed run's replay refills from empty"
            ),
            "choices": _CHECKPOINT_REPLAY,
        },
    )
    tensorboard: bool = field(default=True, metadata={"help": "write TensorBoard events to RUN/tb"})

    def __post_init__(self) -> None:
        _positive("progress_every", self.progress_every)
        _positive("checkpoint_every", self.checkpoint_every)
        if self.episodes is not None and (not isinstance(self.episodes, int) or self.episodes < 1):
            raise ValueError(f"--episodes must be a whole number >= 1, got {self.episodes}")
        if not isinstance(self.keep_checkpoints, int) or self.keep_checkpoints < 1:
            raise ValueError(f"--keep-checkpoints must be a whole number >= 1, got {self.keep_checkpoints}")
        if self.checkpoint_replay not in _CHECKPOINT_REPLAY:
            raise ValueError(
                f"--checkpoint-replay must be one of {', '.join(_CHECKPOINT_REPLAY)}, got {self.checkpoint_replay!r}"
            )
        if self.resume and self.out is None:
            raise ValueError("--resume needs --out RUN: the run directory to continue")
        if self.out is not None:
            self.out = Path(self.out)


def default_out(env: str) -> Path:
    return (
        Path("runs") / f"{env.replace('/', '_').replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    )  # mypkg.worlds:Id


def train_in_directory(
    cfg: TrainConfig, rec: RecordConfig, *, console: Any, intro: tuple[str, ...] = ()
) -> tuple[dict[str, Any], RunEnd, Path]:
    """Run ``cfg``, recorded in its directory as ``rec`` says; returns the summary, how the run ended and
    the directory. ``console``: a rich console for the notes and the live progress view (stderr);
    ``intro``: lines said first once every check has passed (where the settings came from)."""
    alone = registry.alone("seating", registry.stand_in("seating", cfg.seating, cfg))
    if alone is not None:  # a part with its own loop and directory (team self-play)
        ran: tuple[dict[str, Any], RunEnd, Path] = alone(cfg).train(rec, console)
        return ran
    out = rec.out if rec.out is not None else default_out(cfg.env)
    run = Run(cfg)
    recorders = [make(run, rec, out, console) for make in RECORDERS]  # each checks what it needs, writing nothing yet
    recorders[0].intro = intro
    end = run.execute(recorders, seconds=cfg.seconds, every=rec.progress_every, episodes=rec.episodes)
    return recorders[0].summary, end, out


def _current_config_file(out: Path, saved: dict[str, Any]) -> None:
    """An older run's config.json in today's keys (`nonstop.experiment.config.current_form`: its algorithm's
    settings as ``algo_settings``), written back before the run log compares it with the resumed config."""
    import json

    from nonstop._io import write_atomic
    from nonstop.experiment.config import current_form
    from nonstop.learning.runlog import RunPaths

    current = current_form(saved)
    if current != saved:
        write_atomic(RunPaths(out).config, (json.dumps(current, indent=2, default=str) + "\n").encode())


class RunDirectory(Recorder):
    """A run's directory (`nonstop.learning.runlog`): config, progress and episode rows (and what the
    parts derive from episodes: self-play's matches), checkpoints on their cadence and at the end,
    the tick log and ``summary.json``; the live progress view on the console."""

    def __init__(self, run: Run, rec: RecordConfig, out: Path, console: Any) -> None:
        from nonstop.learning.checkpoint import latest_checkpoint
        from nonstop.learning.replay import check_replay_fits
        from nonstop.learning.runlog import read_config
        from nonstop.learning.tracking import require_trackers

        cfg = run.cfg
        self.rec, self.out, self.console = rec, out, console
        self._noted: list[Any] = []  # the parts whose notes were said
        self.intro: tuple[str, ...] = ()  # said first, when the directory opens
        _positive("seconds", cfg.seconds)
        require_trackers(rec.track)  # a missing tracker library is named before anything runs or is written
        self.ckpt: Any = None
        if rec.resume:
            _current_config_file(out, read_config(out))  # a clear error if RUN is not a run directory
            self.ckpt = latest_checkpoint(out, warn=lambda msg: self.say(msg, "yellow"))
            if self.ckpt is None:
                raise FileNotFoundError(f"{out} has no checkpoint to resume from")
            done = Run.seconds_in(self.ckpt.state, run.tau_m)  # --seconds is the run's total
            if cfg.seconds - done < run.tau_m / 2:
                raise ValueError(
                    f"{out} has run {done:g} world seconds of its --seconds {cfg.seconds:g} in all: nothing "
                    f"is left to run (--seconds is the run's total: pass a larger one)"
                )
        self.replay_bytes = check_replay_fits(
            run.settings.replay_capacity, run.obs_shape, run.obs_space.dtype, run.algorithm.action_shape
        )
        self.log: Any = None
        self.view: Any = None
        self.rows: ProgressRows | None = None
        self.last_row: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.next_ckpt = rec.checkpoint_every
        self.wall0 = time.monotonic()
        self.checkpoints = Checkpointer(out, rec.keep_checkpoints, warn=lambda msg: self.say(msg, "yellow"))
        self._replay_noted = False

    def say(self, msg: str, style: str | None = None) -> None:
        self.console.print(msg, style=style, markup=False)

    def open(self, run: Run) -> Path:
        from nonstop.learning.runlog import RunLog, RunPaths, begin_ticklog_segment

        cfg, rec = run.cfg, self.rec
        for line in self.intro:
            self.say(line)
        self.say(
            f"replay: {run.settings.replay_capacity:,} transitions of {run.obs_shape} {run.obs_space.dtype} → "
            f"{self.replay_bytes / 2**20:,.1f} MiB of shared memory; N_I={run.n_inference}, N_L={cfg.n_learners}, "
            f"{cfg.interaction}, clock={cfg.clock}; run dir {self.out}"
        )
        self._say_notes(run)  # the parts built so far (the cluster); `restore` says the rest
        self.log = RunLog(
            self.out,
            cfg.to_dict(),
            resume=rec.resume,
            note=lambda msg: self.say(msg, "dim"),
            tensorboard=rec.tensorboard,
            track=rec.track,
        ).__enter__()
        # the tick log streams to RUN/ticklog/ as the world runs; a resumed run keeps the earlier segment beside it
        if self.ckpt is not None:
            return begin_ticklog_segment(self.out, self.ckpt.state["env_ticks"])
        return RunPaths(self.out).ticklog_dir

    def _say_notes(self, run: Run) -> None:
        for part in run.parts:
            if part not in self._noted:
                self._noted.append(part)
                for note in part.notes(run):
                    self.say(note, "yellow")

    def restore(self, run: Run) -> None:
        self._say_notes(run)  # every part is built now, and no tick has run
        if self.ckpt is None:
            return
        state = self.ckpt.state
        if "replay_file" in state and "replay" not in state:  # the replay beside the checkpoint
            try:
                state = {**state, "replay": load_replay(self.ckpt.path.parent, state["replay_file"])}
            except (OSError, ValueError) as exc:
                self.say(f"the replay {state['replay_file']} cannot be read ({exc}): it refills from empty", "yellow")
        run.restore(state)
        self.say(f"resumed from {self.ckpt.path.name}: {run.state.updates:,} updates, {run.tick_offset:,} env ticks")
        if not run.replay_restored:
            self.say(empty_replay_line(run.settings.learning_starts, run.settings.replay_capacity, run.tau_m), "yellow")

    def started(self, run: Run) -> None:
        from nonstop.learning.runlog import Progress

        announce = run.seating.announce(run)
        if announce:
            self.say(announce)
        self.rows = ProgressRows(run, self.wall0, wall_offset=_wall_before(self.log))
        self.view = Progress(total_ticks=math.ceil(run.cfg.seconds / run.tau_m)).__enter__()

    def slice(self, run: Run, done: float) -> None:
        assert self.rows is not None
        _log_episodes(run, self.log, self.rows)
        self.last_row = row = self.rows.progress()
        self.log.log_progress(row)
        self.view.update(row)
        if done >= self.next_ckpt - 1e-9:
            self.next_ckpt += self.rec.checkpoint_every
            self._save(run)

    def failing(self, run: Run, end: RunEnd) -> None:
        self._close_view()
        self.say(
            f"{end.reason}: "
            + (
                "writing a final checkpoint and stopping cleanly (Ctrl-C again skips the checkpoint)"
                if end.world_alive(run)
                else "keeping the newest checkpoint and stopping"
            )
        )

    def stopped(self, run: Run) -> None:
        self._close_view()
        if self.rows is not None:
            _log_episodes(run, self.log, self.rows)
        self._save(run)

    def finish(self, run: Run, end: RunEnd) -> None:
        self._close_view()
        if self.log is None:  # never opened: nothing was written
            return
        try:
            self.summary = _finish_log(run, self.log, self.out, end, self.last_row, self.wall0)
        finally:
            self.log.__exit__(None, None, None)

    def _save(self, run: Run) -> None:
        include = _replay_in_checkpoint(self.rec.checkpoint_replay, run, self.out)
        if not include and self.rec.checkpoint_replay == "auto" and not self._replay_noted:
            self._replay_noted = True
            self.say(
                f"checkpoints leave the replay out ({run.replay.nbytes / 2**20:,.0f} MiB: over --checkpoint-replay "
                f"auto's {REPLAY_CHECKPOINT_LIMIT >> 20} MiB, or the disk lacks 4 times that): a resume refills "
                "it from empty (--checkpoint-replay yes keeps it anyway)",
                "yellow",
            )
        replay = (
            run.replay.snapshot if include else None
        )  # beside the checkpoint, compressed (taken while the host writes)
        self.checkpoints.save(lambda: run.snapshot(include_replay=False), run.state.updates, replay=replay)

    def _close_view(self) -> None:
        view, self.view = self.view, None
        if view is not None:
            view.__exit__(None, None, None)


#: what records a run in its directory, in order (each a `Recorder` built from the run, its record
#: settings, the directory and the console)
RECORDERS: Final = (RunDirectory,)


def empty_replay_line(learning_starts: int, capacity: int, tau_m: float) -> str:
    """What `--resume` says, in one line, when the checkpoint held no replay: it starts empty, and what
    that costs (at one transition a tick: the agent acting every tick).

    >>> line = empty_replay_line(1000, 100_000, 1 / 50)
    >>> "waits for 1,000 new transitions (about 20 world s" in line, "holds 100,000 again (about 2,000 world s)" in line
    (True, True)
    """
    return (
        f"the checkpoint holds no replay (saved with --checkpoint-replay no, or over its budget): this run's replay "
        f"starts empty, so learning waits for {learning_starts:,} new transitions (about {learning_starts * tau_m:,.0f} "
        f"world s at one a tick) and learns from new transitions only until the replay holds {capacity:,} again "
        f"(about {capacity * tau_m:,.0f} world s); the policy it resumes may get worse meanwhile"
    )


def _replay_in_checkpoint(choice: str, run: Run, out: Path) -> bool:
    if choice != "auto":
        return choice == "yes"
    size = run.replay.nbytes
    return bool(size <= REPLAY_CHECKPOINT_LIMIT and shutil.disk_usage(out).free > 4 * size)


def _log_episodes(run: Run, log: Any, rows: ProgressRows) -> None:
    """Log the episodes finished since the last call, and what the parts derive from them (matches)."""
    finished = rows.episodes()
    for ep in finished:
        log.log_episode(ep)
    for kind, found in run.records(finished).items():
        write: Callable[[dict[str, Any]], None] = getattr(log, _WRITERS[kind])
        for row in found:
            write(row)


def _wall_before(log: Any) -> float:
    """The wall time a resumed run had already spent: the newest ``wall_s`` in its progress or episode
    rows (0 for a new run), so both files keep one time axis across segments."""
    seen = [row.get("wall_s", math.nan) for row in (log.last_progress, log.last_episode) if row]
    seen = [w for w in seen if math.isfinite(w) and w >= 0]
    return max(seen, default=0.0)


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _machine_limits(run: Run, figures: dict[str, Any]) -> list[str]:
    """What `nonstop.metrics.limits.machine_limits` says of this run's tick figures on this machine."""
    from nonstop.metrics.limits import machine_limits

    cfg = run.cfg
    n_inference = int(run.n_inference) if isinstance(run.n_inference, int) else 1
    return machine_limits(
        figures,
        clock=cfg.clock,
        scheduler=cfg.scheduler if run.pool is not None else "sequential",
        n_inference=max(1, n_inference),
        latency_mean_ticks=float(run.latency.mean / run.tau_m),
        processes=max(1, run.processes()) + 1,
        cores=max(1, usable_cores()),
    )


def _finish_log(run: Run, log: Any, out: Path, end: RunEnd, last_row: dict[str, Any], wall0: float) -> dict[str, Any]:
    """Write the tick log (what exists of it) and ``summary.json``, marked incomplete with the reason
    when the run did not reach its end. A resumed run's figures cover every segment (this segment's
    apart, under ``this_segment``). Never raises: a run's summary must not hide how it ended."""
    from nonstop.learning.runlog import read_ticklog
    from nonstop.metrics.timing import episode_returns, summarize

    summary: dict[str, Any] = {
        "updates": run.final_updates,
        "env_ticks_total": int(last_row.get("env_ticks", run.tick_offset)),
        "recent_return": None,
        "n_inference": run.n_inference,
    }
    try:
        tick_log = run.world.tick_log
        tick_log.meta["tick_offset"] = run.tick_offset  # this segment's tick 0 is the run's tick `tick_offset`
        log.save_ticklog(tick_log)  # streamed already: this records the final meta
        segment = summarize(tick_log)  # this segment: what this machine did in this process
        started = tick_log.meta.get("agents_started_at_tick")
        if started and started < len(tick_log):  # β alone while the workers started: the rest, apart
            segment["startup_ticks"] = int(started)
            segment["inaction_fraction_after_startup"] = tick_log.summary(warmup_ticks=int(started))[
                "inaction_fraction"
            ]
        whole = tick_log
        if run.tick_offset:  # a resumed run: the figures cover every segment, stitched; this one's apart
            whole = read_ticklog(out)
            summary["this_segment"] = segment
            summary["segments"] = len(whole.meta.get("segments", [])) or 1
            summary.update(summarize(whole))
        else:
            summary.update(segment)
        returns = episode_returns(whole)
        summary.update(
            env_ticks_total=run.tick_offset + len(tick_log),
            recent_return=float(np.mean(returns[-20:])) if returns else None,
        )
        summary["machine_limits"] = _machine_limits(run, segment)  # this machine's, in this segment
        summary.update(run.summary(tick_log))  # the parts' own figures (self-play: the pool side's seat)
    except BaseException as exc:  # a dead host's log, a full disk: said in the summary
        end.note(f"tick log not saved: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    summary["episodes_total"] = run.final_episodes  # earlier segments of a resumed run included
    summary["deaths"] = run.deaths()  # this segment's: whatever else failed, a death is recorded
    summary.update(end.as_dict(), wall_s=round(time.monotonic() - wall0, 2))
    try:
        log.write_summary(summary)
    except OSError as exc:
        end.note(f"summary.json not written: {exc}")
    return summary
