"""Settings known to learn per world (nonstop/learning/hyperparams/<algo>.yml) and the user's own (--hyperparams)."""

from __future__ import annotations

import argparse
import json
from importlib import resources

import pytest

from nonstop.cli import main
from nonstop.commands.train import add_arguments, config_from_args
from nonstop.experiment.registry import lookup, names
from nonstop.learning.hyperparams import read_file, shipped_file, world_entry


def _config(*argv: str):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return config_from_args(p.parse_args(list(argv)))


SHIPPED = sorted(
    f.name[: -len(".yml")]
    for f in resources.files("nonstop.learning").joinpath("hyperparams").iterdir()
    if f.name.endswith(".yml")
)


def test_the_package_ships_settings_for_known_algorithms_only():
    assert "dqn" in SHIPPED and set(SHIPPED) <= set(names("algo")), SHIPPED


@pytest.mark.parametrize("algo", SHIPPED)
def test_every_shipped_entry_says_what_it_reached_and_how_and_builds_its_algorithms_config(algo):
    file = shipped_file(algo)
    entries = read_file(file.read_text(), file.name, shipped=True)  # refuses an entry without both
    assert entries
    cls = lookup("algo", algo).config_class
    for env in entries:
        entry = world_entry(algo, env, config_class=cls)
        assert entry is not None and entry.reached and entry.command.startswith("nonstop ") and env in entry.command
        cls.for_family("classic", **entry.settings)  # each value is one its config accepts
        said = entry.line()  # the run's first line: what it sets, never an empty list
        assert f"from {entry.source}: " in said and f"from {entry.source}: ;" not in said, said


def test_a_users_file_replaces_the_shipped_one_and_a_typed_flag_wins_over_both(tmp_path):
    mine = tmp_path / "mine.yml"
    mine.write_text("CartPole:\n  lr: 0.002\n  batch_size: 32\n  hidden: [16, 16]\n")
    dqn = _config("--env", "CartPole", "--hyperparams", str(mine), "--batch-size", "8").algo_settings
    assert (dqn.lr, dqn.batch_size, dqn.hidden) == (0.002, 8, (16, 16))
    assert dqn.target_update == 500  # not in the file: the classic family's value
    shipped = _config("--env", "CartPole").algo_settings
    assert (shipped.lr, shipped.batch_size) == (5e-4, 64)


def test_an_entry_keyed_module_id_applies_however_the_world_is_named(tmp_path):
    """``--env ID --env-module MOD`` names the world ``MOD:ID``, as ``--env MOD:ID`` does: the entry keyed so
    applies to both, and the bare id's entry to neither (`world_entry` looks the world up by the run's name)."""
    mine = tmp_path / "mine.yml"
    mine.write_text('"nonstop.envs.duel:CartPole":\n  batch_size: 8\nCartPole:\n  batch_size: 16\n')
    apart = _config("--env", "CartPole", "--env-module", "nonstop.envs.duel", "--hyperparams", str(mine))
    joined = _config("--env", "nonstop.envs.duel:CartPole", "--hyperparams", str(mine))
    bare = _config("--env", "CartPole", "--hyperparams", str(mine))
    assert (apart.env, apart.algo_settings.batch_size) == ("nonstop.envs.duel:CartPole", 8)
    assert (joined.env, joined.algo_settings.batch_size) == ("nonstop.envs.duel:CartPole", 8)
    assert (bare.env, bare.algo_settings.batch_size) == ("CartPole", 16)
    entry = world_entry("dqn", "CartPole", str(mine), env_module="nonstop.envs.duel")
    assert entry is not None and entry.env == "nonstop.envs.duel:CartPole" and entry.settings == {"batch_size": 8}
    with pytest.raises(ValueError, match="name two modules"):
        world_entry("dqn", "other:CartPole", str(mine), env_module="nonstop.envs.duel")


def test_a_bad_file_is_one_line_naming_it_and_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("CartPole:\n  learning_rate: 0.01\n")
    with pytest.raises(ValueError, match=r"bad.yml: CartPole: learning_rate is not a setting of DQNConfig"):
        _config("--env", "CartPole", "--hyperparams", str(bad))
    bad.write_text("CartPole: [1, 2\n")
    with pytest.raises(ValueError, match="bad.yml is not YAML"):
        _config("--env", "CartPole", "--hyperparams", str(bad))
    with pytest.raises(ValueError, match="cannot read it"):
        _config("--env", "CartPole", "--hyperparams", str(tmp_path / "none.yml"))
    with pytest.raises(ValueError, match="must say reached and command"):
        read_file("CartPole:\n  lr: 0.1\n", "shipped.yml", shipped=True)


def test_the_run_says_where_its_settings_came_from_and_keeps_them_in_config_json(tmp_path, capsys):
    mine = tmp_path / "mine.yml"
    mine.write_text("CartPole:\n  learning_starts: 60\n  batch_size: 8\n")
    run = tmp_path / "run"
    assert main(["train", "--env", "CartPole", "--seconds", "2", "--hyperparams", str(mine), "--out", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"settings for CartPole from {mine}: learning_starts 60, batch_size 8" in err
    saved = json.loads((run / "config.json").read_text())["algo_settings"]
    assert (saved["learning_starts"], saved["batch_size"]) == (60, 8)
    argv = ["train", "--resume", str(run), "--seconds", "3", "--hyperparams", str(mine)]
    assert main(argv) == 2
    assert "sets a new run's settings" in capsys.readouterr().err
