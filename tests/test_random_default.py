"""A random β (``default="random"``, ``nonstop train --default random``): the paper's authors'
default behaviour. Virtual clock, no agent: every tick is β's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nonstop.realtime.defaults import make_default
from nonstop.realtime.host import Session


def _beta_actions(env: str, seed: int, seconds: float = 2.0, **kw) -> dict[str, np.ndarray]:
    with Session(env, clock="virtual", seed=seed, default="random", **kw) as world:
        world.run_for(seconds)
        log = world.tick_log
        return {
            name: np.asarray(log[name]) for name in log.columns() if name.endswith("action") or name.endswith("source")
        }


def test_random_beta_draws_every_action_of_the_space_reproducibly():
    a = _beta_actions("CartPole", seed=3)
    b = _beta_actions("CartPole", seed=3)
    c = _beta_actions("CartPole", seed=4)
    assert (a["source"] == 0).all()  # no agent: all β
    actions = a["action"]
    assert set(np.unique(actions)) == {0.0, 1.0}  # both actions drawn, none outside the space
    assert 0.3 < actions.mean() < 0.7  # uniform, not stuck on one
    np.testing.assert_array_equal(actions, b["action"])  # the session's seed fixes the draws
    assert not np.array_equal(actions, c["action"])


def test_random_beta_per_seat_draws_independently_within_each_seats_space():
    acts = _beta_actions("multi/duel", seed=0)
    first, second = acts["action"], acts["seat1_action"]
    assert len(np.unique(first)) > 1 and len(np.unique(second)) > 1
    assert not np.array_equal(first, second)  # each seat its own generator


def test_unbound_random_beta_and_bad_names_are_clear_errors():
    beta = make_default("random", noop_action=0)
    with pytest.raises(RuntimeError, match="bind"):
        beta(None)
    with pytest.raises(ValueError, match="noop, repeat, random"):
        Session("CartPole", clock="virtual", default="sometimes")  # never entered: it fails at the door


def test_train_default_random_flag(tmp_path, capsys):
    from nonstop.cli import main

    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "--env",
            "CartPole",
            "--seconds",
            "3",
            "--latency",
            "5t",
            "--default",
            "random",
            "--out",
            str(out),
            "--progress-every",
            "1",
            "--learning-starts",
            "32",
        ]
    )
    assert rc == 0
    assert json.loads((out / "config.json").read_text())["default"] == "random"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--env", "CartPole", "--default", "sometimes"])
    assert exit_.value.code == 2
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err
