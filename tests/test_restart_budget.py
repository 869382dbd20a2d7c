"""A learner or an inference worker that keeps dying ends the run cleanly (issue 14), on the virtual clock.

Occasional deaths are restarted; past ``--max-restarts`` within ``--restart-window`` the run ends:
one line naming the part and its cause, ``summary.json`` incomplete with that reason, the newest
good checkpoint kept, exit status 1.
"""

from __future__ import annotations

import json

import pytest

from nonstop.cli import main
from nonstop.learning.checkpoint import latest_checkpoint
from nonstop.learning.dqn import DQNConfig
from nonstop.realtime.lifeline import PartFailed, RestartBudget
from nonstop.experiment import TrainConfig, TrainingRun

ARGS = [
    "train",
    "--env",
    "CartPole",
    "--learning-starts",
    "20",
    "--batch-size",
    "8",
    "--progress-every",
    "1",
    "--checkpoint-every",
    "2",
    "--seconds",
    "30",
]


def test_restart_budget_counts_only_the_window():
    budget = RestartBudget(3, window_s=10.0)
    assert [budget.spend(t) for t in (0, 1, 2, 3)] == [True, True, True, False]
    assert budget.spend(10.5)  # the restart at 0 left the window (a refused one never counts)
    assert not budget.spend(10.6)
    with pytest.raises(ValueError, match="max_restarts"):
        RestartBudget(-1)
    with pytest.raises(ValueError, match="window_s"):
        RestartBudget(3, window_s=0)


def _run(**kw) -> TrainingRun:
    cfg = TrainConfig(
        env="CartPole",
        seconds=10.0,
        algo_settings=DQNConfig.for_family("classic", learning_starts=20, batch_size=8),
        **kw,
    )
    return TrainingRun(cfg).build().start()


def test_a_learner_killed_now_and_then_is_restarted_and_the_run_goes_on(no_shm_leak):
    run = _run(max_restarts=3, restart_window=60.0)
    try:
        for _ in range(3):
            run.advance(1.0)
            run.learners.kill(0)
        before = run.updates
        run.advance(2.0)
        assert run.learners.restarts == [3] and run.learners.failure is None
        assert run.updates > before  # the restarted learner learns again from the shared weights
    finally:
        run.teardown()


def test_a_learner_that_keeps_dying_ends_the_run_past_its_budget(no_shm_leak):
    run = _run(max_restarts=2, restart_window=60.0)
    try:
        run.advance(1.0)
        with pytest.raises(PartFailed, match=r"learner 0 kept dying: 3 deaths, more than 2 restarts within 60 s"):
            for _ in range(4):
                run.learners.kill(0)
                run.advance(0.5)
        kinds = [what.split(" ")[0] for _, _, what in run.learners.events]
        assert kinds == ["died", "restarted", "died", "restarted", "died", "gave"], run.learners.events
    finally:
        run.teardown()


def test_deaths_spread_wider_than_the_window_never_exhaust_it(no_shm_leak):
    run = _run(max_restarts=1, restart_window=1.0)
    try:
        for _ in range(4):  # one death every 1.5 world seconds: each alone in its 1 s window
            run.advance(1.5)
            run.learners.kill(0)
        run.advance(0.5)
        assert run.learners.failure is None and run.learners.restarts == [4]
    finally:
        run.teardown()


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_nonstop_train_ends_cleanly_when_a_learner_keeps_dying(tmp_path, capsys, monkeypatch, no_shm_leak):
    from nonstop.learning import learners

    def broken(self):  # every update raises, as a learner with a bad model or an OOM loop would
        raise MemoryError("cannot allocate the batch (simulated)")

    monkeypatch.setattr(learners.Learner, "gradient", broken)
    out = tmp_path / "run"
    code = main([*ARGS, "--out", str(out), "--max-restarts", "3", "--restart-window", "60"])
    err = capsys.readouterr().err
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("nonstop: error:")]
    assert len(errors) == 1 and "learner 0 kept dying: 4 deaths, more than 3 restarts within 60 s" in errors[0], err
    assert "MemoryError: cannot allocate the batch (simulated)" in errors[0]
    summary = _summary(out)
    assert summary["complete"] is False and summary["reason"].startswith("learner 0 kept dying"), summary
    assert latest_checkpoint(out) is not None  # the final checkpoint: the shared weights are whole
    assert summary["env_ticks_total"] < 30 * 50  # it stopped long before its 30 world seconds


def test_nonstop_train_ends_cleanly_when_inference_workers_keep_dying(tmp_path, capsys, monkeypatch, no_shm_leak):
    from nonstop.experiment import registry

    policy = registry.lookup("policy_backend", "thread")

    class Crashing:
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def act(self, obs):
            self.calls += 1
            if self.calls > 20:
                raise RuntimeError("model process crashed (simulated)")
            return self.inner.act(obs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    # a crashing backend, put in the registry's place of the thread one (as a new backend would be registered)
    monkeypatch.setitem(registry._BUILTIN["policy_backend"], "thread", lambda run, i: Crashing(policy(run, i)))
    out = tmp_path / "run"
    code = main([*ARGS, "--out", str(out), "--max-restarts", "4", "--restart-window", "60"])
    err = capsys.readouterr().err
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("nonstop: error:")]
    assert len(errors) == 1 and "inference worker 0 kept dying" in errors[0], err
    assert "more than 4 restarts within 60 s" in errors[0] and "model process crashed (simulated)" in errors[0]
    summary = _summary(out)
    assert summary["complete"] is False and summary["reason"].startswith("inference worker 0 kept dying"), summary
    assert latest_checkpoint(out) is not None
