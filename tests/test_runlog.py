"""The run directory writer (RunLog) and the live progress view (Progress)."""

from __future__ import annotations

import csv
import doctest
import io
import json
import math
import sys

import numpy as np
import pytest
import torch
from rich.console import Console

import nonstop.learning.runlog as runlog_module
from nonstop.learning.checkpoint import IncompatibleConfigError
from nonstop.learning.runlog import (
    EPISODE_COLUMNS,
    PROGRESS_COLUMNS,
    Progress,
    RunLog,
    RunPaths,
    progress_fields,
    progress_line,
    read_columns,
    read_config,
)
from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog

CONFIG = {"env": "theory/inaction", "k": 1, "scheduler": "exp_time", "n_inference": 4, "lr": 1e-3, "ticks": 600}


def progress_row(i: int) -> dict:
    return {
        "wall_s": 0.5 * i,
        "env_ticks": 30 * i,
        "episodes": i // 2,
        "tau_i_mean_ticks": 1.25,
        "inaction_frac": 0.1 / i,
        "delay_mean_ticks": 4.0,
        "updates": 10 * i,
        "updates_per_s": 20.0,
        "transitions": 25 * i,
        "recent_return": -1.0 + i,
        "epsilon": 1.0 - 0.01 * i,
        "loss": None if i == 1 else np.float32(0.5) / i,
    }


