"""The run directory of ``nonstop train --out RUN``: what a training run writes, and its live view.

Layout (`RunPaths` names each file; ``nonstop report RUN`` reads them back)::

    RUN/config.json          the run's config (rewritten, compatible, on --resume)
    RUN/progress.csv         one row per progress interval, columns PROGRESS_COLUMNS
    RUN/episodes.csv         one row per finished episode, columns EPISODE_COLUMNS
    RUN/matches.csv          self-play only (`nonstop.experiment.selfplay`): one row per finished match, columns
                             MATCH_COLUMNS: the opponent snapshot, the learner's score, won
    RUN/ticklog/             the tick log, streamed in chunks as the run goes (`TickLog`, ``directory``):
                             the truth every metric comes from; every completed chunk survives a kill
    RUN/ticklog-before-<tick>/  earlier segments of a resumed run (``.npz`` files from older nonstop);
                             `read_ticklog` stitches them and the newest into one log
    RUN/checkpoints/         ckpt-<updates:09d>.pt (see `nonstop.learning.checkpoint`)
    RUN/tb/                  TensorBoard events mirroring the CSV figures (if tensorboard is installed)
    RUN/tracking.json        with ``track=``: the Weights & Biases / MLflow runs mirroring it (`nonstop.learning.tracking`)
    RUN/wandb/               with ``track=("wandb",)`` and no WANDB_DIR: wandb's own files
    RUN/summary.json         the final summary

`RunLog` owns the writing side. Every CSV row is flushed to the OS as it is written, so a crash or a
kill loses nothing already logged; ``--resume`` reopens the files for appending (a row cut in half by
a kill is dropped first). `Progress` is the console view the training loop feeds the same rows.

How a training loop wires it (with `nonstop.learning.checkpoint`)::

    log = RunLog(out, config, resume=resume)            # refuses an incompatible config on resume
    start = latest_checkpoint(out) if resume else None  # newest whole checkpoint, or None
    with log, Progress(total_ticks=config["ticks"]) as view:
        ...                                             # each progress interval:
        log.log_progress(row); view.update(row)         #   row: dict over PROGRESS_COLUMNS
        log.log_episode({"episode": e, "end_tick": t, "wall_s": s, "return": r, "length_ticks": n})
        save_checkpoint(checkpoint_path(out, updates), state); keep_last(out, 3)
        ...                                             # at the end:
        log.save_ticklog(tick_log); log.write_summary(tick_log.summary())  # tick_log streamed to RUN/ticklog

>>> import tempfile
>>> run = Path(tempfile.mkdtemp()) / "run"
>>> with RunLog(run, {"env": "theory/inaction", "lr": 1e-3}, tensorboard=False) as log:
...     log.log_progress({"wall_s": 1.0, "env_ticks": 60, "inaction_frac": 0.25, "updates": 3})
...     log.log_episode({"episode": 0, "end_tick": 60, "wall_s": 1.0, "return": -2.5, "length_ticks": 60})
>>> read_columns(run / "episodes.csv")["return"].tolist()
[-2.5]
>>> print(progress_line({"wall_s": 75.0, "env_ticks": 4500, "inaction_frac": 0.031, "epsilon": 0.5}))
elapsed 0:01:15 | env ticks 4,500 | τ_I — | inaction 3.1% | updates/s — | recent return — | ε 0.500
"""

from __future__ import annotations

import csv
import json
import re
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop._io import write_atomic
from nonstop.learning.checkpoint import CHECKPOINT_DIR, DEFAULT_MAY_DIFFER, check_compatible
from nonstop.learning.jsonsafe import json_safe

__all__ = [
    "PROGRESS_COLUMNS",
    "OPTIONAL_PROGRESS_COLUMNS",
    "EPISODE_COLUMNS",
    "MATCH_COLUMNS",
    "RunPaths",
    "RunLog",
    "Progress",
    "progress_fields",
    "progress_line",
    "read_columns",
    "read_config",
    "read_ticklog",
    "begin_ticklog_segment",
]

