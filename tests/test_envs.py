"""Tests for nonstop.envs: the registry, the Theorem 1 MDPs, Atari and CartPole in realtime."""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from conftest import check_env_strictly

from nonstop.envs import EnvInfo, env_info, list_envs, make_env, register
from nonstop.envs.atari import AreaResize, make_atari
from nonstop.envs.theory import (
    DelayCycleMDP,
    InactionMDP,
    delay_regret_per_step,
    inaction_regret_rate,
)

SRC = Path(__file__).resolve().parents[1] / "src"


#: check_env's warning when handed a wrapper; the preprocessed env (AreaResize to 84x84 on top of the
#: emulator) is what nonstop serves, so it is the one to check, and every check still runs on it
WRAPPED = "is different from the unwrapped version"


def _check(env: gymnasium.Env, allowed: dict[str, str] | None = None) -> None:
    check_env_strictly(env, allowed)


# --- InactionMDP (Equation 3) ---------------------------------------------------------------------


def test_inaction_mdp_tick_by_tick():
    env = InactionMDP()
    obs, info = env.reset(seed=0)
    assert info["state"] == 1 and obs.tolist() == [0.0, 1.0]  # starts idle in s2
    # (action, reward, next state): a1/a2 lead to s1 and earn 1, β's a3 leads to s2 and earns 0.
    for action, reward, state in [(1, 1.0, 0), (2, 1.0, 0), (0, 0.0, 1), (0, 0.0, 1), (2, 1.0, 0)]:
        obs, r, terminated, truncated, info = env.step(action)
        assert (r, info["state"], terminated, truncated) == (reward, state, False, False)
        assert obs.dtype == np.float32 and obs.tolist() == [float(state == 0), float(state == 1)]
        assert env.observation_space.contains(obs)


def test_inaction_mdp_truncates_and_never_terminates():
    env = InactionMDP(max_steps=4)
    env.reset(seed=0)
    flags = [env.step(1)[2:4] for _ in range(4)]
    assert flags == [(False, False)] * 3 + [(False, True)]
    env.reset()
    assert env.step(1)[2:4] == (False, False)  # reset restarts the step count


def test_inaction_regret_matches_equation_3():
    # A sequential agent with tau_theta = m * tau_M acts on one tick in m; β idles on the rest.
    tau_m, m, ticks = 1 / 60, 4, 6000
    env = InactionMDP(max_steps=ticks)
    env.reset(seed=0)
    total = sum(env.step(1 if t % m == 0 else 0)[1] for t in range(ticks))
    regret_per_second = (ticks * 1.0 - total) / (ticks * tau_m)  # optimal rate is 1 per tick
    assert regret_per_second == pytest.approx(inaction_regret_rate(m * tau_m, tau_m))


def test_inaction_regret_rate_closed_form():
    assert inaction_regret_rate(0.1, 0.02) == pytest.approx(40.0)
    assert inaction_regret_rate(0.02, 0.02) == 0.0
    assert inaction_regret_rate(0.001, 0.02) == 0.0
    with pytest.raises(ValueError, match="tau_m"):
        inaction_regret_rate(0.1, 0.0)
    with pytest.raises(TypeError, match="tau_theta"):
        inaction_regret_rate("0.1", 0.02)


def test_theory_envs_reject_bad_actions_and_step_before_reset():
    env = InactionMDP()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        env.step(3)
    with pytest.raises(TypeError, match="action"):
        env.step(1.5)
    cycle = DelayCycleMDP(n=4, p_minimax=0.5)
    cycle.reset(seed=0)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        cycle.step(-1)
    cycle.step(np.int64(4))  # numpy ints, as action_space.sample() returns, are fine


# --- DelayCycleMDP (Equation 4) -------------------------------------------------------------------


