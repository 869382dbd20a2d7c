"""``nonstop report``: plots and summary of a synthetic run directory, figures checked independently."""

from __future__ import annotations

import doctest
import json
import statistics

import numpy as np
import pytest

import nonstop.metrics.plots as plots_module
from nonstop.cli import main
from nonstop.learning.runlog import RunLog, RunPaths
from nonstop.metrics.plots import plot_delay_histogram, rolling_mean, windowed_ticks
from nonstop.realtime.ticklog import SOURCE_AGENT, SOURCE_DEFAULT, TickLog
from nonstop.studies.report import build_report, render_summary, write_markdown

TAU_M = 1 / 60
N_TICKS = 600
EPISODE_TICKS = 100
CONFIG = {
    "env": "theory/inaction",
    "scheduler": "exp_time",
    "n_inference": 3,
    "clock": "virtual",
    "seed": 7,
    "lr": 1e-3,
}
RETURNS = [1.0, -2.0, 3.5, 0.0, 4.0, 2.5, -1.0, 6.0, 5.0, 3.0, 7.0, 8.0]


def is_agent(t: int) -> bool:
    return t % 3 != 0  # β acts on every third tick


def tick_delay(t: int) -> int:
    return 1 + t % 4


def make_ticklog() -> TickLog:
    log = TickLog(tau_m=TAU_M)
    for t in range(1, N_TICKS + 1):
        agent = is_agent(t)
        log.append(
            tick=t,
            deadline=t * TAU_M,
            time=t * TAU_M + 1e-5,
            source=SOURCE_AGENT if agent else SOURCE_DEFAULT,
            worker=t % 3 if agent else -1,
            delay=tick_delay(t) if agent else -1,
            obs_tick=t - tick_delay(t) if agent else -1,
            action=1,
            reward=1.0 if t % 5 == 0 else 0.0,
            episode=(t - 1) // EPISODE_TICKS,
            terminated=t % EPISODE_TICKS == 0,
        )
    return log


def make_run(run, *, progress=True, episodes=True, ticklog=True, summary=True) -> None:
    with RunLog(run, CONFIG, tensorboard=False) as log:
        if progress:
            for i in range(1, 6):
                log.log_progress(
                    {
                        "wall_s": 2.0 * i,
                        "env_ticks": 120 * i,
                        "episodes": i,
                        "inaction_frac": 0.5 / i,
                        "delay_mean_ticks": 2.0 + i,
                        "updates": 50 * i,
                        "updates_per_s": 20.0 + i,
                        "transitions": 80 * i,
                        "recent_return": float(i),
                        "epsilon": 1.0 - 0.1 * i,
                        "loss": None if i == 5 else 1.0 / i,
                    }
                )
        if episodes:
            for i, ret in enumerate(RETURNS):
                log.log_episode(
                    {"episode": i, "end_tick": 50 * (i + 1), "wall_s": 0.8 * (i + 1), "return": ret, "length_ticks": 50}
                )
        if ticklog:
            log.save_ticklog(make_ticklog())
        if summary:
            log.write_summary({"finished": True, "updates": 250})
    if not progress:
        RunPaths(run).progress.unlink()
    if not episodes:
        RunPaths(run).episodes.unlink()


def is_png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000