#: Columns of RUN/progress.csv, in order. τ_I and delay are in ticks, inaction a fraction of ticks.
#: ``epsilon`` is DQN's exploration rate, ``alpha`` SAC's entropy coefficient (each algorithm fills its own,
#: `nonstop.learning.algos.Algorithm.exploration_name`; the other is empty). ``alpha`` came last, after runs were
#: written without it: those resume writing their own columns (`OPTIONAL_PROGRESS_COLUMNS`).
PROGRESS_COLUMNS: Final = (
    "wall_s",
    "env_ticks",
    "episodes",
    "tau_i_mean_ticks",
    "inaction_frac",
    "delay_mean_ticks",
    "updates",
    "updates_per_s",
    "transitions",
    "recent_return",
    "epsilon",
    "loss",
    "alpha",
)
#: trailing columns of PROGRESS_COLUMNS that a progress.csv written before them lacks
OPTIONAL_PROGRESS_COLUMNS: Final = ("alpha",)
_SEGMENT: Final = re.compile(r"ticklog-before-(\d+)(-\d+)?(?:\.npz)?")  # tick, then -2, -3... on a repeat
#: Columns of RUN/episodes.csv, in order.
EPISODE_COLUMNS: Final = ("episode", "end_tick", "wall_s", "return", "length_ticks")
#: Columns of RUN/matches.csv (self-play runs), in order: the match (episode), its end, the opponent
#: snapshot's id and the env tick it was taken at, the pool's size when the match was logged, the
#: learner's score (its seat's episode return) and whether it won (score > 0).
MATCH_COLUMNS: Final = ("episode", "end_tick", "wall_s", "opponent", "opponent_tick", "pool_size", "score", "won")


@dataclass(frozen=True)
class RunPaths:
    """Where each piece of a run directory lives: the one place that spells the layout out."""

    root: Path

    def __init__(self, root: str | os.PathLike) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def progress(self) -> Path:
        return self.root / "progress.csv"

    @property
    def episodes(self) -> Path:
        return self.root / "episodes.csv"

    @property
    def matches(self) -> Path:
        """Self-play runs: one row per match against the snapshot pool (`MATCH_COLUMNS`)."""
        return self.root / "matches.csv"

    @property
    def ticklog(self) -> Path:
        """The single-file tick log older runs wrote at their end (read, never written now)."""
        return self.root / "ticklog.npz"

    @property
    def ticklog_dir(self) -> Path:
        """The tick log of the current segment, streamed there in chunks during the run."""
        return self.root / "ticklog"

    def ticklog_segments(self) -> list[Path]:
        """Every tick-log segment of the run, oldest first: ``ticklog-before-<tick>`` (directories or
        ``.npz``) by tick, then the newest (``ticklog/`` or ``ticklog.npz``)."""
        earlier = sorted(
            (int(m.group(1)), int(m.group(2) or "-1") * -1, p)
            for p in self.root.glob("ticklog-before-*")
            if (m := _SEGMENT.fullmatch(p.name)) and (p.is_dir() or p.suffix == ".npz")
        )
        newest = [p for p in (self.ticklog_dir, self.ticklog) if p.exists()]
        return [p for _, _, p in earlier] + newest

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINT_DIR

    @property
    def tb(self) -> Path:
        return self.root / "tb"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"


# ----------------------------------------------------------------------------- reading back


def read_ticklog(run_dir: str | os.PathLike) -> Any:
    """The run's tick log: its segments (`RunPaths.ticklog_segments`) stitched into one read-only
    `TickLog` (one segment: that log), loading no column up front. A torn last chunk is skipped with
    a warning (see `TickLog.open`). FileNotFoundError if the run has no tick log."""
    from nonstop.realtime.ticklog import TickLog

    segments = RunPaths(run_dir).ticklog_segments()
    if not segments:
        raise FileNotFoundError(f"no tick log in {run_dir} (neither ticklog/ nor ticklog.npz)")
    logs = [TickLog.load(p) for p in segments]
    return logs[0] if len(logs) == 1 else TickLog.stitch(logs, names=[p.name for p in segments])


def begin_ticklog_segment(run_dir: str | os.PathLike, tick_offset: int) -> Path:
    """Make room for a resumed segment's tick log: the previous newest (``ticklog/`` or
    ``ticklog.npz``) becomes ``ticklog-before-<tick_offset>`` (``-2``, ``-3``... if a run was resumed
    twice from one checkpoint). Returns the directory the new segment streams to."""
    paths = RunPaths(run_dir)
    for previous in (paths.ticklog_dir, paths.ticklog):
        if previous.exists():
            stem, suffix, n = f"ticklog-before-{tick_offset:09d}", previous.suffix, 2
            target = paths.root / f"{stem}{suffix}"
            while target.exists():
                target, n = paths.root / f"{stem}-{n}{suffix}", n + 1
            previous.rename(target)
    return paths.ticklog_dir