def test_delay_cycle_rewards_only_the_matching_action():
    env = DelayCycleMDP(n=5, p_minimax=1.0)  # p = 1: the state never moves
    obs, info = env.reset(seed=3)
    state = info["state"]
    assert info["optimal_action"] == state + 1 and obs.argmax() == state and obs.sum() == 1.0
    for action in range(6):
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward == float(action == state + 1)  # β's a0 never earns
        assert info["state"] == state and not terminated and not truncated


def test_delay_cycle_moves_one_step_forward_and_wraps():
    env = DelayCycleMDP(n=3, p_minimax=1 / 3)  # the least sticky the theory allows
    _, info = env.reset(seed=0)
    seen = {info["state"]}
    for _ in range(300):
        before = info["state"]
        _, _, _, _, info = env.step(0)
        assert info["state"] in (before, (before + 1) % 3)  # stay, or the next state on the cycle
        seen.add(info["state"])
    assert seen == {0, 1, 2}  # s_n wraps to s_1


def test_delay_cycle_stay_probability_within_statistical_bound():
    p, steps = 0.7, 20_000
    env = DelayCycleMDP(n=6, p_minimax=p, max_steps=steps)
    _, info = env.reset(seed=1)
    stays = 0
    for _ in range(steps):
        before = info["state"]
        _, _, _, _, info = env.step(0)
        stays += info["state"] == before
    # Binomial(steps, p): 5 standard deviations is a ~1e-6 false-alarm rate.
    assert abs(stays / steps - p) < 5 * math.sqrt(p * (1 - p) / steps)


def test_delay_cycle_k_tick_late_agent_earns_p_to_the_k():
    # An agent acting on the observation from k ticks ago is right iff the state stayed k times;
    # with n > k the cycle cannot wrap back, so its reward rate is p**k exactly (Equation 4).
    p, k, steps = 0.8, 3, 20_000
    env = DelayCycleMDP(n=10, p_minimax=p, max_steps=steps + k)
    obs, _ = env.reset(seed=2)
    history = [obs]
    total = 0.0
    for t in range(steps + k):
        late_action = int(history[t - k].argmax()) + 1 if t >= k else 0
        obs, reward, *_ = env.step(late_action)
        history.append(obs)
        total += reward if t >= k else 0.0
    expected = 1.0 - delay_regret_per_step(p, k)
    assert abs(total / steps - expected) < 5 * math.sqrt(expected * (1 - expected) / steps)


def test_delay_regret_per_step_closed_form():
    assert delay_regret_per_step(0.5, 0) == 0.0
    assert delay_regret_per_step(0.5, 3) == pytest.approx(0.875)
    assert delay_regret_per_step(1.0, 100) == 0.0  # deterministic worlds: delay costs nothing
    with pytest.raises(ValueError, match="p_minimax"):
        delay_regret_per_step(1.5, 1)
    with pytest.raises(TypeError, match="k must be an int"):
        delay_regret_per_step(0.5, 1.0)
    with pytest.raises(ValueError, match="k must be >= 0"):
        delay_regret_per_step(0.5, -1)


def test_delay_cycle_seed_determinism():
    def trajectory(seed: int) -> list[tuple[int, float]]:
        env = DelayCycleMDP(n=4, p_minimax=0.5)
        _, info = env.reset(seed=seed)
        out = [(info["state"], 0.0)]
        for action in [1, 2, 3, 4, 0] * 40:
            _, reward, _, _, info = env.step(action)
            out.append((info["state"], reward))
        return out

    assert trajectory(7) == trajectory(7)
    assert trajectory(7) != trajectory(8)


def test_delay_cycle_validates_at_the_door():
    with pytest.raises(ValueError, match=r"\[1/n, 1\]"):
        DelayCycleMDP(n=4, p_minimax=0.2)  # below 1/n: the next-state probabilities cannot sum to 1
    with pytest.raises(ValueError, match="p_minimax"):
        DelayCycleMDP(n=4, p_minimax=1.01)
    with pytest.raises(TypeError, match="n must be an int"):
        DelayCycleMDP(n=4.0, p_minimax=0.5)
    with pytest.raises(ValueError, match="n must be >= 1"):
        DelayCycleMDP(n=0, p_minimax=0.5)
    with pytest.raises(ValueError, match="max_steps"):
        DelayCycleMDP(n=4, p_minimax=0.5, max_steps=0)
    DelayCycleMDP(n=3, p_minimax=1 / 3)  # exactly 1/n is allowed despite float rounding


