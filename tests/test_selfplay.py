"""Realtime self-play (`nonstop train --self-play`, `nonstop.experiment.selfplay`): the learner against a pool of
its own past snapshots on a two-seat world, each side at its own latency, on the virtual clock."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pettingzoo")

from nonstop.cli import main  # noqa: E402
from nonstop.learning.checkpoint import latest_checkpoint  # noqa: E402
from nonstop.learning.dqn import DQNConfig  # noqa: E402
from nonstop.learning.runlog import MATCH_COLUMNS, read_columns  # noqa: E402
from nonstop.realtime.ticklog import SOURCE_AGENT  # noqa: E402
from nonstop.experiment.selfplay import SelfPlay, SnapshotPool, check_two_seats, match_figures  # noqa: E402

# two rounds a match (about half a world second while the learner still false-starts), a snapshot every 2 s
ARGS = [
    "train",
    "--env",
    "multi/duel",
    "--env-arg",
    "rounds=2",
    "--self-play",
    "--snapshot-every",
    "2",
    "--pool-size",
    "3",
    "--latency",
    "2t",
    "--opponent-latency",
    "5t",
    "--learning-starts",
    "50",
    "--batch-size",
    "16",
    "--replay-capacity",
    "20000",
    "--progress-every",
    "2",
    "--checkpoint-every",
    "4",
    "--epsilon-ticks",  # the schedule these pool checks were written with, not one sized to each run
    "100000",
]


# ----------------------------------------------------------------------------- the pool, pure


def _params(value: float, n: int = 4) -> np.ndarray:
    return np.full(n, value, np.float32)


def test_the_pool_keeps_the_newest_snapshots_and_copies_them():
    pool = SnapshotPool(max_size=3, seed=1)
    source = _params(0)
    first = pool.add(source, env_tick=0, updates=0)
    source[:] = 9  # the pool holds a copy: the learner's buffer is reused for the next version
    assert first.params.tolist() == [0, 0, 0, 0]
    for i in range(1, 6):
        pool.add(_params(i), env_tick=60 * i, updates=i)
    assert pool.ids == [3, 4, 5] and pool.next_id == 6 and len(pool) == 3
    assert [s.env_tick for s in pool.snapshots] == [180, 240, 300]
    with pytest.raises(ValueError, match="does not fit"):
        pool.add(_params(0, n=5), env_tick=0, updates=0)
    with pytest.raises(ValueError, match="pool size must be an integer >= 1"):
        SnapshotPool(0)
    with pytest.raises(ValueError, match="uniform, latest.*'newest'"):
        SnapshotPool(3, "newest")
    with pytest.raises(RuntimeError, match="empty"):
        SnapshotPool(3).opponent_for(0)


def test_uniform_and_latest_weightings_draw_as_documented():
    uniform, latest = SnapshotPool(4, "uniform", seed=0), SnapshotPool(4, "latest", seed=0)
    for pool in (uniform, latest):
        for i in range(4):
            pool.add(_params(i), env_tick=i, updates=i)
    assert uniform.probabilities().tolist() == [0.25] * 4
    assert np.allclose(latest.probabilities(), [0.1, 0.2, 0.3, 0.4])  # ∝ rank: newest four times the oldest
    draws = np.array([latest.opponent_for(e).id for e in range(4000)])
    freq = np.bincount(draws, minlength=4) / draws.size
    assert np.allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.03), freq
    # one draw per episode, the same on every call, and repeatable from the seed
    assert latest.opponent_for(7) is latest.opponent_for(7)
    again = SnapshotPool(4, "latest", seed=0)
    for i in range(4):
        again.add(_params(i), env_tick=i, updates=i)
    assert [again.opponent_for(e).id for e in range(50)] == draws[:50].tolist()


def test_settle_reports_the_draw_and_the_pool_state_round_trips():
    pool = SnapshotPool(2, seed=3)
    pool.add(_params(0), env_tick=0, updates=0)
    drawn = pool.opponent_for(0)
    pool.add(_params(1), env_tick=120, updates=5)  # the pool grows during the match...
    snap, size = pool.settle(0)
    assert snap is drawn and size == 1  # ...the row says whom it was drawn from
    pool.add(_params(2), env_tick=240, updates=9)
    state = pool.state()
    copy = SnapshotPool(2)
    copy.load_state(state)
    assert copy.ids == [1, 2] and copy.next_id == 3
    assert [s.params.tolist() for s in copy.snapshots] == [[1] * 4, [2] * 4]
    assert [s.env_tick for s in copy.snapshots] == [120, 240]
    assert copy.add(_params(3), env_tick=360, updates=12).id == 3  # ids keep counting after a resume


def test_snapshots_fall_on_a_grid_of_ticks():
    sp = SelfPlay(SnapshotPool(8), snapshot_ticks=120, seats=["first_0", "second_0"])
    taken = [t for t in range(0, 400) if sp.take(_params(t), env_tick=t, updates=0) is not None]
    assert taken == [0, 120, 240, 360]
    late = SelfPlay(SnapshotPool(8), snapshot_ticks=120, seats=["a", "b"])
    assert [t for t in (0, 3, 125, 200, 241) if late.take(_params(t), env_tick=t, updates=0)] == [0, 125, 241]
    assert late.next_tick == 360  # a late snapshot does not shift the grid


def test_match_figures():
    m = {"won": np.array([0, 0, 1, 1.0]), "score": np.array([-1, 0, 2, 1.0]), "opponent": np.array([0, 0, 1, 1.0])}
    f = match_figures(m, window=2)
    assert (f["matches"], f["win_rate"], f["win_rate_last2"], f["score_last2_mean"], f["opponents_faced"]) == (
        4,
        0.5,
        1.0,
        1.5,
        2,
    )


# ----------------------------------------------------------------------------- at the door


def test_self_play_on_a_one_seat_world_is_refused_before_the_run_dir_exists(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "CartPole", "--self-play", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--self-play needs a world with two seats" in err and "CartPole has one seat (agent_0)" in err
    assert not out.exists()
    with pytest.raises(ValueError, match="multi/x has 3: a, b, c"):
        check_two_seats("multi/x", ["a", "b", "c"])
    # a two-seat world without --self-play, or a self-play setting without it: said, not ignored
    assert main(["train", "--env", "multi/duel", "--out", str(out)]) == 2
    assert (
        "multi/duel is a world of 2 seats (first_0, second_0): train on it with --self-play" in capsys.readouterr().err
    )
    assert main(["train", "--env", "multi/duel", "--opponents", "latest", "--pool-size", "2", "--out", str(out)]) == 2
    assert "--opponents, --pool-size set up self-play: add --self-play" in capsys.readouterr().err
    assert main([*ARGS, "--opponent-latency", "6", "--out", str(out)]) == 2  # a latency without a unit
    assert "6" in capsys.readouterr().err
    assert main([*ARGS, "--snapshot-every", "0", "--out", str(out)]) == 2
    assert "snapshot_every must be a positive number" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- runs


def test_the_learners_transitions_come_from_its_own_seat_only(no_shm_leak):
    """The replay holds the first seat's semi-MDP: its agent ticks, its delays (2 ticks, not the
    opponent's 5), and with γ = 1 every reward of its seat from each match's first decision on
    (the duel is zero-sum: the opponent's rewards have the other sign)."""
    from nonstop.experiment import TrainConfig, TrainingRun

    dqn = DQNConfig.for_family("multi", learning_starts=50, batch_size=16, replay_capacity=20_000, gamma=1.0)
    cfg = TrainConfig(
        env="multi/duel",
        env_kwargs={"rounds": 2},
        seconds=8,
        self_play=True,
        snapshot_every=2,
        pool_size=3,
        latency="2t",
        opponent_latency="5t",
        algo_settings=dqn,
    )
    run = TrainingRun(cfg)
    try:
        run.build().start()
        run.advance(8.0)
        run.quiesce()
        ticks, agent, delay_sum = run.replay.tick_counters()
        n = run.replay.transitions_written
        rewards = run.replay.cols["reward"][:n].astype(np.float64)
        snapshots = run.part("self_play").self_play.pool.ids
    finally:
        run.teardown()
    log = run.world.tick_log
    learner, opponent = log.seat("first_0"), log.seat("second_0")
    mine = learner["source"] == SOURCE_AGENT
    theirs = opponent["source"] == SOURCE_AGENT
    assert ticks == len(log) == 480
    assert agent == int(mine.sum()) > 300 and int(theirs.sum()) > 60
    mine_delay, their_delay = learner["delay"][mine], opponent["delay"][theirs]
    assert np.median(mine_delay) == 2 and np.median(their_delay) == 5 and mine_delay.max() < their_delay.min()
    assert delay_sum == int(learner["delay"][mine].sum())
    assert run.recorder.skipped_old == 0 and n == run.recorder.transitions > 100
    # every reward of the learner's seat from its first decision of each match, closed matches only
    episode, reward = learner["episode"], learner["reward"]
    ends = np.flatnonzero(learner["terminated"] | learner["truncated"])
    expected = 0.0
    for e in range(len(ends)):
        ticks_of = np.flatnonzero(episode == e)
        first = ticks_of[mine[ticks_of]][0]
        expected += reward[first : ends[e] + 1].sum()
    open_match = np.flatnonzero(episode == len(ends))  # the unfinished match's decisions: all but the open one
    decided = open_match[mine[open_match]]
    if decided.size > 1:
        expected += reward[decided[0] : decided[-1]].sum()
    assert rewards.sum() == pytest.approx(expected)
    assert (opponent["reward"] == -reward).all() and reward.any()
    assert snapshots == [2, 3, 4]  # at ticks 0, 120, 240, 360, 480: the newest three kept


@pytest.mark.slow
def test_self_play_run_writes_matches_resumes_its_pool_and_reports_the_win_rate(tmp_path, capsys, no_shm_leak):
    from nonstop.studies.report import build_report

    out = tmp_path / "run"
    assert main([*ARGS, "--seconds", "8", "--out", str(out)]) == 0
    capsys.readouterr()
    config = json.loads((out / "config.json").read_text())
    assert (config["self_play"], config["opponents"], config["pool_size"], config["opponent_latency"]) == (
        True,
        "uniform",
        3,
        "5t",
    )
    first = latest_checkpoint(out).state["self_play"]
    assert first["ids"].tolist() == [2, 3, 4] and first["next_id"] == 5  # snapshots at 0, 2, 4, 6, 8 s; three kept
    assert first["env_ticks"].tolist() == [240, 360, 480] and first["next_tick"] == 600
    assert first["params"].shape[0] == 3
    m = read_columns(out / "matches.csv", MATCH_COLUMNS)
    episodes = read_columns(out / "episodes.csv")
    n = len(m["episode"])
    assert n == len(episodes["episode"]) >= 8  # one match per finished episode, nothing lost
    assert m["episode"].tolist() == episodes["episode"].tolist() and (m["score"] == episodes["return"]).all()
    assert (m["won"] == (m["score"] > 0)).all()
    assert set(m["opponent"].astype(int).tolist()) <= set(range(5)) and len(set(m["opponent"].tolist())) >= 3
    assert (m["opponent_tick"] == m["opponent"] * 120).all()  # each id is the snapshot of its tick
    assert (m["opponent_tick"] <= m["end_tick"]).all() and (1 <= m["pool_size"]).all() and (m["pool_size"] <= 3).all()

    assert main([*ARGS, "--seconds", "12", "--out", str(out), "--resume"]) == 0  # the run's total: 4 s more
    capsys.readouterr()
    resumed = latest_checkpoint(out).state["self_play"]
    assert resumed["ids"].tolist() == [4, 5, 6] and resumed["next_id"] == 7  # counting on from the first run's pool
    assert resumed["env_ticks"].tolist() == [480, 600, 720] and resumed["next_tick"] == 840
    assert torch.equal(resumed["params"][0], first["params"][2])  # snapshot 4 came through the checkpoint whole
    m2 = read_columns(out / "matches.csv", MATCH_COLUMNS)
    later = m2["episode"] >= n
    assert len(m2["episode"]) > n and m2["episode"].tolist() == list(range(len(m2["episode"])))  # appended, counting on
    # the resumed segment's first matches are drawn from the restored pool (2, 3, 4), none from before it
    early = later & (m2["end_tick"] < 600)
    assert early.any() and set(m2["opponent"][early].astype(int).tolist()) <= {2, 3, 4}
    assert m2["opponent"][later].min() >= 2
    summary = json.loads((out / "summary.json").read_text())["self_play"]
    assert summary["snapshots"] == [4, 5, 6] and summary["snapshots_taken"] == 7
    assert (
        summary["opponent_delay_mean_ticks"] >= 5 > json.loads((out / "summary.json").read_text())["delay_mean_ticks"]
    )

    report = build_report(out)
    assert report.plots["win_rate"].name == "win_rate_over_time.png" and report.plots["win_rate"].stat().st_size > 5000
    figures = report.summary["matches"]
    assert figures["matches"] == len(m2["episode"])
    assert figures["win_rate"] == pytest.approx(float(m2["won"].mean()))
    assert report.summary["config"]["opponents"] == "uniform"


def test_self_play_on_two_player_boxing_learns_from_84x84_gray_frames(no_shm_leak):
    """multi/Boxing's RGB screens reach both sides (and the replay) as 84×84 grayscale frames."""
    pytest.importorskip("multi_agent_ale_py")
    from nonstop.experiment import TrainConfig, TrainingRun
    from nonstop.experiment.selfplay import SeatFrames

    dqn = DQNConfig.for_family("multi", k=0.25, replay_capacity=2000, learning_starts=30, batch_size=8)
    cfg = TrainConfig(
        env="multi/Boxing",
        seconds=1,
        self_play=True,
        snapshot_every=0.5,
        latency="1t",
        opponent_latency="3t",
        algo_settings=dqn,
    )
    run = TrainingRun(cfg)
    try:
        run.build().start()
        run.advance(1.0)
        run.quiesce()
        frame = run.world.slots[1].read().obs
        stored = run.replay.transitions_written
        updates, snapshots = run.state.updates, run.part("self_play").self_play.pool.ids
    finally:
        run.teardown()
    assert run.obs_shape == (84, 84) and frame.shape == (84, 84) and frame.dtype == np.uint8 and frame.any()
    log = run.world.tick_log
    assert log.meta.get("env") == "multi/Boxing"
    assert (log.seat("second_0")["source"] == SOURCE_AGENT).sum() > 30  # the pool side played (3-tick latency)
    assert stored > 30 and updates > 10 and snapshots == [0, 1, 2]
    with pytest.raises(TypeError, match="RGB uint8 frames"):
        from nonstop.envs import make_env

        SeatFrames(make_env("multi/duel"))
