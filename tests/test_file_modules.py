"""Files from elsewhere import nothing (issue 40, finding 10).

A replay's header and a run's ``config.json`` may name their world as ``module:Id``. A downloaded
replay (or run) beside an ``evil.py`` must not run it: ``nonstop replay verify``, ``train --resume``
and ``export`` refuse such a file in one line naming the module and ``--trust-module``; with the
flag they import it from ``sys.path`` as it stands, never from the current directory. Each test's
``evil.py`` writes a marker file when imported, so "nothing ran" is checked, not assumed.
"""

from __future__ import annotations

import json
import sys

import gymnasium
import numpy as np
import pytest

from nonstop.cli import main
from nonstop.envs import registry

EVIL = """\
import pathlib

import gymnasium

pathlib.Path({marker!r}).write_text("imported")
gymnasium.register("Env-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=500)
"""


def _forget_evil() -> None:
    sys.modules.pop("evil", None)
    gymnasium.registry.pop("Env-v0", None)
    registry._MODULE_IDS.pop("evil", None)


@pytest.fixture
def downloads(tmp_path, monkeypatch):
    """The current directory holds what the user downloaded: an ``evil.py`` (not on ``sys.path``)."""
    here = tmp_path / "downloads"
    here.mkdir()
    marker = tmp_path / "evil-ran"
    (here / "evil.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(here))])
    monkeypatch.setenv("PYTHONPATH", "")
    _forget_evil()
    yield here, marker
    _forget_evil()


def _replay(path, env: str) -> None:
    """A three-tick CartPole replay whose header names ``env``."""
    from nonstop.server.replay import FORMAT, Replay, ReplayRecorder, seat_log_columns

    recorder = ReplayRecorder(gymnasium.make("CartPole-v1"))
    recorder.reset(seed=3)
    for action in (0, 1, 1):
        recorder.step(action)
    cols = recorder.columns.read(3)
    header = {"format": FORMAT, "ticks": 3, "action_width": cols["action_width"], "env": env, "seed": 3}
    Replay(
        header=header,
        columns={name: np.zeros(3) for name in seat_log_columns(1)},
        actions=cols["actions"],
        step_hashes=cols["step_hashes"],
        reset_steps=cols["reset_steps"],
        reset_hashes=cols["reset_hashes"],
    ).save(path)


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nonstop: error: "), err
    return lines[0]


def test_replay_verify_imports_no_module_the_replay_names(downloads, capsys):
    here, marker = downloads
    _replay(here / "x.npz", "evil:Env-v0")
    for verb in ("verify", "video"):
        assert main(["replay", verb, "x.npz"]) == 2
        line = _one_error(capsys.readouterr().err)
        assert "replay x.npz names the module 'evil' (its world is 'evil:Env-v0')" in line, line
        assert "pass --trust-module to import it" in line and "the current directory is never searched" in line
    assert not marker.exists()


def test_trusting_a_replay_imports_from_the_path_never_the_current_directory(downloads, capsys, monkeypatch):
    here, marker = downloads
    _replay(here / "x.npz", "evil:Env-v0")
    assert main(["replay", "verify", "x.npz", "--trust-module"]) == 2  # evil.py is only beside the file
    line = _one_error(capsys.readouterr().err)
    assert "cannot import module 'evil'" in line and "it must be on PYTHONPATH" in line, line
    assert not marker.exists() and str(here) not in sys.path
    monkeypatch.syspath_prepend(str(here))  # the user puts it on the path: trusted, it is imported
    assert main(["replay", "verify", "x.npz", "--trust-module"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert marker.exists()


def test_a_replay_of_a_registered_world_needs_no_trust(downloads, capsys):
    here, _ = downloads
    _replay(here / "x.npz", "CartPole-v1")
    assert main(["replay", "verify", "x.npz"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.fixture
def evil_run(downloads, capsys):
    """A finished CartPole run whose config.json was edited to name ``evil:Env-v0``."""
    here, marker = downloads
    args = ["train", "--env", "CartPole", "--seconds", "1", "--learning-starts", "20", "--batch-size", "8"]
    assert main([*args, "--out", "run"]) == 0
    config = here / "run" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "env": "evil:Env-v0"}))
    capsys.readouterr()
    return here, marker


def test_resume_imports_no_module_the_config_names(evil_run, capsys, monkeypatch, no_shm_leak):
    here, marker = evil_run
    assert main(["train", "--resume", "run", "--seconds", "2"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "run/config.json names the module 'evil'" in line and "pass --trust-module" in line, line
    assert "or name it yourself: --env-module evil" in line
    assert main(["export", "run"]) == 2
    assert "run/config.json names the module 'evil'" in _one_error(capsys.readouterr().err)
    assert not marker.exists()
    monkeypatch.syspath_prepend(str(here))
    assert main(["train", "--resume", "run", "--seconds", "2", "--trust-module"]) == 0, capsys.readouterr().err
    assert marker.exists()
    assert json.loads((here / "run" / "summary.json").read_text())["complete"] is True


def test_a_module_the_user_names_on_resume_is_their_own_choice(evil_run, capsys, no_shm_leak):
    here, marker = evil_run
    assert main(["train", "--resume", "run", "--seconds", "2", "--env-module", "evil"]) == 0, capsys.readouterr().err
    assert marker.exists()  # typed by the user: found beside the command, as `--env MODULE:ID` is


def test_trust_module_without_resume_is_one_line(capsys):
    assert main(["train", "--env", "CartPole", "--trust-module", "--seconds", "1"]) == 2
    assert "--trust-module trusts the module a resumed run's config.json names" in _one_error(capsys.readouterr().err)


def test_report_builds_no_world_a_config_names(downloads):
    from nonstop.studies.report import _tau_m

    _, marker = downloads
    assert _tau_m(None, {"env": "evil:Env-v0"}) is None  # no tick log: the plots fall back to wall time
    assert not marker.exists()