def test_theory_envs_pass_gymnasium_checker():
    _check(InactionMDP())
    _check(DelayCycleMDP(n=5, p_minimax=0.4))
    _check(make_env("theory/delay-cycle", n=3, p_minimax=0.5).unwrapped)


# --- registry ------------------------------------------------------------------------------------


def test_builtin_ids_are_listed_with_their_facts():
    infos = {info.env_id: info for info in list_envs()}
    assert {"Boxing", "Krull", "NameThisGame", "CartPole", "theory/inaction", "theory/delay-cycle"} <= set(infos)
    assert all(isinstance(info, EnvInfo) for info in infos.values())
    inaction = infos["theory/inaction"]
    assert (inaction.family, inaction.tick_hz, inaction.noop_action, inaction.default_beta) == (
        "theory",
        60.0,
        0,
        "noop",
    )
    assert (inaction.optimal_reward_rate, inaction.default_reward_rate) == (1.0, 0.0)
    assert env_info("theory/delay-cycle", n=4, p_minimax=0.25).optimal_reward_rate == 1.0


def test_unknown_id_suggests_close_matches_and_how_to_list():
    with pytest.raises(ValueError) as error:
        make_env("Boxng")
    assert "'Boxing'" in str(error.value) and "nonstop envs" in str(error.value)
    with pytest.raises(ValueError, match="'theory/inaction'"):
        env_info("theory/inacton")
    with pytest.raises(ValueError, match="'CartPole'"):
        env_info("cartpole")  # case differences still find the name
    with pytest.raises(TypeError, match="env_id must be a str"):
        make_env(42)


def test_bad_kwargs_fail_at_the_door_with_precise_errors():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'm'.*accepts: n, p_minimax, max_steps"):
        make_env("theory/delay-cycle", m=3)
    with pytest.raises(TypeError, match="n must be int, got bool"):
        env_info("theory/delay-cycle", n=True)
    with pytest.raises(ValueError, match=r"\[1/n, 1\]"):
        env_info("theory/delay-cycle", n=4, p_minimax=0.1)  # rejected without building anything
    with pytest.raises(TypeError, match="preprocess must be bool"):
        make_env("Boxing", preprocess="yes")
    with pytest.raises(ValueError, match="frameskip must be 1"):
        env_info("Boxing", frameskip=4)
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env("CartPole", max_episode_steps=0)
    with pytest.raises(ValueError, match="render_mode must be one of"):
        make_env("CartPole", render_mode="video")


def test_register_validates_and_refuses_conflicting_ids():
    with pytest.raises(ValueError, match="family"):
        register("test/bad-family", InactionMDP, family="board", tick_hz=1.0)
    with pytest.raises(ValueError, match="tick_hz"):
        register("test/bad-hz", InactionMDP, family="theory", tick_hz=0.0)
    with pytest.raises(ValueError, match="default_beta"):
        register("test/bad-beta", InactionMDP, family="theory", tick_hz=1.0, default_beta="pray")
    with pytest.raises(ValueError, match="already registered"):
        register("CartPole", InactionMDP, family="theory", tick_hz=60.0)
    with pytest.raises(ValueError, match="reserved"):
        register("ALE/Mine-v5", InactionMDP, family="atari", tick_hz=60.0)


