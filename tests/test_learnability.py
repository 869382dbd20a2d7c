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