def csv_rows(path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def no_note(message: str) -> None:
    raise AssertionError(f"unexpected note: {message}")


def test_module_doctests():
    failures, tried = doctest.testmod(runlog_module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_writes_config_and_flushes_each_row_before_close(tmp_path):
    run = tmp_path / "a" / "run"
    log = RunLog(run, CONFIG, tensorboard=False, note=no_note)
    paths = RunPaths(run)
    assert json.loads(paths.config.read_text()) == CONFIG and read_config(run) == CONFIG
    for i in (1, 2, 3):
        log.log_progress(progress_row(i))
    log.log_episode({"episode": 0, "end_tick": 55, "wall_s": 0.9, "return": 3.5, "length_ticks": 55})
    # read back while the writer is still open: what a crash at this instant would leave
    rows = csv_rows(paths.progress)
    assert rows[0] == list(PROGRESS_COLUMNS) and len(rows) == 4
    assert rows[1][PROGRESS_COLUMNS.index("loss")] == ""  # no loss before learning starts
    progress = read_columns(paths.progress)
    assert progress["env_ticks"].tolist() == [30, 60, 90]
    assert math.isnan(progress["loss"][0]) and progress["loss"][2] == pytest.approx(0.5 / 3)
    assert progress["inaction_frac"][1] == 0.05  # full precision survives the text round trip
    assert csv_rows(paths.episodes) == [list(EPISODE_COLUMNS), ["0", "55", "0.9", "3.5", "55"]]
    log.close()
    log.close()
    with pytest.raises(RuntimeError, match="closed"):
        log.log_progress(progress_row(4))


def test_new_run_refuses_an_existing_run_and_bad_rows(tmp_path):
    with RunLog(tmp_path, CONFIG, tensorboard=False) as log:
        with pytest.raises(ValueError, match=r"unknown progress columns \['los'\]"):
            log.log_progress({"wall_s": 1.0, "los": 0.1})
        with pytest.raises(TypeError, match="column 'epsilon' must be a number or None, got 'high'"):
            log.log_progress({"epsilon": "high"})
        with pytest.raises(TypeError, match="episode row must be a dict"):
            log.log_episode([1, 2])
    with pytest.raises(FileExistsError, match="already holds a run .*pass --resume"):
        RunLog(tmp_path, CONFIG, tensorboard=False)
    leftover = tmp_path / "old" / "checkpoints"
    leftover.mkdir(parents=True)
    (leftover / "ckpt-000000001.pt").write_bytes(b"x")
    with pytest.raises(FileExistsError, match=r"already holds a run \(checkpoints/\)"):
        RunLog(tmp_path / "old", CONFIG, tensorboard=False)
    with pytest.raises(TypeError, match="config must be a dict"):
        RunLog(tmp_path / "b", "env=Pong")
    with pytest.raises(FileNotFoundError, match="cannot resume: .* holds no config.json"):
        RunLog(tmp_path / "c", CONFIG, resume=True)


def test_resume_appends_and_repairs_a_cut_row(tmp_path):
    with RunLog(tmp_path, CONFIG, tensorboard=False) as log:
        log.log_progress(progress_row(1))
        log.log_progress(progress_row(2))
    paths = RunPaths(tmp_path)
    with open(paths.progress, "a") as f:
        f.write("1.5,90,1,1.2")  # the writer was killed half way through a row
    assert read_columns(paths.progress)["env_ticks"].tolist() == [30, 60]  # the reader ignores the cut row
    notes: list[str] = []
    longer = {**CONFIG, "ticks": 6000}  # the budget may change on resume
    with RunLog(tmp_path, longer, resume=True, tensorboard=False, note=notes.append) as log:
        assert log.previous_rows == (2, 0)
        assert log.last_progress["env_ticks"] == 60 and log.last_progress["tau_i_mean_ticks"] == 1.25
        assert log.last_episode is None
        log.log_progress(progress_row(3))
        log.log_episode({"episode": 0, "end_tick": 80, "wall_s": 1.4, "return": 1.0, "length_ticks": 80})
    assert len(notes) == 1 and "dropped a partial last row" in notes[0] and "progress.csv" in notes[0]
    assert read_columns(paths.progress)["env_ticks"].tolist() == [30, 60, 90]
    assert csv_rows(paths.progress)[0] == list(PROGRESS_COLUMNS)  # header not repeated
    assert read_columns(paths.episodes)["end_tick"].tolist() == [80]
    assert read_config(tmp_path)["ticks"] == 6000


def test_resume_with_an_incompatible_config_lists_the_keys(tmp_path):
    RunLog(tmp_path, CONFIG, tensorboard=False).close()
    expected = r"(?s)2 keys.*lr: saved 0.001, now 0.0001.*n_inference: saved 4, now 8"
    with pytest.raises(IncompatibleConfigError, match=expected):
        RunLog(tmp_path, {**CONFIG, "lr": 1e-4, "n_inference": 8}, resume=True, tensorboard=False)
    assert read_config(tmp_path) == CONFIG  # the refused resume did not touch the saved config


def test_resume_refuses_a_csv_with_other_columns(tmp_path):
    RunLog(tmp_path, CONFIG, tensorboard=False).close()
    RunPaths(tmp_path).episodes.write_text("episode,score\n0,1\n")
    with pytest.raises(ValueError, match=r"episodes.csv has columns \['episode', 'score'\]"):
        RunLog(tmp_path, CONFIG, resume=True, tensorboard=False)


def test_read_columns_names_bad_lines(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text("wall_s,env_ticks\n1.0,60\n2.0,oops\n")
    with pytest.raises(ValueError, match=r"progress.csv:3: 'oops' is not a number"):
        read_columns(path)
    path.write_text("wall_s,env_ticks\n1.0\n")
    with pytest.raises(ValueError, match=r"progress.csv:2: 1 cells, the header has 2"):
        read_columns(path)
    path.write_text("wall_s\n1.0\n")
    with pytest.raises(ValueError, match=r"lacks columns \['loss'\]"):
        read_columns(path, ["loss"])
    path.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        read_columns(path)
    with pytest.raises(FileNotFoundError, match="no episodes.csv"):
        read_columns(tmp_path / "episodes.csv")


def test_summary_and_ticklog(tmp_path):
    tick_log = TickLog(tau_m=1 / 60)
    tick_log.append(tick=1, deadline=1 / 60, time=1 / 60, source=SOURCE_AGENT, delay=2, obs_tick=-1, episode=0)
    with RunLog(tmp_path, CONFIG, tensorboard=False) as log:
        assert log.save_ticklog(tick_log) == RunPaths(tmp_path).ticklog
        log.write_summary({"return_mean": np.float64(2.5), "loss": float("nan"), "path": tmp_path})
    assert TickLog.load(RunPaths(tmp_path).ticklog)["delay"].tolist() == [2]
    assert json.loads(RunPaths(tmp_path).summary.read_text()) == {
        "return_mean": 2.5,
        "loss": None,
        "path": str(tmp_path),
    }


def test_tensorboard_mirror(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is an optional dependency (the train and test extras)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLog(tmp_path, CONFIG, note=no_note) as log:
        assert log.tensorboard
        for i in (1, 2):
            log.log_progress(progress_row(i))
        log.log_episode({"episode": 0, "end_tick": 55, "wall_s": 0.9, "return": 3.5, "length_ticks": 55})
    events = EventAccumulator(str(RunPaths(tmp_path).tb))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"progress/inaction_frac", "progress/loss", "episode/return", "episode/length_ticks"} <= tags
    assert "progress/env_ticks" not in tags  # it is the step, not a series
    inaction = events.Scalars("progress/inaction_frac")
    assert [(e.step, round(e.value, 6)) for e in inaction] == [(30, 0.1), (60, 0.05)]
    assert [e.step for e in events.Scalars("progress/loss")] == [60]  # the empty loss was not mirrored
    assert [(e.step, e.value) for e in events.Scalars("episode/return")] == [(55, 3.5)]


def test_without_tensorboard_a_note_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    notes: list[str] = []
    with RunLog(tmp_path, CONFIG, note=notes.append) as log:
        log.log_progress(progress_row(1))
        assert not log.tensorboard
    assert len(notes) == 1 and "tensorboard is not installed" in notes[0] and "\n" not in notes[0]
    assert read_columns(RunPaths(tmp_path).progress)["env_ticks"].tolist() == [30]


# ----------------------------------------------------------------------------- Progress


def test_progress_fields_format_and_dash_for_missing():
    fields = dict(progress_fields({**progress_row(2), "wall_s": 3725.0, "env_ticks": torch.tensor(1234567)}))
    assert fields == {
        "elapsed": "1:02:05",
        "env ticks": "1,234,567",
        "τ_I": "1.25t",
        "inaction": "5.0%",
        "updates/s": "20.0",
        "recent return": "1.00",
        "ε": "0.980",
    }
    assert set(dict(progress_fields({"epsilon": float("nan")})).values()) == {"—"}


def test_progress_prints_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress(console=Console(file=out, force_terminal=False, width=60), every=2) as view:
        assert not view.live
        for i in (1, 2, 3):
            view.update(progress_row(i))
    lines = out.getvalue().splitlines()
    assert lines == [progress_line(progress_row(1)), progress_line(progress_row(3))]  # one per 2 updates, unwrapped
    assert "\x1b[" not in out.getvalue()


def test_progress_live_table_on_a_terminal():
    out = io.StringIO()
    view = Progress(total_ticks=120, console=Console(file=out, force_terminal=True, width=120))
    assert view.live
    view.update(progress_row(1))
    view.update(progress_row(2))
    view.close()
    view.close()
    text = out.getvalue()
    assert "\x1b[" in text  # drawn in place with terminal control codes
    assert "inaction" in text and "5.0%" in text and "60 / 120 ticks" in text


def test_progress_validates_arguments():
    with pytest.raises(ValueError, match="total_ticks must be a positive int"):
        Progress(total_ticks=0)
    with pytest.raises(ValueError, match="every must be a positive int"):
        Progress(every=0)
    with pytest.raises(TypeError, match="progress row must be a dict"):
        Progress(console=Console(file=io.StringIO())).update(3)


def test_a_killed_writer_loses_no_logged_row(tmp_path):
    """SIGKILL right after logging (no close, no atexit): every row written is on disk."""
    import subprocess

    script = (
        "import os, signal\n"
        "from nonstop.learning.runlog import RunLog\n"
        f"log = RunLog({str(tmp_path)!r}, {{'env': 'x'}}, tensorboard=False)\n"
        "for i in range(3):\n"
        "    log.log_progress({'wall_s': i, 'env_ticks': 60 * i})\n"
        "log.log_episode({'episode': 0, 'end_tick': 120, 'return': 1.5})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()
    paths = RunPaths(tmp_path)
    assert read_columns(paths.progress)["env_ticks"].tolist() == [0, 60, 120]
    assert read_columns(paths.episodes)["return"].tolist() == [1.5]