def test_plots_doctest():
    failures, tried = doctest.testmod(plots_module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_full_run_dir_gives_every_plot_and_right_figures(tmp_path):
    run = tmp_path / "run"
    make_run(run)
    report = build_report(run)
    assert report.out_dir == run / "report"
    assert report.skipped == {} and report.missing == []
    assert sorted(report.plots) == ["delay_histogram", "inaction_delay", "return_over_time"]
    assert all(is_png(p) and p.parent == run / "report" for p in report.plots.values())

    # tick-log figures, computed here from the same rule the log was written with
    agent_ticks = [t for t in range(1, N_TICKS + 1) if is_agent(t)]
    ticks = report.summary["ticks"]
    assert ticks["ticks"] == N_TICKS and ticks["agent_ticks"] == len(agent_ticks) == 400
    assert ticks["inaction_fraction"] == pytest.approx(200 / 600)
    assert ticks["delay_mean_ticks"] == pytest.approx(statistics.mean(tick_delay(t) for t in agent_ticks))
    assert ticks["delay_max_ticks"] == 4
    gaps = [b - a for a, b in zip(agent_ticks, agent_ticks[1:])]
    assert ticks["tau_i_mean_ticks"] == pytest.approx(statistics.mean(gaps))
    assert ticks["episodes_completed"] == N_TICKS // EPISODE_TICKS
    assert ticks["episode_return_mean"] == pytest.approx(EPISODE_TICKS // 5)  # a reward every 5th tick

    episodes = report.summary["episodes"]
    assert episodes["episodes"] == len(RETURNS)
    assert episodes["return_mean"] == pytest.approx(statistics.mean(RETURNS))
    assert episodes["return_last10_mean"] == pytest.approx(statistics.mean(RETURNS[-10:]))
    assert episodes["return_max"] == 8.0 and episodes["wall_s_last"] == pytest.approx(0.8 * len(RETURNS))

    progress = report.summary["progress"]
    assert progress["intervals"] == 5 and progress["env_ticks_last"] == 600 and progress["updates_last"] == 250
    assert progress["loss_last"] == pytest.approx(1 / 4)  # the last interval logged no loss
    assert progress["updates_per_s_mean"] == pytest.approx(statistics.mean(20.0 + i for i in range(1, 6)))
    assert report.summary["config"] == {
        k: CONFIG[k] for k in ("env", "scheduler", "n_inference", "clock", "seed", "lr")
    }
    assert report.summary["run_summary"] == {"finished": True, "updates": 250}

    md = write_markdown(report)
    text = md.read_text()
    assert "| ticks | inaction_fraction | 33.33% |" in text and "![delay_histogram](delay_histogram.png)" in text
    saved = json.loads((run / "report" / "report.json").read_text())
    assert saved["summary"]["episodes"]["return_mean"] == pytest.approx(statistics.mean(RETURNS))
    assert saved["summary"]["progress"]["loss_last"] == pytest.approx(0.25)


def test_partial_run_dir_plots_what_it_can_and_says_what_it_skipped(tmp_path):
    make_run(tmp_path, progress=False, ticklog=False, summary=False)
    report = build_report(tmp_path, tmp_path / "out")
    assert list(report.plots) == ["return_over_time"] and is_png(tmp_path / "out" / "return_over_time.png")
    assert report.skipped == {
        "inaction_delay": "neither the tick log nor progress.csv has any row",
        "delay_histogram": "the tick log is missing (no ticklog/ nor ticklog.npz)",
    }
    assert report.missing == ["progress.csv", "ticklog", "summary.json"]
    assert "ticks" not in report.summary and "progress" not in report.summary


def test_without_a_tick_log_inaction_comes_from_progress(tmp_path):
    make_run(tmp_path, episodes=False, ticklog=False)
    report = build_report(tmp_path)
    assert list(report.plots) == ["inaction_delay"]
    assert report.skipped["return_over_time"] == "episodes.csv is missing"
    assert report.summary["progress"]["inaction_frac_mean"] == pytest.approx(
        statistics.mean(0.5 / i for i in range(1, 6))
    )


def test_no_finished_episode_and_no_agent_tick_are_skipped_with_reasons(tmp_path):
    with RunLog(tmp_path, CONFIG, tensorboard=False) as log:
        beta_only = TickLog(tau_m=TAU_M)
        for t in range(1, 11):
            beta_only.append(tick=t, deadline=t * TAU_M, time=t * TAU_M, source=SOURCE_DEFAULT)
        log.save_ticklog(beta_only)
    report = build_report(tmp_path)
    assert report.skipped == {
        "return_over_time": "episodes.csv has no finished episode yet",
        "delay_histogram": "the tick log has no agent-applied tick (β acted throughout)",
    }
    assert report.summary["ticks"]["inaction_fraction"] == 1.0


def test_missing_and_unreadable_run_dirs_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no run directory at .*nope"):
        build_report(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="holds none of progress.csv, episodes.csv, ticklog"):
        build_report(tmp_path)
    make_run(tmp_path / "run", progress=False, episodes=False)
    RunPaths(tmp_path / "run").ticklog.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"cannot read tick log .*ticklog.npz"):
        build_report(tmp_path / "run")


def test_a_streamed_and_resumed_run_is_reported_whole(tmp_path):
    """RUN/ticklog-before-<tick>.npz (an older segment) + RUN/ticklog/ (streamed in chunks, the run
    killed before it closed the log): the report stitches both, figures as for the one log."""
    whole = make_ticklog()
    cols = whole.columns()
    make_run(tmp_path, ticklog=False)
    first, second = TickLog(TAU_M), TickLog(TAU_M, directory=RunPaths(tmp_path).ticklog_dir, chunk_rows=64)
    for r in range(N_TICKS):  # the second segment restarts at tick 1, in a new episode
        seg, base = (first, 0) if r < 300 else (second, 300)
        seg.append(
            **{n: cols[n][r].item() for n in cols if n != "lateness"}
            | {"tick": int(cols["tick"][r]) - base, "episode": int(cols["episode"][r]) - (3 if base else 0)}
        )
    first.save(tmp_path / "ticklog-before-000000300.npz")
    second._writer.close()  # as if killed: the open block (300 % 64 rows) never reached disk
    second._writer = None
    report = build_report(tmp_path)
    kept = 300 + 64 * (300 // 64)
    assert report.summary["ticks"]["ticks"] == kept
    expected = TickLog.from_arrays(whole.to_arrays()[0][:kept], {}, TAU_M).summary()
    assert report.summary["ticks"]["inaction_fraction"] == pytest.approx(expected["inaction_fraction"])
    assert report.summary["ticks"]["delay_mean_ticks"] == pytest.approx(expected["delay_mean_ticks"])
    assert set(report.plots) == {"return_over_time", "inaction_delay", "delay_histogram"}


def test_windowed_ticks_matches_a_direct_count():
    log = make_ticklog()
    w = windowed_ticks(log, 70)  # 600 ticks: 8 windows of 70 and one of 40
    assert len(w["time_s"]) == 9
    for i in range(9):
        window = range(1 + 70 * i, min(70 * (i + 1), N_TICKS) + 1)
        agent = [t for t in window if is_agent(t)]
        assert w["inaction_frac"][i] == pytest.approx(1 - len(agent) / len(window))
        assert w["delay_mean_ticks"][i] == pytest.approx(statistics.mean(tick_delay(t) for t in agent))
        assert w["time_s"][i] == pytest.approx(window[-1] * TAU_M)
    with pytest.raises(ValueError, match="window_ticks must be a positive int"):
        windowed_ticks(log, 0)


def test_plot_helpers_validate():
    assert rolling_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist() == [1.0, 2.0, 4.0, 6.0]
    with pytest.raises(ValueError, match="no delays to plot"):
        plot_delay_histogram(np.array([], np.int32), "x.png")
    with pytest.raises(ValueError, match="delays must be >= 0"):
        plot_delay_histogram(np.array([1, -1]), "x.png")


def test_cli_report(tmp_path, capsys):
    make_run(tmp_path / "run")
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r"), "--json"]) == 0
    out = capsys.readouterr().out
    last = json.loads(out.strip().splitlines()[-1])
    assert last["summary"]["ticks"]["ticks"] == N_TICKS and set(last["plots"]) == {
        "return_over_time",
        "inaction_delay",
        "delay_histogram",
    }
    assert (tmp_path / "r" / "report.md").is_file() and "inaction_fraction" in out
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no run directory at" in capsys.readouterr().err


def test_render_summary_lists_skips(tmp_path):
    import io

    from rich.console import Console

    make_run(tmp_path, progress=False, ticklog=False)
    buffer = io.StringIO()
    render_summary(build_report(tmp_path), Console(file=buffer, width=120))
    text = buffer.getvalue()
    assert "skipped plot delay_histogram: the tick log is missing" in text
    assert "not in the run dir: progress.csv, ticklog" in text


def test_run_summary_adds_no_repeated_figure_and_fills_the_resolved_n_inference(tmp_path):
    run = tmp_path / "run"
    with RunLog(run, {**CONFIG, "n_inference": None}, tensorboard=False) as log:
        log.save_ticklog(make_ticklog())
        # what `nonstop train` writes: the newest segment's tick figures again, and the N_I it resolved
        log.write_summary({"n_inference": 6, "inaction_fraction": 0.9, "ticks": 17, "updates": 3, "complete": True})
    report = build_report(run)
    assert report.summary["config"]["n_inference"] == 6
    assert report.summary["ticks"]["inaction_fraction"] == pytest.approx(200 / 600)  # from the whole tick log
    assert report.summary["run_summary"] == {"updates": 3, "complete": True}  # each figure shown once


def test_nested_run_summary_is_shortened_in_the_table_but_whole_in_json(tmp_path):
    make_run(tmp_path, summary=False)
    histogram = {str(d): 1000 + d for d in range(40)}
    (tmp_path / "summary.json").write_text(json.dumps({"delay_histogram": histogram}))
    report = build_report(tmp_path)
    write_markdown(report)
    row = next(
        line
        for line in (tmp_path / "report" / "report.md").read_text().splitlines()
        if "delay_histogram" in line and line.startswith("|")
    )
    assert row.endswith("… |") and len(row) < 120
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert saved["summary"]["run_summary"]["delay_histogram"] == histogram
