"""`nonstop train` hands one typed request down (issue 41): the library resolves it without argparse."""

from __future__ import annotations

import argparse
import json

import pytest

from nonstop.commands.train import add_arguments, request_from_args, settings_from_args
from nonstop.experiment.config import TrainConfig
from nonstop.experiment.request import TrainRequest, Typed, resolve, resume_config, saved_algorithm, train


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(list(argv))
    args.argv = ["train", *argv]  # what the CLI sets: the flags typed
    return args


def test_the_command_hands_its_texts_down_and_the_library_reads_each_with_its_part():
    """The command names each flag as the config's field and keeps the texts another part defines as typed;
    `resolve` reads them (the world's id with its module, KEY=VALUE items, trackers, a size)."""
    request = request_from_args(
        _args("--env", "Target1D-v0", "--env-module", "mypkg.worlds", "--env-arg", "tick_hz=20", "--track", "wandb")
    )
    assert (request.env, request.env_module, request.env_args, request.track) == (
        "Target1D-v0",
        "mypkg.worlds",
        ("tick_hz=20",),
        ("wandb",),
    )
    assert "track" not in request.record and request.typed == frozenset()
    plan = resolve(
        TrainRequest(
            env="CartPole",
            env_module="nonstop.envs.duel",  # a module that imports cleanly; CartPole stays nonstop's
            env_args=("max_episode_steps=50",),
            scheduler_args=("cap=8",),
            trim_above="1MiB",
            run={"seconds": 3.0, "clock": "wall", "backend": "process", "scheduler": "fill"},
            track=("wandb,mlflow", "wandb"),
        )
    )
    assert plan.cfg.env == "nonstop.envs.duel:CartPole" and plan.cfg.env_kwargs["max_episode_steps"] == 50
    assert (plan.cfg.scheduler_args, plan.cfg.trim_above, plan.rec.track) == ({"cap": 8}, 2**20, ("wandb", "mlflow"))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ({"env_args": ("tick_hz",)}, r"^--env-arg takes KEY=VALUE, got 'tick_hz'$"),
        ({"scheduler_args": ("cap",)}, r"^--scheduler-arg takes KEY=VALUE, got 'cap'$"),
        ({"track": ("tb",)}, r"^--track 'tb' is not a tracker: choose from wandb, mlflow \(TensorBoard is always on"),
        ({"trim_above": "lots"}, r"^--trim-above takes bytes with an optional unit"),
        ({"trim_above": "4MiB"}, r"^--trim-above 4MiB trims worker processes: it needs --clock wall and --backend"),
        ({"env": "x:Y", "env_module": "z"}, r"^--env x:Y and --env-module z name two modules: give one"),
    ],
)
def test_a_text_the_library_cannot_read_is_the_flags_own_line_before_any_run_directory(tmp_path, text, said):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=said):
        train(TrainRequest(**text, record={"out": str(out)}), console=None)
    assert not out.exists()


def test_a_new_run_resolves_from_a_request_alone():
    """No argparse below the command: the world's entry, the preset and the settings typed, in that order."""
    plan = resolve(TrainRequest(env="CartPole", run={"seconds": 3.0}, settings={"batch_size": 8}))
    assert (plan.cfg.env, plan.cfg.seconds, plan.cfg.algo_settings.batch_size) == ("CartPole", 3.0, 8)
    assert plan.intro[0].startswith("settings for CartPole from nonstop/learning/hyperparams/dqn.yml")
    assert plan.overrides == [] and not plan.rec.resume
    with pytest.raises(ValueError, match="not a setting of --algo dqn"):
        resolve(TrainRequest(env="CartPole", settings={"no_such_setting": 1}))


def test_a_resumed_request_keeps_the_saved_config_and_takes_only_what_was_typed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(TrainConfig(env="CartPole", seconds=4.0, seed=5).to_dict()))
    request = request_from_args(_args("--resume", str(run), "--seconds", "10", "--seed", "0"))
    assert request.typed >= {"seconds", "seed"} and request.record["out"] == str(run)
    plan = resolve(request)
    assert (plan.cfg.seconds, plan.cfg.seed, plan.rec.resume) == (10.0, 0, True)
    assert plan.overrides == ["seconds: 4.0 → 10.0", "seed: 5 → 0"] and plan.intro == ()
    assert settings_from_args(_args("--resume", str(run)))[2] == []  # nothing typed: the saved config as it was
    with pytest.raises(ValueError, match="is a --algo dqn run"):
        resolve(request_from_args(_args("--resume", str(run), "--algo", "sac")))


def test_a_resumed_config_takes_only_what_was_typed_and_says_each_change():
    """The merge a resumed request comes to sits beside its resolution (`request.resume_config`): a setting
    typed now goes over the saved one, named with its algorithm; what was not typed keeps the saved value."""
    saved = resolve(TrainRequest(env="CartPole", run={"seconds": 4.0, "seed": 5})).cfg.to_dict()
    fresh = resolve(TrainRequest(env="CartPole", run={"seconds": 9.0, "seed": 3}, settings={"batch_size": 8})).cfg
    cfg, lines = resume_config(saved, fresh, Typed(run={"seconds"}, settings={"batch_size"}), where="runs/x")
    assert (cfg.seconds, cfg.seed, cfg.algo_settings.batch_size, cfg.algo_settings.gamma) == (9.0, 5, 8, 0.99)
    assert lines == ["seconds: 4.0 → 9.0", "dqn.batch_size: 64 → 8"]
    assert saved_algorithm(saved, None, "runs/x") == "dqn"
    with pytest.raises(ValueError, match=r"^runs/x is a --algo dqn run: it resumes as one \(start a new run"):
        saved_algorithm(saved, "sac", "runs/x")
