"""`nonstop train`: a run directory, resume that continues exactly, clean stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import SHM_DIR

from nonstop.cli import main
from nonstop.commands import VERBS
from nonstop.learning.checkpoint import latest_checkpoint, load_checkpoint
from nonstop.learning.runlog import read_columns, read_ticklog
from nonstop.realtime.ticklog import TickLog

ARGS = [
    "train",
    "--env",
    "CartPole",
    "--learning-starts",
    "50",
    "--batch-size",
    "8",
    "--progress-every",
    "2",
    "--checkpoint-every",
    "4",
]


def test_train_writes_a_run_and_resume_continues_the_counters(tmp_path, capsys, no_shm_leak):
    run = tmp_path / "run"
    assert main([*ARGS, "--seconds", "6", "--out", str(run)]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ckpt = latest_checkpoint(run)
    assert ckpt.updates == first["updates"] > 100 and ckpt.state["env_ticks"] == 300
    progress = read_columns(run / "progress.csv")
    assert progress["env_ticks"].tolist() == [100, 200, 300]
    assert (run / "ticklog" / "meta.json").exists() and (run / "summary.json").exists()
    assert len(TickLog.open(run / "ticklog")) == 300
    assert json.loads((run / "summary.json").read_text())["machine_limits"] == []  # the virtual clock never runs late

    assert main([*ARGS, "--seconds", "10", "--out", str(run), "--resume"]) == 0  # the run's total: 4 s more
    progress = read_columns(run / "progress.csv")
    assert progress["env_ticks"].tolist() == [100, 200, 300, 400, 500]  # appended, counting on
    # wall time counts on too: the resumed segment starts where the first one ended, not at 0
    wall = progress["wall_s"].tolist()
    assert all(b > a for a, b in zip(wall, wall[1:], strict=False)), wall
    episodes = read_columns(run / "episodes.csv")
    assert len(episodes["wall_s"]) > 1 and (episodes["wall_s"][1:] >= episodes["wall_s"][:-1]).all()
    assert (episodes["end_tick"][1:] > episodes["end_tick"][:-1]).all()
    resumed = load_checkpoint(latest_checkpoint(run).path)
    assert resumed["env_ticks"] == 500 and resumed["updates"] > first["updates"]
    assert (run / "ticklog-before-000000300").is_dir() and (run / "ticklog").is_dir()  # both segments kept
    whole = read_ticklog(run)  # stitched: one timeline of 300 + 200 ticks
    assert len(whole) == 500 and whole["tick"].tolist() == list(range(1, 501))
    assert [s["name"] for s in whole.meta["segments"]] == ["ticklog-before-000000300", "ticklog"]
    assert progress["epsilon"][-1] < progress["epsilon"][2]  # ε kept annealing from where it was


def test_resume_with_an_incompatible_config_lists_the_keys(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*ARGS, "--seconds", "2", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main([*ARGS, "--seconds", "4", "--out", str(run), "--resume", "--lr", "0.1", "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert "dqn.lr" in err and "seed" in err


def test_bad_train_arguments_fail_before_anything_starts(tmp_path, capsys):
    assert main([*ARGS, "--seconds", "-1", "--out", str(tmp_path / "a")]) == 2
    assert "--seconds must be a positive" in capsys.readouterr().err
    assert main([*ARGS, "--resume"]) == 2
    assert "--resume needs --out" in capsys.readouterr().err
    assert main(["train", "--env", "Boxing", "--k", "4000", "--out", str(tmp_path / "a")]) == 2
    assert "needs" in capsys.readouterr().err  # the model would not fit: said before anything starts
    assert main(["train", "--env", "Boxing", "--replay-capacity", str(10**9), "--out", str(tmp_path / "a")]) == 2
    assert "lower --replay-capacity" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


@pytest.mark.wall
@pytest.mark.slow
def test_sigterm_on_the_wall_clock_checkpoints_and_leaves_nothing_behind(tmp_path):
    run = tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nonstop.cli",
            *ARGS,
            "--clock",
            "wall",
            "--seconds",
            "120",
            "--progress-every",
            "0.5",
            "--checkpoint-every",
            "1000",
            "--out",
            str(run),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (run / "progress.csv").exists() and len((run / "progress.csv").read_text().splitlines()) > 3:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err  # 128 + SIGTERM, as the shell reports a process SIGTERM ended
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.state["env_ticks"] > 0
    assert (run / "summary.json").exists() and json.loads((run / "summary.json").read_text())["interrupted"]
    leaked = [p.name for p in SHM_DIR.iterdir() if p.name.startswith("nonstop_") and f"_{proc.pid}_" in p.name]
    assert not leaked, leaked


def test_resume_skips_a_corrupt_newest_checkpoint_and_names_it(tmp_path, capsys, no_shm_leak):
    run = tmp_path / "run"
    assert main([*ARGS, "--seconds", "8", "--out", str(run)]) == 0  # checkpoints at 4 s and at the end
    ckpts = sorted((run / "checkpoints").glob("ckpt-*.pt"))
    assert len(ckpts) == 2
    ckpts[-1].write_bytes(ckpts[-1].read_bytes()[:1000])  # truncate the newest
    capsys.readouterr()
    assert main([*ARGS, "--seconds", "10", "--out", str(run), "--resume"]) == 0
    err = "".join(capsys.readouterr().err.split())  # the console wraps long lines anywhere
    assert ckpts[-1].name in err and f"resumedfrom{ckpts[0].name}" in err


def test_every_dqn_setting_is_a_train_flag_with_its_default_shown():
    """Issue 13/10: the train flags are generated from DQNConfig, so none is missing or undocumented,
    and a flag left out keeps the env family's value."""
    import argparse
    from dataclasses import fields

    from nonstop.learning.dqn import DQNConfig
    from nonstop.commands.train import add_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    text = p.format_help()
    for f in fields(DQNConfig):
        assert "--" + f.name.replace("_", "-") in text
    args = p.parse_args(
        [
            "--env",
            "CartPole",
            "--gamma",
            "0.9",
            "--target-update",
            "77",
            "--adam-eps",
            "1e-8",
            "--epsilon-start",
            "0.05",
            "--epsilon-end",
            "0.05",
            "--updates-per-transition",
            "4",
            "--hidden",
            "32",
            "16",
            "--no-double",
        ]
    )
    dqn = config_from_args(args).algo_settings
    assert (dqn.gamma, dqn.target_update, dqn.adam_eps, dqn.updates_per_transition) == (0.9, 77, 1e-8, 4.0)
    assert (dqn.epsilon_start, dqn.epsilon_end, dqn.hidden, dqn.double) == (0.05, 0.05, (32, 16), False)
    assert dqn.lr == DQNConfig.for_family("classic").lr  # not given: the family's value stays
    with pytest.raises(ValueError, match="gamma"):
        config_from_args(p.parse_args(["--gamma", "1.5"]))