def _first_observations(env_id: str, kwargs: dict, seed: int) -> list[list[float]]:
    env = make_env(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    out = [obs.tolist()]
    for _ in range(20):
        out.append(env.step(1)[0].tolist())
    return out


def test_make_env_works_in_a_spawned_process_from_id_and_kwargs():
    kwargs = {"n": 5, "p_minimax": 0.5}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        remote = pool.submit(_first_observations, "theory/delay-cycle", kwargs, 11).result(timeout=60)
    assert remote == _first_observations("theory/delay-cycle", kwargs, 11)


def test_importing_envs_does_not_import_ale_py():
    code = "import sys, nonstop.envs as e; e.env_info('Boxing'); e.list_envs(); print('ale_py' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_atari_envs_do_not_print_the_ale_banner():
    """ALE prints "A.L.E ... [Powered by Stella]" on stderr for every interface it builds; nonstop
    lowers ALE's log level first, so building and stepping a game says nothing."""
    code = "from nonstop.envs import make_env; e = make_env('Boxing'); e.reset(seed=0); e.step(0); print('ok')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert "Stella" not in result.stderr and "A.L.E" not in result.stderr, result.stderr


def test_gymnasium_ids_take_tick_hz_from_render_fps_or_the_caller():
    assert env_info("Acrobot-v1").tick_hz == 15.0  # Acrobot's metadata["render_fps"]
    assert env_info("Acrobot-v1").family == "gymnasium"
    assert env_info("Acrobot-v1", tick_hz=5).tick_hz == 5.0
    env = make_env("Acrobot-v1", tick_hz=5, max_episode_steps=7)  # realtime kwargs are not passed on
    assert env.spec.max_episode_steps == 7
    with pytest.raises(ValueError, match="tick_hz"):
        env_info("Acrobot-v1", tick_hz=-1.0)


def test_gymnasium_id_without_render_fps_asks_for_tick_hz():
    env_id = "NonstopTestNoFps-v0"

    def no_fps() -> InactionMDP:  # a factory without metadata, whose instances declare no render_fps either
        env = InactionMDP()
        env.metadata = {"render_modes": []}
        return env

    gymnasium.register(env_id, entry_point=no_fps)
    try:
        with pytest.raises(ValueError, match=r"pass tick_hz="):
            env_info(env_id)
        assert env_info(env_id, tick_hz=10.0, default_beta="repeat").default_beta == "repeat"
        assert make_env(env_id, tick_hz=10.0).reset(seed=0)[0].shape == (2,)
    finally:
        del gymnasium.registry[env_id]


# --- Atari ---------------------------------------------------------------------------------------


def test_atari_defaults_are_the_papers():
    info = env_info("Boxing")
    assert (info.family, info.tick_hz, info.noop_action, info.default_beta) == ("atari", 60.0, 0, "noop")
    for game in ("Boxing", "Krull", "NameThisGame"):
        env = make_env(game)
        ale = env.unwrapped.ale
        assert env.unwrapped._frameskip == 1
        assert ale.getFloat("repeat_action_probability") == 0.0
        assert env.action_space.n == len(ale.getMinimalActionSet())
        assert env.unwrapped.get_action_meanings()[0] == "NOOP"
        assert env.observation_space.shape == (210, 160, 3)


def test_atari_one_step_is_one_frame():
    env = make_env("Krull")
    _, info = env.reset(seed=0)
    assert info["episode_frame_number"] == 0
    for expected in range(1, 6):
        assert env.step(0)[4]["episode_frame_number"] == expected


def _frames(env_id: str, seed: int, steps: int = 200, **kwargs) -> np.ndarray:
    env = make_env(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=steps)
    return np.stack([obs] + [env.step(int(a))[0] for a in actions])


def test_atari_no_sticky_actions_makes_frames_reproducible():
    frames = _frames("Boxing", seed=1)
    assert (frames[1:] != frames[:-1]).any()  # the game actually moves
    assert np.array_equal(frames, _frames("Boxing", seed=1))
    # Without sticky actions ALE has no randomness left for the seed to change.
    assert np.array_equal(frames, _frames("Boxing", seed=2))
    # The check is sensitive: sticky actions make the seed matter.
    sticky = dict(repeat_action_probability=0.25)
    assert not np.array_equal(_frames("Boxing", 1, **sticky), _frames("Boxing", 2, **sticky))


def test_atari_preprocess_gives_84x84_grayscale():
    env = make_env("Boxing", preprocess=True, max_episode_steps=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    truncated = [env.step(0)[3] for _ in range(3)]
    assert truncated == [False, False, True]
    _check(make_env("Boxing", preprocess=True), {WRAPPED: "the 84x84 grayscale world nonstop serves is a wrapper"})


def test_atari_raw_env_passes_gymnasium_checker():
    _check(make_env("NameThisGame").unwrapped)


def test_ale_style_ids_mean_any_game_with_paper_defaults():
    for env_id in ("ALE/Pong-v5", "Atari/Pong"):
        info = env_info(env_id)
        assert (info.env_id, info.family, info.tick_hz) == (env_id, "atari", 60.0)
        env = make_env(env_id, preprocess=True)
        assert env.unwrapped._frameskip == 1 and env.reset(seed=0)[0].shape == (84, 84)
    with pytest.raises(ValueError, match="'Pong'"):
        env_info("ALE/Pongg-v5")
    with pytest.raises(TypeError, match="unexpected keyword"):
        make_env("Atari/Pong", game="Boxing")


def test_legacy_ale_ids_get_their_real_tick_rate():
    assert env_info("BoxingNoFrameskip-v4").tick_hz == 60.0  # not ALE's render_fps of 30
    with pytest.raises(ValueError, match="random number of frames"):
        env_info("Boxing-v4")  # frameskip (2, 5): no fixed tick


def test_area_resize_averages_blocks_and_validates():
    class Frame(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(0, 255, (4, 4), np.uint8)
        action_space = gymnasium.spaces.Discrete(1)

        def reset(self, *, seed=None, options=None):
            return np.array([[0, 2, 4, 4], [2, 4, 4, 4], [9, 9, 1, 1], [9, 9, 1, 3]], np.uint8), {}

    assert AreaResize(Frame(), (2, 2)).reset()[0].tolist() == [[2, 4], [9, 2]]  # 1.5 rounds to even
    with pytest.raises(ValueError, match="only shrinks"):
        AreaResize(Frame(), (8, 8))
    with pytest.raises(ValueError, match="shape"):
        AreaResize(Frame(), (2, 0))
    with pytest.raises(TypeError, match="2-D uint8"):
        AreaResize(InactionMDP(), (1, 1))


def test_make_atari_rejects_unknown_games():
    with pytest.raises(ValueError, match="'Boxing'"):
        make_atari("Boxin")


# --- CartPole ------------------------------------------------------------------------------------


def test_cartpole_ticks_at_its_natural_50_hz():
    info = env_info("CartPole")
    assert (info.family, info.tick_hz, info.default_beta, info.noop_action) == ("classic", 50.0, "repeat", 0)
    env = make_env("CartPole")
    assert env.unwrapped.tau == pytest.approx(1 / info.tick_hz)
    assert env.spec.max_episode_steps == 500
    # CartPole-v1's own observation space (gymnasium's, not nonstop's) leaves both velocities unbounded
    _check(
        env.unwrapped,
        {
            "minimum value is -infinity": "velocities are unbounded in CartPole-v1",
            "maximum value is infinity": "velocities are unbounded in CartPole-v1",
        },
    )


def test_register_takes_the_facts_of_env_info_and_refuses_any_other_by_name():
    with pytest.raises(TypeError, match="register\\(\\) got an unexpected keyword argument 'hz'"):
        register("test/facts", gymnasium.Env, family="classic", hz=30.0)
    with pytest.raises(ValueError, match="family must be one of"):
        register("test/facts", gymnasium.Env, tick_hz=30.0)
    assert "test/facts" not in [info.env_id for info in list_envs()]
