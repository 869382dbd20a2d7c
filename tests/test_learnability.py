"""A run that cannot learn says so at the door, with the numbers and the flag, and one that ended
without an update says why (its last line and summary.json); one that can learn says nothing."""

from __future__ import annotations

import json

from nonstop.cli import main

# CartPole ticks at 50 Hz: 18 s is 900 ticks, under DQN's 1,000 transitions and its 10,000-tick ε anneal
SHORT = ["train", "--env", "CartPole", "--seconds", "18", "--progress-every", "18"]


def test_a_run_too_short_to_learn_is_told_before_it_starts_and_why_it_made_no_update(tmp_path, capsys):
    assert main([*SHORT, "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    door = next(i for i, line in enumerate(lines) if "fewer than the 1,000 learning waits for" in line)
    first_progress = next(i for i, line in enumerate(lines) if "env ticks" in line)
    assert door < first_progress, err  # said before the first tick
    assert "this run's 900 ticks" in lines[door] and "--learning-starts 90" in lines[door]
    eps = next(line for line in lines if line.startswith("ε anneals"))
    assert "10,000 ticks" in eps and "900" in eps and "ε 0.914" in eps and "--epsilon-ticks 90" in eps
    done = next(line for line in lines if line.startswith("done:"))
    assert "0 updates" in done and "no update: the replay got 899 transitions, fewer than the 1,000" in done
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates"] == 0 and "899 transitions" in summary["no_updates_reason"]


def test_the_flags_the_door_names_make_the_same_budget_learn_and_silence_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*SHORT, "--learning-starts", "90", "--epsilon-ticks", "90", "--out", str(run)]) == 0
    err = capsys.readouterr().err
    assert "no update" not in err and "learning waits for" not in err and "ε anneals" not in err, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] > 0 and "no_updates_reason" not in summary


def test_docs_your_model_s_own_world_is_told_at_the_door_as_the_page_shows(tmp_path) -> None:
    """docs/your-model.md's first run of its own world (`examples/myworlds.py`, 30 s at 30 Hz: 900
    ticks), from `examples/` as the page runs it: its lines are the page's (the simulated clock: exact),
    and ε was sized to a tenth of the run and saved so in config.json."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "your-model.md").read_text()
    command = "nonstop train --env myworlds:Target-v0 --seconds 30 --out runs/target-30s"
    assert command in page
    shown = page.split(command, 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    argv = command.split()[1:-1] + [str(tmp_path / "run")]
    env = {**__import__("os").environ, "PYTHONPATH": str(root / "src"), "COLUMNS": "300"}
    done = subprocess.run(
        [sys.executable, "-m", "nonstop", *argv], cwd=root / "examples", env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    for line in shown:
        said = line.removesuffix("…").rstrip()
        assert any(got.startswith(said) for got in lines), (said, done.stderr)
    assert re.search(r"recent return -\d", shown[-1])
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["algo_settings"]
    assert (saved["epsilon_ticks"], saved["epsilon_fraction"]) == (90, 0.1)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["updates"] == 0


def test_dqn_anneals_epsilon_over_a_tenth_of_the_run_unless_a_span_is_named() -> None:
    import pytest

    from nonstop.learning.dqn import PAPER_PRESETS, DQN, DQNConfig, epsilon_at

    assert DQNConfig().for_run(900).epsilon_ticks == 90  # was 100,000 whatever the run's length
    assert DQNConfig(epsilon_fraction=0.25).for_run(18_000).epsilon_ticks == 4_500
    assert DQNConfig(epsilon_ticks=5_000).for_run(900).epsilon_ticks == 5_000
    assert DQNConfig().for_run(3).epsilon_ticks == 1  # never an empty schedule
    assert DQNConfig.for_family("classic").for_run(900).epsilon_ticks == 10_000  # CartPole's published run keeps its
    for name, preset in PAPER_PRESETS.items():  # the paper's runs keep the schedule they were run with
        assert DQNConfig.for_family("atari", **preset).for_run(900).epsilon_ticks == 100_000, name
    with pytest.raises(ValueError, match=r"for_run"):
        epsilon_at(0, DQNConfig())  # an unsized schedule is refused, not guessed
    for bad in ({"epsilon_fraction": 0.0}, {"epsilon_fraction": 1.5}, {"epsilon_ticks": 0}):
        with pytest.raises(ValueError, match="DQNConfig.epsilon_"):
            DQNConfig(**bad)
    # the door reads the run's schedule: an unsized one is a tenth of the run, so it never outlasts it
    assert DQN(DQNConfig(), (4,), 5).budget_notes(900) == []
    assert "ends at ε 0.991" in DQN(DQNConfig(epsilon_ticks=100_000), (4,), 5).budget_notes(900)[0]


def test_a_run_long_enough_learns_with_no_flag_and_says_what_it_sized(tmp_path) -> None:
    """The page's own world for 40 s (1,200 ticks at 30 Hz): no door note, ε over the first 120 ticks,
    said first and saved, and updates made."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": str(root / "src"), "COLUMNS": "300"}
    argv = ["train", "--env", "myworlds:Target-v0", "--seconds", "40", "--out", str(tmp_path / "run")]
    done = subprocess.run(
        [sys.executable, "-m", "nonstop", *argv], cwd=root / "examples", env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stderr.splitlines()[0]
    assert first == "sized to this run's 1,200 ticks (no flag, world entry or preset sets them): --epsilon-ticks 120"
    assert "learning waits for" not in done.stderr and "ε anneals" not in done.stderr, done.stderr
    assert json.loads((tmp_path / "run" / "config.json").read_text())["algo_settings"]["epsilon_ticks"] == 120
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates"] > 0 and "no_updates_reason" not in summary