def test_paper_preset_sets_the_papers_stated_values_and_flags_beside_it_win():
    import argparse

    from nonstop.commands.train import add_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    dqn = config_from_args(
        p.parse_args(["--env", "CartPole", "--preset", "paper-pokemon", "--batch-size", "8"])
    ).algo_settings
    assert (dqn.lr, dqn.gamma, dqn.replay_capacity, dqn.batch_size) == (1e-3, 0.99, 1_000_000, 8)
    with pytest.raises(SystemExit):
        p.parse_args(["--preset", "paper-nope"])


def test_help_shows_what_each_env_family_changes(capsys):
    """A DQN flag's help gives the dataclass default and every family's own (CartPole trains at
    lr 5e-4, not the paper's Atari 1e-5 that the default alone would suggest)."""
    import re

    from nonstop.cli import main
    from nonstop.learning.dqn import FAMILY_DEFAULTS, DQNConfig

    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    assert stop.value.code == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "(default: 1e-05; gameboy 0.001, classic 0.0005)" in text
    assert "(default: 16; classic 64)" in text
    assert DQNConfig.for_family("classic").lr == FAMILY_DEFAULTS["classic"]["lr"] == 5e-4


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--trim-above", "lots"],
            "--trim-above takes bytes with an optional unit (0, 4MiB, 512KiB, 1GiB) or 'never', got 'lots'",
        ),
        (
            ["--trim-above", "16MiB"],
            "--trim-above 16MiB trims worker processes: it needs --clock wall and --backend process or ray",
        ),
        (
            ["--trim-above", "0", "--clock", "wall"],
            "needs --clock wall and --backend process or ray",
        ),  # threads: nothing to trim
    ],
)
def test_trim_above_is_refused_where_it_would_do_nothing(tmp_path, capsys, argv, message):
    assert main([*ARGS, "--seconds", "1", "--out", str(tmp_path / "a"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "a").exists()


@pytest.mark.wall
@pytest.mark.slow
def test_trim_above_reaches_every_process_worker_and_may_change_on_resume(tmp_path, capsys, monkeypatch):
    from nonstop.inference import workers

    given = []

    class Recorded(workers.ProcessPolicy):
        def __init__(self, factory, **options):
            given.append(options.get("trim_above", "<default>"))
            super().__init__(factory, **options)

    monkeypatch.setattr(workers, "ProcessPolicy", Recorded)
    run = tmp_path / "run"
    wall = ["--clock", "wall", "--backend", "process", "--n-inference", "2", "--latency", "2t", "--out", str(run)]
    assert main([*ARGS, "--seconds", "2", *wall, "--trim-above", "never"]) == 0
    assert given == [None, None]
    assert json.loads((run / "config.json").read_text())["trim_above"] is None
    # the world ticked while the two processes started: β's start-up ticks are said apart
    summary = json.loads((run / "summary.json").read_text())
    assert summary["startup_ticks"] > 0
    assert summary["inaction_fraction_after_startup"] < summary["inaction_fraction"]
    assert f"after the workers' first {summary['startup_ticks']:,} ticks of starting up" in capsys.readouterr().err
    # a memory knob, not part of what is learned: a resume may change it
    assert main([*ARGS, "--seconds", "4", *wall, "--trim-above", "1MiB", "--resume"]) == 0
    assert given[2:] == [2**20, 2**20]
    # a resumed run's figures cover both segments; its start-up is this segment's own, apart
    resumed = json.loads((run / "summary.json").read_text())
    segment = resumed["this_segment"]
    assert "startup_ticks" not in resumed and segment["startup_ticks"] > 0
    assert segment["inaction_fraction_after_startup"] < segment["inaction_fraction"]
    assert "in this segment after the workers' first" in " ".join(capsys.readouterr().err.split())
    capsys.readouterr()


def test_resume_continues_the_saved_config_and_says_what_it_overrides(tmp_path, capsys, no_shm_leak):
    """`train --resume RUN` needs no flag typed again: the saved config goes on; a flag typed now is an
    override said at the start; --seconds is the run's total; summary.json covers every segment."""
    run = tmp_path / "run"
    first = [
        "train",
        "--env",
        "CartPole",
        "--latency",
        "2t",
        "--learning-starts",
        "30",
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
        "--checkpoint-every",
        "4",
        "--seconds",
        "4",
        "--out",
        str(run),
    ]
    assert main(first) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--seconds", "6"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "resuming" in err and "overriding seconds: 4.0 → 6.0" in err, err
    config = json.loads((run / "config.json").read_text())
    assert (
        config["latency"] == "2t" and config["algo_settings"]["lr"] == 1e-3 and config["seconds"] == 6.0
    )  # kept, not defaults
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_ticks_total"] == 300 and summary["segments"] == 2
    assert summary["this_segment"]["ticks"] == 100 and summary["ticks"] == 300  # the figures cover both segments
    # nothing left of the total: said, nothing run
    assert main(["train", "--resume", str(run), "--seconds", "6"]) == 2
    assert "nothing is left to run" in capsys.readouterr().err
    # two runs named at once
    assert main(["train", "--resume", str(run), "--out", str(tmp_path / "other")]) == 2
    assert "name two runs" in capsys.readouterr().err


def test_a_world_dqn_cannot_act_in_is_one_line_before_anything_is_written(tmp_path, capsys):
    """A continuous action space is the user's choice of world, not a bug: one line, exit 2, no run dir
    (the CLI no longer turns every TypeError into a usage line, so this one must be a ValueError)."""
    out = tmp_path / "run"
    assert main(["train", "--env", "Pendulum-v1", "--seconds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DQN needs a Discrete action space; Pendulum-v1 has Box" in err
    assert not out.exists()


def test_the_batching_server_is_a_backend_of_train_and_a_device_is_checked_at_the_door(tmp_path, capsys, no_shm_leak):
    """`--backend batched`: the workers are request lanes of one server (on the virtual clock too);
    `--device cuda` where torch finds no CUDA is one line naming what it found, before any run dir."""
    import torch

    out = tmp_path / "run"
    assert (
        main(
            [
                *ARGS,
                "--backend",
                "batched",
                "--latency",
                "0.6t",
                "--n-inference",
                "2",
                "--scheduler",
                "quantile_hold",
                "--batch-curve",
                "linear:0.5t,0.05t",
                "--seconds",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batch_server"]["requests"] > 150 and summary["batch_server"]["clock"] == "virtual"
    assert json.loads((out / "config.json").read_text())["batch_curve"] == "linear:0.5t,0.05t"
    from nonstop.studies.report import build_report

    shown = build_report(out, tmp_path / "report").summary["batch_server"]  # `nonstop report` shows the batches
    assert shown["applied_batch_size_mean"] >= 1 and sum(shown["applied_batch_sizes"].values()) > 150
    capsys.readouterr()
    if not torch.cuda.is_available():
        assert main([*ARGS, "--backend", "batched", "--device", "cuda", "--out", str(tmp_path / "gpu")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "needs a CUDA GPU, but torch" in err and "finds none" in err
        assert not (tmp_path / "gpu").exists()
    if (
        not torch.cuda.is_available()
    ):  # every backend's workers and learners take --device now, each checked at the door
        assert main([*ARGS, "--device", "cuda", "--out", str(tmp_path / "thread")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "needs a CUDA GPU, but torch" in err and not (tmp_path / "thread").exists()
    assert main([*ARGS, "--clock", "wall", "--backend", "ray", "--device", "auto", "--out", str(tmp_path / "ray")]) == 2
    assert "with Ray" in capsys.readouterr().err


def test_a_bad_value_is_one_error_line_under_a_one_line_usage(capsys):
    """argparse's own error() printed train's whole usage first: 30 lines above the one that matters."""
    with pytest.raises(SystemExit) as stop:
        main(["train", "--n-inference", "0"])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "usage: nonstop train … (nonstop train --help lists every option)",
        "nonstop: error: argument --n-inference: must be >= 1 (or 'auto'), got 0",
    ]


@pytest.mark.parametrize("verb", ["", *VERBS])
def test_every_verb_answers_a_bad_option_in_two_lines(verb, capsys):
    with pytest.raises(SystemExit) as stop:
        main([verb, "--no-such-option"] if verb else ["--no-such-option"])
    assert stop.value.code == 2
    usage, error = capsys.readouterr().err.strip().splitlines()
    assert usage.startswith(f"usage: nonstop {verb}".rstrip()) and error.startswith("nonstop: error: "), (usage, error)


def test_the_replay_goes_beside_a_checkpoint_compressed_unless_told_not_to(tmp_path, capsys, no_shm_leak):
    """By default (`--checkpoint-replay auto`) CartPole's replay, far under the budget, goes beside each
    checkpoint, compressed, and a resume goes on with it; pruning a checkpoint prunes its replay. With
    `no` a checkpoint holds none, and the resume says in one line that its replay starts empty and what
    that costs."""
    plain, kept = tmp_path / "plain", tmp_path / "kept"
    assert main([*ARGS, "--seconds", "4", "--checkpoint-replay", "no", "--out", str(plain)]) == 0
    assert not list((plain / "checkpoints").glob("replay-*")) and "replay" not in latest_checkpoint(plain).state
    assert main([*ARGS, "--seconds", "12", "--keep-checkpoints", "2", "--out", str(kept)]) == 0  # auto
    ckpts = sorted((kept / "checkpoints").glob("ckpt-*.pt"))
    replays = sorted((kept / "checkpoints").glob("replay-*.npz"))
    assert len(ckpts) == 2 and [r.name[7:16] for r in replays] == [c.name[5:14] for c in ckpts]  # pruned with them
    newest = latest_checkpoint(kept).state
    assert newest["replay_file"] == replays[-1].name and "replay" not in newest
    with np.load(replays[-1]) as data:
        raw = sum(data[k].nbytes for k in data.files)
    assert replays[-1].stat().st_size < raw  # compressed
    capsys.readouterr()
    assert main([*ARGS, "--seconds", "14", "--out", str(kept), "--resume"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "resumed from" in err and "starts empty" not in err, err
    assert main([*ARGS, "--seconds", "6", "--out", str(plain), "--resume"]) == 0
    said = [" ".join(line.split()) for line in capsys.readouterr().err.splitlines() if "starts empty" in line]
    assert len(said) == 1 and "learning waits for 50 new transitions" in said[0], said  # one line, with the cost
    assert "replay-" in " ".join(p.name for p in (plain / "checkpoints").iterdir())  # the resumed run keeps it now


def test_a_schedulers_own_settings_reach_the_pool(tmp_path, capsys, no_shm_leak):
    """`--scheduler-arg` hands the scheduler its settings (fill's p_minimax, as `nonstop tolerance`
    measures it); an unknown one is one line before anything is written."""
    from nonstop.experiment import Run, TrainConfig

    out = tmp_path / "run"
    assert (
        main(
            [
                *ARGS,
                "--scheduler",
                "fill",
                "--latency",
                "3t",
                "--scheduler-arg",
                "p_minimax=0.972",
                "--seconds",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads((out / "config.json").read_text())["scheduler_args"] == {"p_minimax": 0.972}
    run = Run(
        TrainConfig(env="CartPole", scheduler="fill", latency="3t", scheduler_args={"p_minimax": 0.972}, seconds=1)
    )
    try:
        run.build().start()
        rule = run.pool.scheduler
    finally:
        run.teardown()
    assert type(rule).__name__ == "FillScheduler" and rule.n_workers == 3 and rule.p_minimax == pytest.approx(0.972)
    capsys.readouterr()
    assert main([*ARGS, "--scheduler", "fill", "--scheduler-arg", "speed=11", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scheduler-arg" in err and "speed" in err and not (tmp_path / "bad").exists()