def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """RUN/config.json as a dict; FileNotFoundError/ValueError name the file when it is missing or bad."""
    path = RunPaths(run_dir).config
    if not path.is_file():
        raise FileNotFoundError(f"no config.json in {path.parent} (is it a run dir written by `nonstop train --out`?)")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds a JSON {type(config).__name__}, not an object of config keys")
    return config


def read_columns(path: str | os.PathLike, columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """A CSV written by `RunLog` as ``{column: float64 array}``; empty cells read as NaN.

    A last line without its newline (the writer was killed mid-row) is left out. ``columns``, when
    given, must all be present. Errors name the file, and the line for a bad cell.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} at {path}")
    text = path.read_text()
    lines = text.splitlines()
    if text and not text.endswith("\n"):
        lines = lines[:-1]  # a row cut short by a crash
    if not lines:
        raise ValueError(f"{path} is empty: not even a header row")
    header = next(csv.reader([lines[0]]))
    missing = [c for c in (columns or ()) if c not in header]
    if missing:
        raise ValueError(f"{path} lacks columns {missing}; it has {header}")
    values: list[list[float]] = []
    for lineno, row in enumerate(csv.reader(lines[1:]), start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{lineno}: {len(row)} cells, the header has {len(header)}")
        try:
            values.append([float(cell) if cell != "" else math.nan for cell in row])
        except ValueError:
            bad = next(c for c in row if c != "" and not _is_float(c))
            raise ValueError(f"{path}:{lineno}: {bad!r} is not a number") from None
    table = np.array(values, np.float64).reshape(len(values), len(header))
    return {name: table[:, i] for i, name in enumerate(header)}


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------- writing


def _cell(value: Any, column: str, where: str) -> str:
    """One CSV cell: numbers at full precision, '' for None (not measured yet, e.g. loss before learning)."""
    if value is None:
        return ""
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    raise TypeError(f"{where} column {column!r} must be a number or None, got {value!r}")


class _CsvAppender:
    """One CSV file opened for appending; each row is flushed to the OS before `write` returns."""

    def __init__(self, path: Path, columns: tuple[str, ...], *, resume: bool, note: Callable[[str], None]) -> None:
        self.path, self.columns = path, columns
        self.last_row: dict[str, float] | None = None
        self.rows_before = self._repair_and_check(note) if resume and path.exists() and path.stat().st_size else 0
        self.rows = self.rows_before
        self._file = open(path, "a" if resume else "w", newline="")
        self._writer = csv.writer(self._file)
        if self._file.tell() == 0:  # a new file, or one a resumed run never got to write
            self._writer.writerow(columns)
            self._file.flush()

    def _repair_and_check(self, note: Callable[[str], None]) -> int:
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as f:
                f.truncate(keep)
            note(f"note: dropped a partial last row of {self.path} (the previous run was cut off mid-write)")
            data = data[:keep]
        lines = data.decode().splitlines()
        header = tuple(next(csv.reader(lines[:1]), ()))
        older = self.columns[: len(self.columns) - len(OPTIONAL_PROGRESS_COLUMNS)]
        if header != self.columns and header == older and self.columns[len(older) :] == OPTIONAL_PROGRESS_COLUMNS:
            self.columns = header  # written before its last columns existed: it goes on with its own
        if header != self.columns:
            raise ValueError(
                f"cannot resume: {self.path} has columns {list(header)}, this nonstop writes {list(self.columns)}"
            )
        if len(lines) > 1:
            last = next(csv.reader(lines[-1:]))
            try:
                self.last_row = {c: float(v) if v != "" else math.nan for c, v in zip(self.columns, last, strict=True)}
            except ValueError as exc:
                raise ValueError(
                    f"cannot resume: the last row of {self.path} is not {len(self.columns)} numbers: {last}"
                ) from exc
        return len(lines) - 1

    def write(self, row: Mapping[str, Any], what: str) -> None:
        if not isinstance(row, Mapping):
            raise TypeError(f"a {what} row must be a dict of column -> number, got {type(row).__name__}")
        unknown = [k for k in row if k not in self.columns]
        if unknown:
            raise ValueError(f"unknown {what} columns {unknown}; the columns are {list(self.columns)}")
        self._writer.writerow([_cell(row.get(c), c, what) for c in self.columns])
        self._file.flush()
        self.rows += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def _stderr_note(message: str) -> None:
    print(message, file=sys.stderr)


def _check_config(config: Any) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict of the run's settings, got {type(config).__name__}")
    bad = [k for k in config if not isinstance(k, str)]
    if bad:
        raise TypeError(f"config keys must be strings, got {bad!r}")
    return dict(config)


class RunLog:
    """Writes a run directory (see the module docstring): config, progress and episode CSVs,
    TensorBoard mirror, tick log and final summary.

    A new run refuses a directory that already holds one (no silent overwrite of hours of logs);
    ``resume=True`` requires one, checks the new config against the saved ``config.json`` with
    `check_compatible` (``may_differ`` names the keys allowed to change) and appends to the CSVs.
    ``tensorboard=True`` mirrors every number to ``RUN/tb`` through
    ``torch.utils.tensorboard.SummaryWriter`` when the ``tensorboard`` package is installed, and
    otherwise says so once through ``note`` (default: a line on stderr) and carries on.

    Progress scalars go to TensorBoard as ``progress/<column>`` at step ``env_ticks``; episodes as
    ``episode/return`` and ``episode/length_ticks`` at step ``end_tick``.

    ``track`` names experiment trackers (``"wandb"``, ``"mlflow"``; see `nonstop.learning.tracking`)
    that get the config, the same rows and the summary. A tracker whose library is missing is a
    ModuleNotFoundError naming the extra, raised before the run directory is touched; one that cannot
    start (`TrackerError`) leaves a new run directory as it found it. The tracker runs end with
    `close`, as finished, killed or failed by the summary written (`nonstop.learning.tracking.end_state`).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        config: Mapping[str, Any],
        *,
        resume: bool = False,
        may_differ: Iterable[str] = DEFAULT_MAY_DIFFER,
        tensorboard: bool = True,
        track: str | Iterable[str] = (),
        note: Callable[[str], None] | None = None,
    ) -> None:
        from nonstop.learning.tracking import parse_track, require_trackers

        self.config = _check_config(config)
        self.paths = RunPaths(run_dir)
        self._note = note or _stderr_note
        track = parse_track(track)
        require_trackers(track)  # a missing library is named before anything is written
        root = self.paths.root
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(f"run dir {root} exists and is not a directory")
        if resume:
            if not self.paths.config.is_file():
                raise FileNotFoundError(f"cannot resume: {root} holds no config.json (no run was started there)")
            check_compatible(read_config(root), self.config, may_differ, where=str(root))
        else:
            files = (
                self.paths.config,
                self.paths.progress,
                self.paths.episodes,
                self.paths.matches,
                self.paths.ticklog,
                self.paths.ticklog_dir,
                self.paths.summary,
            )
            taken = [p.name for p in files if p.exists()]
            if self.paths.checkpoints.is_dir() and any(self.paths.checkpoints.iterdir()):
                taken.append(f"{CHECKPOINT_DIR}/")
            if taken:
                raise FileExistsError(
                    f"{root} already holds a run ({', '.join(taken)}): pass --resume to continue it, "
                    "or choose a new --out"
                )
        new_root = not root.exists()
        root.mkdir(parents=True, exist_ok=True)
        self._trackers = self._open_trackers(track, resume=resume, new_root=new_root)
        write_atomic(self.paths.config, (json.dumps(self.config, indent=2, default=str) + "\n").encode())
        self._progress = _CsvAppender(self.paths.progress, PROGRESS_COLUMNS, resume=resume, note=self._note)
        self._episodes = _CsvAppender(self.paths.episodes, EPISODE_COLUMNS, resume=resume, note=self._note)
        self._tb = self._open_tensorboard() if tensorboard else None
        self._resume = resume
        self._matches: _CsvAppender | None = None  # opened by the first match (self-play runs only)
        self._end = "finished"  # how the trackers' runs end (from the summary written)
        self._closed = False

    def _open_trackers(self, names: tuple[str, ...], *, resume: bool, new_root: bool) -> list[Any]:
        """Start each tracker's run; if one cannot, end those started and (a new run) remove what they
        wrote, so the user can fix the cause and run the same command again."""
        from nonstop.learning.tracking import TRACKING_FILE, open_tracker

        root = self.paths.root
        before = {p.name for p in root.iterdir()} if not new_root else set()
        opened: list[Any] = []
        try:
            for name in names:
                opened.append(open_tracker(name, root, self.config, resume=resume, note=self._note))
        except BaseException:
            for tracker in opened:
                tracker.finish("failed")
            if new_root:
                shutil.rmtree(root, ignore_errors=True)
            elif not resume:
                for name in {TRACKING_FILE, "wandb"} - before:
                    path = root / name
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            raise
        return opened

    @property
    def trackers(self) -> tuple[str, ...]:
        """The experiment trackers mirroring this run and still working (``wandb``, ``mlflow``)."""
        return tuple(t.name for t in self._trackers if t.failed is None)

    def _open_tensorboard(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            self._note(
                f"note: tensorboard is not installed, so {self.paths.tb} is not written; the CSVs hold every "
                "figure (pip install tensorboard, or nonstop[train], to get it)"
            )
            return None
        writer = SummaryWriter(log_dir=str(self.paths.tb), flush_secs=10)
        writer.add_text("config", "```json\n" + json.dumps(self.config, indent=2, default=str) + "\n```")
        return writer

    @property
    def tensorboard(self) -> bool:
        """Whether scalars are mirrored to TensorBoard."""
        return self._tb is not None

    @property
    def last_progress(self) -> dict[str, float] | None:
        """On resume, the last progress row already on disk (to continue wall_s, env_ticks…); else None."""
        return self._progress.last_row

    @property
    def last_episode(self) -> dict[str, float] | None:
        """On resume, the last episode row already on disk (to continue the episode count); else None."""
        return self._episodes.last_row

    @property
    def previous_rows(self) -> tuple[int, int]:
        """``(progress rows, episode rows)`` already in the files when this log was opened (0 for a new run)."""
        return self._progress.rows_before, self._episodes.rows_before

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the run log of {self.paths.root} is closed")

    def log_progress(self, row: Mapping[str, Any]) -> None:
        """Append one progress row (keys from PROGRESS_COLUMNS; a missing key is written empty)."""
        self._check_open()
        self._progress.write(row, "progress")
        if self._tb is not None:
            step = row.get("env_ticks")
            step = int(step) if step is not None else self._progress.rows
            for column in PROGRESS_COLUMNS:
                value = row.get(column)
                if column != "env_ticks" and value is not None and math.isfinite(float(value)):
                    self._tb.add_scalar(f"progress/{column}", float(value), global_step=step)
        for tracker in self._trackers:
            tracker.log("progress", row)

    def log_episode(self, row: Mapping[str, Any]) -> None:
        """Append one finished episode (keys from EPISODE_COLUMNS: episode, end_tick, wall_s, return, length_ticks)."""
        self._check_open()
        self._episodes.write(row, "episode")
        if self._tb is not None and row.get("end_tick") is not None:
            step = int(row["end_tick"])
            for column in ("return", "length_ticks"):
                if row.get(column) is not None:
                    self._tb.add_scalar(f"episode/{column}", float(row[column]), global_step=step)
        for tracker in self._trackers:
            tracker.log("episode", row)

    def log_match(self, row: Mapping[str, Any]) -> None:
        """Append one self-play match to RUN/matches.csv (keys from `MATCH_COLUMNS`);
        the file is opened (appended to, on resume) by the first match."""
        self._check_open()
        if self._matches is None:
            self._matches = _CsvAppender(self.paths.matches, MATCH_COLUMNS, resume=self._resume, note=self._note)
        self._matches.write(row, "match")
        if self._tb is not None and row.get("end_tick") is not None:
            for column in ("score", "won"):
                if row.get(column) is not None:
                    self._tb.add_scalar(f"self_play/{column}", float(row[column]), global_step=int(row["end_tick"]))
        for tracker in self._trackers:
            tracker.log("self_play", row)

    def save_ticklog(self, log: Any) -> Path:
        """Keep the tick log in the run: one that streamed to RUN/ticklog/ gets its final meta
        rewritten there (`TickLog.write_meta`); any other is written whole to RUN/ticklog.npz."""
        if log.directory is not None and Path(log.directory).resolve() == self.paths.ticklog_dir.resolve():
            log.write_meta()
            return self.paths.ticklog_dir
        return log.save(self.paths.ticklog)

    def write_summary(self, summary: Mapping[str, Any]) -> Path:
        """Write RUN/summary.json atomically (NaN becomes null, so any JSON reader takes it)."""
        if not isinstance(summary, Mapping):
            raise TypeError(f"summary must be a dict, got {type(summary).__name__}")
        text = json.dumps(json_safe(summary), indent=2, allow_nan=False)
        path = write_atomic(self.paths.summary, (text + "\n").encode())
        from nonstop.learning.tracking import end_state

        self._end = end_state(summary)
        for tracker in self._trackers:
            tracker.summary(summary)
        return path

    def close(self) -> None:
        """Flush, fsync and close every file; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._progress.close()
            self._episodes.close()
            if self._matches is not None:
                self._matches.close()
        finally:
            try:
                if self._tb is not None:
                    self._tb.close()
            finally:
                for tracker in self._trackers:
                    tracker.finish(self._end)

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ----------------------------------------------------------------------------- live view


def _number(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


#: What the live view shows: (label, column, format of the number).
_VIEW: Final = (
    ("elapsed", "wall_s", _elapsed),
    ("env ticks", "env_ticks", lambda v: f"{int(v):,}"),
    ("τ_I", "tau_i_mean_ticks", lambda v: f"{v:.2f}t"),
    ("inaction", "inaction_frac", lambda v: f"{v:.1%}"),
    ("updates/s", "updates_per_s", lambda v: f"{v:.1f}"),
    ("recent return", "recent_return", lambda v: f"{v:.2f}"),
    ("ε", "epsilon", lambda v: f"{v:.3f}"),
    ("α", "alpha", lambda v: f"{v:.3f}"),
)
#: figures shown only when the row has them: each algorithm's exploration figure (DQN's ε, SAC's α)
_OWN_FIGURES: Final = ("epsilon", "alpha")


def progress_fields(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` of each figure the live view shows; ``—`` where the row has no finite value
    (the exploration figures ε and α only where the row's algorithm has one)."""
    out = []
    for label, column, fmt in _VIEW:
        if column in _OWN_FIGURES and _number(row, column) is None and (column != "epsilon" or "alpha" in row):
            continue
        value = _number(row, column)
        out.append((label, "—" if value is None else fmt(value)))
    return out


def progress_line(row: Mapping[str, Any]) -> str:
    """The plain one-line form of `progress_fields`, for logs and pipes."""
    return " | ".join(f"{label} {text}" for label, text in progress_fields(row))


class Progress:
    """Console view of a training run, fed one progress row (a dict, as for `RunLog.log_progress`)
    per interval.

    On a terminal it is a rich ``Live`` table redrawn in place (with a bar of env ticks when
    ``total_ticks`` is known); when stdout is not a terminal (a pipe, a CI log, a file) it prints
    `progress_line` instead, once every ``every`` updates. It draws only when `update` is called,
    so the training loop decides the pace and nothing here reads a clock.
    """

    def __init__(
        self,
        *,
        total_ticks: int | None = None,
        title: str = "nonstop train",
        every: int = 1,
        console: Any = None,
    ) -> None:
        from nonstop._console import Console

        if total_ticks is not None and (
            isinstance(total_ticks, bool) or not isinstance(total_ticks, int) or total_ticks < 1
        ):
            raise ValueError(f"total_ticks must be a positive int or None, got {total_ticks!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive int (print one line per that many updates), got {every!r}")
        self.total_ticks, self.title, self.every = total_ticks, title, every
        self.console = console if console is not None else Console()
        self.live = self.console.is_terminal
        self._updates = 0
        self._live: Any = None

    def _render(self, row: Mapping[str, Any]) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table(title=self.title, title_justify="left")
        fields = progress_fields(row)
        for label, _ in fields:
            table.add_column(label, justify="right", no_wrap=True)
        table.add_row(*(text for _, text in fields))
        if self.total_ticks is None:
            return table
        done = min(_number(row, "env_ticks") or 0.0, float(self.total_ticks))
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            ProgressBar(total=self.total_ticks, completed=done, width=50), f"{int(done):,} / {self.total_ticks:,} ticks"
        )
        return Group(table, bar)

    def update(self, row: Mapping[str, Any]) -> None:
        """Show the figures of ``row`` (missing or NaN ones as ``—``)."""
        if not isinstance(row, Mapping):
            raise TypeError(f"a progress row must be a dict, got {type(row).__name__}")
        self._updates += 1
        if self.live:
            from rich.live import Live

            if self._live is None:
                self._live = Live(self._render(row), console=self.console, auto_refresh=False)
                self._live.start()
            self._live.update(self._render(row), refresh=True)
        elif (self._updates - 1) % self.every == 0:
            self.console.print(progress_line(row), markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        """Leave the last table on screen and give the terminal back; safe to call twice."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
