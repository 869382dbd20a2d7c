"""The continuous family: Pendulum and three MuJoCo robots at their natural rates, ``tick_hz=`` for any
world, and their frames through Atari's preprocessing (issue 29 item 5)."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest

import nonstop
from nonstop.cli import main
from nonstop.envs import env_info, list_envs, make_env
from nonstop.envs.continuous import CONTINUOUS_WORLDS

NATURAL_HZ = {"Pendulum-v1": 20.0, "HalfCheetah-v5": 20.0, "Hopper-v5": 125.0, "Walker2d-v5": 125.0}


class NoRate(gymnasium.Env):
    """A Gymnasium world whose class and instances declare no render_fps (its tick rate is unknown)."""

    metadata: dict = {"render_modes": []}
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.fixture
def no_rate_id():
    gymnasium.register("nonstop-test/NoRate-v0", entry_point=NoRate)
    yield "nonstop-test/NoRate-v0"
    gymnasium.registry.pop("nonstop-test/NoRate-v0")


def test_the_family_is_the_four_worlds_at_their_natural_rates():
    assert {i.env_id: i.tick_hz for i in list_envs() if i.family == "continuous"} == NATURAL_HZ
    assert env_info("Pendulum-v1").default_beta == "noop"  # zero torque: a true rest action
    assert {env_info(i).default_beta for i in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")} == {"repeat"}


@pytest.mark.parametrize("env_id", sorted(NATURAL_HZ))
def test_each_world_ticks_on_the_virtual_clock_at_its_rate(env_id):
    hz = NATURAL_HZ[env_id]
    env = nonstop.make(env_id, seed=0)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(3):
            _, _, _, _, info = env.step(env.action_space.sample())
            assert int(info["nonstop_ticks_elapsed"]) == 1
        log = env.tick_log
        assert log is not None
        assert log.tau_m == pytest.approx(1 / hz) and log.meta["tick_hz"] == hz and env.metadata["render_fps"] == hz
        assert np.allclose(np.diff(log["deadline"]), 1 / hz)
        assert list(log["tick"]) == [1, 2, 3]
        # the rate is the physics' own: one tick integrates dt = 1 / tick_hz seconds of the world
        assert env.unwrapped.dt == pytest.approx(1 / hz)
    finally:
        env.close()


def test_a_beta_tick_applies_the_worlds_declared_default():
    """A late agent: on HalfCheetah β holds its last torques (repeat), on Pendulum it applies zero torque."""
    for env_id, held in (("HalfCheetah-v5", True), ("Pendulum-v1", False)):
        env = nonstop.make(env_id, seed=0, think_time=2.5 / NATURAL_HZ[env_id])
        try:
            env.reset(seed=0)
            action = np.full(env.action_space.shape, 0.5, np.float32)
            env.step(action)
            _, _, _, _, info = env.step(action)
            assert int(info["nonstop_inaction_ticks"]) >= 1  # β ticks happened
            beta = env.session.host.default
            applied = beta(None)  # what β applies on such a tick
            assert beta.kind == ("repeat" if held else "noop")
            assert np.array_equal(applied, action if held else np.zeros(env.action_space.shape, np.float32)), applied
        finally:
            env.close()


def test_make_takes_tick_hz_where_the_class_declares_no_rate(no_rate_id):
    with pytest.raises(ValueError, match="pass tick_hz="):
        env_info(no_rate_id)
    env = nonstop.make(no_rate_id, tick_hz=30, seed=0)  # the form the error message suggests
    try:
        env.reset(seed=0)
        env.step(0)
        assert env.tick_hz == 30.0 and env.tick_log.tau_m == pytest.approx(1 / 30)
    finally:
        env.close()
    assert env_info(no_rate_id, tick_hz=30).tick_hz == 30.0  # --env-arg tick_hz=30 reaches the same check


def test_halfcheetah_with_tick_hz_works_and_any_world_takes_a_rate():
    env = nonstop.make("HalfCheetah-v5", tick_hz=20)
    try:
        assert env.tick_hz == 20.0 and env.action_space.shape == (6,)
    finally:
        env.close()
    assert env_info("HalfCheetah-v5", tick_hz=40).tick_hz == 40.0  # a registered world's rate overridden
    make_env("HalfCheetah-v5", tick_hz=40).close()  # the env itself never sees tick_hz


def test_a_rate_is_read_from_an_instance_when_the_class_lacks_it():
    """Ant-v5 is in no family: its class declares no render_fps, its instance 1/dt = 20 Hz."""
    from gymnasium.envs.mujoco.ant_v5 import AntEnv

    assert "render_fps" not in AntEnv.metadata
    assert env_info("Ant-v5").tick_hz == 20.0
    assert env_info("Ant-v5", frame_skip=10).tick_hz == 10.0  # its arguments change dt, and the rate with it


@pytest.mark.parametrize("bad", [0, -20, "fast", float("nan")])
def test_a_bad_tick_hz_is_one_line(bad, capsys, tmp_path):
    with pytest.raises(ValueError, match="tick_hz must be"):
        env_info("Pendulum-v1", tick_hz=bad)
    with pytest.raises(ValueError, match="tick_hz must be"):
        nonstop.make("Pendulum-v1", tick_hz=bad)
    arg = json.dumps(bad) if not isinstance(bad, str) else bad
    code = main(
        ["train", "--env", "Pendulum-v1", "--env-arg", f"tick_hz={arg}", "--seconds", "1", "--out", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("nonstop: error:") and "tick_hz must be" in err and "\n" not in err, err


def test_envs_lists_the_family_with_beta_and_rate(capsys):
    assert main(["envs", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out) if row["family"] == "continuous"}
    assert {k: (r["tick_hz"], r["default"]) for k, r in rows.items()} == {
        k: (hz, CONTINUOUS_WORLDS[k][1]) for k, hz in NATURAL_HZ.items()
    }
    assert main(["envs"]) == 0
    table = capsys.readouterr().out
    assert "HalfCheetah-v5" in table and "continuous" in table and "Walker2d-v5" in table


def test_pixels_are_atari_frames_for_the_same_encoder():
    from nonstop.envs.atari import PREPROCESSED_SHAPE
    from nonstop.learning.dqn import DQNConfig, build_q_network

    env = make_env("HalfCheetah-v5", pixels=True)
    try:
        assert env.observation_space == gymnasium.spaces.Box(0, 255, PREPROCESSED_SHAPE, np.uint8)
        first, _ = env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(5):
            obs, *_ = env.step(env.action_space.sample())
        assert first.shape == PREPROCESSED_SHAPE and first.dtype == np.uint8
        assert 0 < first.mean() < 255 and not np.array_equal(first, obs)  # a drawn, moving body, not a blank
    finally:
        env.close()
    boxing = make_env("Boxing", preprocess=True)
    try:
        assert boxing.observation_space == env.observation_space  # Atari's preprocessed frame, exactly
    finally:
        boxing.close()
    cfg = DQNConfig(k=1)
    assert type(build_q_network(PREPROCESSED_SHAPE, 6, cfg)) is type(
        build_q_network(boxing.observation_space.shape, 6, cfg)
    )


def test_continuous_arguments_are_checked_at_the_door():
    with pytest.raises(TypeError, match="pixels"):
        make_env("Hopper-v5", pixels="yes")
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env("Hopper-v5", max_episode_steps=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        make_env("Hopper-v5", frame_skip=2)


def test_train_pixels_asks_a_continuous_world_for_its_frames(capsys, tmp_path):
    from nonstop.cli import build_parser
    from nonstop.commands.train import config_from_args

    args = build_parser().parse_args(["train", "--env", "HalfCheetah-v5", "--pixels", "--seconds", "1"])
    assert config_from_args(args).env_kwargs == {"pixels": True}
    assert main(["train", "--env", "CartPole", "--pixels", "--seconds", "1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "nonstop: error: --pixels: CartPole does not offer its frames (the continuous family does: `nonstop envs`)"
    )


def test_env_arg_tick_hz_sets_a_trained_worlds_rate(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "CartPole", "--env-arg", "tick_hz=25", "--seconds", "2", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_ticks_total"] == 50  # 2 s at 25 Hz, not CartPole's natural 50 Hz
    assert json.loads((out / "config.json").read_text())["env_kwargs"] == {"tick_hz": 25}
