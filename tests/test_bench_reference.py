"""``nonstop bench reference`` in quick mode: nonstop's SAC on the ordinary MDP beside SB3's, and what it
documents; both sides must learn Pendulum's swing-up to a comparable degree within the quick budget."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from nonstop.bench import reference

pytest.importorskip("stable_baselines3")


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    reference.add_arguments(parser)
    args = parser.parse_args(argv)
    args.quick, args.json = True, True
    return args


def test_the_settings_are_one_source_for_both_sides() -> None:
    cfg = reference.settings_for("sac", "Pendulum-v1", quick=False, steps=10_000)
    kw = reference.sb3_kwargs("sac", cfg, 10_000)
    assert cfg.learning_starts == kw["learning_starts"] == 1000 and cfg.random_start  # a tenth of the run
    assert kw["learning_rate"] == cfg.lr and kw["batch_size"] == cfg.batch_size and kw["tau"] == cfg.tau
    assert kw["ent_coef"] == f"auto_{cfg.alpha}" and kw["policy_kwargs"]["net_arch"] == list(cfg.hidden)
    assert kw["train_freq"] == kw["gradient_steps"] == 1  # one update a step, as nonstop's cap
    assert reference.settings_for("sac", "HalfCheetah-v5", quick=False, steps=100_000).learning_starts == 10_000
    dqn = reference.settings_for("dqn", "CartPole-v1", quick=False, steps=50_000)
    kw = reference.sb3_kwargs("dqn", dqn, 50_000)
    assert kw["gradient_steps"] / kw["train_freq"] == dqn.updates_per_transition == 0.5
    assert kw["exploration_fraction"] == pytest.approx(0.16)
    assert kw["target_update_interval"] == kw["train_freq"] == 256  # SB3 counts env steps: one copy a burst


def test_a_world_without_a_reference_and_bad_sizes_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="no reference run for --algo sac --env Hopper-v5: it covers"):
        reference.plan_of(_args(["--env", "Hopper-v5"]))
    with pytest.raises(ValueError, match="--steps must be a whole number >= 1"):
        reference.plan_of(_args(["--steps", "0"]))
    with pytest.raises(ValueError, match="--sides takes nonstop, sb3 or both"):
        reference.plan_of(_args(["--sides", "tianshou"]))


def test_the_figures_are_read_at_checkpoints_relative_to_the_random_policy() -> None:
    assert reference.return_at([1.0, 2.0, 6.0], [10, 20, 30], 9, 2) is None
    assert reference.return_at([1.0, 2.0, 6.0], [10, 20, 30], 30, 2) == 4.0
    assert reference.ratio(-300.0, -200.0, -1200.0) == pytest.approx(0.9)
    assert reference.ratio(-300.0, -1300.0, -1200.0) is None  # the reference did not beat random: no ratio
    iv = reference.interval([1.0, 2.0, 3.0])
    assert iv["low"] < 2.0 < iv["high"] and reference.interval([5.0])["low"] is None


@pytest.mark.slow
def test_quick_run_both_sides_learn_pendulum_comparably(capsys) -> None:
    from nonstop.cli import main

    assert main(["bench", "reference", "--quick", "--json", "--jobs", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1], parse_constant=None)
    assert result["bench"] == "reference" and result["quick"] and result["machine"]["cpu_count"]
    assert result["algo"] == "sac" and result["env"] == "Pendulum-v1" and result["seeds"] == [0]
    json.dumps(result, allow_nan=False)
    random = result["random_return"]
    assert -1600 < random < -900  # Pendulum's random policy
    for side in ("nonstop", "sb3"):
        s = result["sides"][side]
        assert [c["step"] for c in s["returns"]][-1] == result["steps"]
        assert s["updates"][0] >= result["steps"] - result["settings"]["learning_starts"] - 5
        assert s["updates_per_s"]["mean"] > 0 and s["wall_s"][0] > 0
        last = s["returns"][-1]["mean"]
        # each side learned: its last episodes are far better than the random policy's
        assert last > random + 400, (side, last, random)
    assert isinstance(result["meets_target"], bool) and math.isfinite(result["ratio"])
    assert 0.6 < result["ratio"] < 1.6  # comparable: neither side is far ahead of the other
