"""`nonstop train --help` in groups a reader can find their way through, and `--algo NAME --help`
showing that algorithm's settings only."""

from __future__ import annotations

import re

import pytest

from nonstop.cli import main

GROUPS = [
    "world:",
    "realtime and clock:",
    "inference and scheduler:",
    "learners and backends:",
    "algorithm (",
    "DQN settings (",
    "self-play and seats (",
    "run files:",
]


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        main(["train", *argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def _section(text: str, title: str) -> str:
    start = text.index("\n" + title)
    end = text.find("\n\n", start + 1)
    return text[start : len(text) if end < 0 else end]


def test_help_is_grouped_in_order_and_each_flag_sits_in_its_group(capsys):
    text = _help(capsys)
    where = [text.index("\n" + title) for title in GROUPS]
    assert where == sorted(where), GROUPS
    assert "--seconds" in _section(text, "realtime and clock:")
    assert "--scheduler-arg" in _section(text, "inference and scheduler:")
    assert "--learner-backend" in _section(text, "learners and backends:")
    assert "--delay-aware" in _section(text, "algorithm (")
    assert "--preset" in _section(text, "DQN settings (")
    assert "--agent-id" in _section(text, "self-play and seats (")
    assert "--resume" in _section(text, "run files:")
    flat = re.sub(r"\s+", " ", text)
    assert "linear ε anneal" in flat and "[--algo dqn]" in flat  # whose setting it is
    assert "[--algo bpql, dcac, dcac-q, dmsac, dqn, rtac, sac, td3]" in flat  # --lr is read by every algorithm


def test_help_after_algo_shows_that_algorithms_settings_only(capsys):
    sac = re.sub(r"\s+", " ", _help(capsys, "--algo", "sac"))
    assert "--tau FLOAT" in sac and "--lr FLOAT" in sac and "--learning-starts" in sac
    for dqn_only in ("--epsilon-ticks", "--target-update", "--preset", "--double"):
        assert dqn_only + " " not in sac.split("usage:")[1].split("options:")[1], dqn_only
    dqn = re.sub(r"\s+", " ", _help(capsys, "--algo", "dqn"))
    assert "--epsilon-ticks INT" in dqn and "--tau FLOAT" not in dqn
