"""Self-play seats for continuous learners: SAC on `multi/duel-continuous` (the quick-draw duel with a Box
action), the opponent being SAC's own actor over a snapshot of the learner's parameters, on the virtual clock."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pettingzoo")

from nonstop.cli import main  # noqa: E402
from nonstop.envs.duel import SEATS, ContinuousQuickDraw, QuickDrawDuel  # noqa: E402
from nonstop.realtime.ticklog import SOURCE_AGENT  # noqa: E402

ENV = "multi/duel-continuous"


# ----------------------------------------------------------------------------- the world


def test_the_continuous_duel_draws_above_zero_and_holds_otherwise() -> None:
    env = ContinuousQuickDraw(rounds=1, min_wait=3, max_wait=3, holster=1)
    obs, _ = env.reset(seed=0)
    assert env.action_space("first_0").shape == (1,) and env.action_space("first_0").dtype == np.float32
    # the holster tick ignores a draw; then a draw while the signal is off is a false start
    _, rewards, term, _, _ = env.step({"first_0": np.array([0.9], np.float32), "second_0": np.zeros(1, np.float32)})
    assert rewards == {"first_0": 0.0, "second_0": 0.0} and not term["first_0"]
    _, rewards, term, _, _ = env.step({"first_0": np.zeros(1, np.float32), "second_0": np.array([1e-3], np.float32)})
    assert rewards == {"first_0": 1.0, "second_0": -1.0} and term["second_0"]  # second_0 drew early: it loses
    with pytest.raises(ValueError, match="one finite number"):
        ContinuousQuickDraw(rounds=1).draws(np.array([0.1, 0.2]))


def test_the_continuous_duel_is_the_discrete_one_from_the_same_seed() -> None:
    """Same seed, same rounds: the continuous duel's signals, rewards and ends follow the discrete duel's when
    every draw (1) is played as a positive number and every hold (0) as a non-positive one."""
    rng = np.random.default_rng(3)
    discrete, continuous = QuickDrawDuel(rounds=3), ContinuousQuickDraw(rounds=3)
    a, _ = discrete.reset(seed=11)
    b, _ = continuous.reset(seed=11)
    while discrete.agents:
        moves = {seat: int(rng.random() < 0.03) for seat in SEATS}
        floats = {
            seat: np.array([rng.uniform(0.01, 1) if m else -rng.uniform(0, 1)], np.float32) for seat, m in moves.items()
        }
        a, ra, ta, _, _ = discrete.step(moves)
        b, rb, tb, _, _ = continuous.step(floats)
        assert ra == rb and ta == tb and all(np.array_equal(a[s], b[s]) for s in a)
    assert not continuous.agents


def test_the_realtime_continuous_duel_passes_pettingzoos_api_test() -> None:
    from pettingzoo.test import parallel_api_test

    import nonstop

    env = nonstop.make_parallel(ENV, clock="virtual", env_kwargs={"rounds": 2, "min_wait": 20, "max_wait": 25})
    try:
        parallel_api_test(env, num_cycles=1000)
    finally:
        env.close()


# ----------------------------------------------------------------------------- self-play with SAC


def _sac_settings() -> object:
    from nonstop.learning.sac import SACConfig

    return SACConfig(hidden=(16, 16), batch_size=16, learning_starts=40, replay_capacity=5000)


def test_sac_self_play_opponent_acts_with_floats_from_its_snapshot_not_the_learner(monkeypatch, no_shm_leak) -> None:
    """Both seats act with float vectors (the world sees them); the opponent's actor holds snapshot 0's
    parameters (the only one: snapshots every 100 s) while the learner's have moved on with its updates."""
    from nonstop.experiment import TrainConfig, TrainingRun
    from nonstop.experiment.selfplay import SelfPlayPart
    from nonstop.learning.sac import SACPolicy
    from nonstop.learning.weights import flat_parameters

    seen: dict[str, list[np.ndarray]] = {seat: [] for seat in SEATS}
    step = ContinuousQuickDraw.step

    def spy(self: ContinuousQuickDraw, actions: dict) -> tuple:
        for seat, action in actions.items():
            seen[seat].append(action)
        return step(self, actions)

    monkeypatch.setattr(ContinuousQuickDraw, "step", spy)
    opponents: list[object] = []
    build = SelfPlayPart._policy

    def keep(self: SelfPlayPart, run: object, i: int) -> object:
        policy = build(self, run, i)
        opponents.append(policy)
        return policy

    monkeypatch.setattr(SelfPlayPart, "_policy", keep)
    cfg = TrainConfig(
        env=ENV,
        env_kwargs={"rounds": 2},
        algo="sac",
        algo_settings=_sac_settings(),
        seconds=5,
        self_play=True,
        snapshot_every=100,
        latency="2t",
        opponent_latency="3t",
    )
    run = TrainingRun(cfg)
    try:
        run.build().start()
        run.advance(5.0)
        run.quiesce()
        learner_now = run.learning.current_params()
        pool = run.part("self_play").self_play.pool
        snapshot0 = pool.snapshots[0].params.copy()
        updates = run.state.updates
        actors = [getattr(p, "base", p) for p in opponents]
        held = [flat_parameters(a.model) for a in actors]
        versions = [a.version for a in actors]
    finally:
        run.teardown()
    assert pool.ids == [0] and updates > 50
    assert actors and all(isinstance(a, SACPolicy) for a in actors)
    assert versions == [1] * len(actors)  # snapshot 0's version (id + 1): loaded, never the learner's
    assert all(np.array_equal(h, snapshot0) for h in held)
    assert not np.allclose(learner_now, snapshot0)  # the learner learned: had the opponent read θ, it would differ
    log = run.world.tick_log
    for seat in SEATS:
        acted = log.seat(seat)["source"] == SOURCE_AGENT
        assert acted.sum() > 200, seat  # both seats' agents acted on most ticks
        floats = [a for a in seen[seat] if isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (1,)]
        assert len(floats) == len(seen[seat]) > 200, seat
        assert len({float(a[0]) for a in floats}) > 50, seat  # sampled numbers, not β's zeros


def test_sac_self_play_from_the_command_line_writes_matches_and_a_self_play_report(
    tmp_path, capsys, no_shm_leak
) -> None:
    from nonstop.studies.report import build_report

    out = tmp_path / "run"
    args = [
        "train",
        "--algo",
        "sac",
        "--env",
        ENV,
        "--env-arg",
        "rounds=2",
        "--self-play",
        "--clock",
        "virtual",
        "--seconds",
        "6",
        "--snapshot-every",
        "2",
        "--latency",
        "2t",
        "--learning-starts",
        "40",
        "--batch-size",
        "16",
        "--hidden",
        "16",
        "16",
        "--replay-capacity",
        "5000",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = "".join(capsys.readouterr())
    assert "self-play: the learner on first_0, a snapshot of it on second_0" in printed and "α" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == "sac" and config["self_play"] is True
    summary = json.loads((out / "summary.json").read_text())["self_play"]
    assert summary["snapshots"] == [0, 1, 2, 3] and summary["opponent_agent_ticks"] > 200
    report = build_report(out)
    figures = report.summary["matches"]
    assert figures["matches"] >= 4 and 0.0 <= figures["win_rate"] <= 1.0 and figures["opponents_faced"] >= 2
    assert report.plots["win_rate"].stat().st_size > 5000
