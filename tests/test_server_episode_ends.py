"""Episode ends reach a remote client exactly as the local Gymnasium view reports them.

The same seeded episode-end sequence (terminations and truncations) runs through the
virtual-clock Gymnasium view (`nonstop.make`) and through a server (`RemoteEnv`), and the two are
compared step by step: observations, rewards, ``terminated``, ``truncated``, and the observation
``reset()`` returns after each end. The server ticks on the wall clock, so its worlds here tick at
10 Hz: an agent on loopback acts well within each 100 ms tick, which the test checks (every tick
was the agent's, in one of two tries: a load spike can hold the client past one tick) before
comparing, so a slow machine shows up as a clear failure, not a mismatch.
"""

from __future__ import annotations

import asyncio

import gymnasium
import numpy as np
import pytest

pytest.importorskip("fastapi")

import nonstop
from nonstop.envs.classic import make_cartpole
from nonstop.envs.registry import register
from nonstop.server.app import ServerThread
from nonstop.server.client import AsyncClient, RemoteEnv

pytestmark = pytest.mark.wall
SLOW_HZ = 10.0


class AlternatingEnds(gymnasium.Env):
    """Episode k lasts 3 + k % 2 steps and is terminated when k is even, truncated when odd.
    obs = [step in episode, last action, episode, a seeded random number]; reward = action + 1."""

    def __init__(self) -> None:
        self.action_space = gymnasium.spaces.Discrete(3)
        self.observation_space = gymnasium.spaces.Box(-1e9, 1e9, shape=(4,), dtype=np.float64)
        self.episode, self.steps, self.last = -1, 0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.steps, self.last, self.episode, self.np_random.random()])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.episode, self.steps, self.last = self.episode + 1, 0, 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        self.last = int(action)
        end = self.steps >= 3 + self.episode % 2
        return self._obs(), float(action) + 1.0, end and self.episode % 2 == 0, end and self.episode % 2 == 1, {}


register("test/alternating-ends", AlternatingEnds, family="classic", tick_hz=SLOW_HZ, description="test world")
register(
    "test/cartpole-10hz",
    make_cartpole,
    family="classic",
    tick_hz=SLOW_HZ,
    default_beta="repeat",
    description="CartPole at 10 Hz",
)


def _play(env: gymnasium.Env, seed: int, actions: list[int]) -> list[tuple]:
    """(kind, obs, reward, terminated, truncated, agent-only?) for the reset, every step and every
    reset after an episode's end."""
    obs, _ = env.reset(seed=seed)
    out = [("reset", np.asarray(obs).copy(), None, False, False, True)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        on_time = info["nonstop_inaction_ticks"] == 0 and info["nonstop_ticks_elapsed"] == 1
        out.append(("step", np.asarray(obs).copy(), float(reward), bool(terminated), bool(truncated), on_time))
        if terminated or truncated:
            obs, _ = env.reset()
            out.append(("reset", np.asarray(obs).copy(), None, False, False, True))
    return out


@pytest.mark.parametrize(
    ("env_id", "actions"),
    [("test/alternating-ends", [1, 2, 0, 1, 1, 2, 0, 2, 1, 0, 1, 2, 2, 0]), ("test/cartpole-10hz", [1] * 32)],
    ids=["terminated-and-truncated", "cartpole"],
)
def test_remote_env_matches_the_local_view_at_episode_ends(env_id, actions, no_shm_leak) -> None:
    local = nonstop.make(env_id, clock="virtual")
    try:
        expected = _play(local, 5, actions)
    finally:
        local.close()
    ends = [e for e in expected if e[3] or e[4]]
    assert len(ends) >= 3, "the sequence must cross several episode ends"

    def remote_play() -> list[tuple]:
        with ServerThread(envs=[env_id], idle_timeout=30.0) as server:
            remote = RemoteEnv(server.url, env=env_id)
            try:
                return _play(remote, 5, actions)
            finally:
                remote.close()

    got = remote_play()
    if any(not g[5] for g in got):  # a load spike held the client past a tick: one more try
        got = remote_play()
    late = [i for i, g in enumerate(got) if not g[5]]
    assert not late, f"the client missed a 100 ms tick at steps {late} twice: the machine is too loaded to compare"
    assert [g[0] for g in got] == [e[0] for e in expected]
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g[2:5] == e[2:5], f"entry {i} ({g[0]}): reward/terminated/truncated {g[2:5]} != {e[2:5]}"
        np.testing.assert_allclose(g[1], e[1], err_msg=f"entry {i} ({g[0]}): observation differs")


def test_every_path_sees_the_terminal_observation_and_session_time(no_shm_leak) -> None:
    """`wait`, `observe` and pushes say ``done`` once per end with the terminal observation and
    its flag, and ``time`` is the session's clock (tick · τ_M), whatever the server's uptime."""
    env_id = "test/alternating-ends"

    async def play(url: str) -> None:
        async with AsyncClient(url) as client:
            first = await client.reset(env=env_id, seed=1)
            assert first.tick == 0 and first.info["time"] == 0.0 and not first.done
            seen = await client.wait(5)  # episode 0 ends at tick 3 (terminated): β's noop earns 1 per tick
            assert seen.done and seen.info["terminated"] and not seen.info["truncated"]
            assert seen.tick == 3 and seen.obs[0] == 3 and seen.obs[2] == 0 and seen.info["episode"] == 0
            assert seen.reward == 3.0 and seen.info["time"] == pytest.approx(3 / SLOW_HZ)
            after = await client.observe()  # the next episode's; no second "done" for the same end
            assert not after.done and after.info["episode"] == 1 and after.tick >= 5
            assert after.info["time"] == pytest.approx(after.tick / SLOW_HZ)
            await client.subscribe(1)
            pushed = []
            while len([p for p in pushed if p.done]) < 2:
                pushed.append(await client.next_push(timeout=10))
            ends = [p for p in pushed if p.done]
            assert ends[0].info["truncated"] and ends[0].obs[2] == 1 and ends[0].obs[0] == 4  # episode 1: 4 steps
            assert ends[1].info["terminated"] and ends[1].obs[2] == 2 and ends[1].obs[0] == 3
            assert all(not (p.info["terminated"] or p.info["truncated"]) for p in pushed if not p.done)

    with ServerThread(envs=[env_id], idle_timeout=30.0) as server:
        asyncio.run(play(server.url))


@pytest.mark.parametrize("tick_procs", [0, 1], ids=["threads", "procs"])
def test_terminal_observation_on_both_tick_pools(tick_procs, no_shm_leak) -> None:
    """CartPole at its natural 50 Hz, pushed left until the pole falls: the done reply holds the
    fallen pole (past CartPole's limits) flagged terminated, on the in-process tick pool and on a
    tick worker process (which publishes into this process's slot); ``reset`` then returns the
    next episode's upright pole."""

    async def play(url: str) -> None:
        async with AsyncClient(url) as client:
            await client.reset(env="CartPole", seed=4, encoding="list")
            for _ in range(300):
                result = await client.step(0)
                if result.done:
                    break
            x, angle = result.obs[0], result.obs[2]
            assert result.done and result.info["terminated"] and not result.info["truncated"]
            assert result.info["episode"] == 0 and (abs(angle) > 0.2095 or abs(x) > 2.4), result.obs
            fresh = await client.reset()
            assert not fresh.done and fresh.info["episode"] >= 1 and abs(fresh.obs[2]) < 0.2

    with ServerThread(envs=["CartPole"], idle_timeout=30.0, tick_procs=tick_procs) as server:
        asyncio.run(play(server.url))


def test_view_reports_each_episode_end_once_with_its_terminal_observation() -> None:
    """`_View`, the per-reader bookkeeping behind every reply, on hand-made slot reads: the plain
    case, a read between the two publishes of an end, several ends between reads, and a reset."""
    from types import SimpleNamespace

    from nonstop.realtime.channels import Observation
    from nonstop.realtime.host import END_TERMINATED, END_TRUNCATED
    from nonstop.server.connection import _View

    def ob(tick, episode, total, *, terminated=False, truncated=False, last_end=0):
        return Observation(
            np.array([float(tick)]),
            tick,
            0.0,
            0.0,
            total,
            terminated,
            truncated,
            episode,
            0,
            tick,
            1,
            tick,
            last_end,
            0,
        )

    final = {}
    session = SimpleNamespace(
        tau_m=0.5,
        sid="s",
        state=SimpleNamespace(value="running"),
        read_final=lambda seat=0: final["obs"],
        spec=SimpleNamespace(seats=None),
    )

    def reply(view, obs, fresh=False):
        data = view.payload(obs, session, "list", fresh=fresh)
        o = data["observation"]
        return o["tick"], o["episode"], o["terminated"], o["truncated"], data["reward"], data["done"], o["time"]

    view = _View()
    assert reply(view, ob(0, 0, 0.0), fresh=True) == (0, 0, False, False, 0.0, False, 0.0)
    final["obs"] = ob(3, 0, 3.0, terminated=True, last_end=END_TERMINATED)
    # the world reset at tick 3: the newest read is episode 1's first, the reply is episode 0's end
    assert reply(view, ob(3, 1, 3.0, last_end=END_TERMINATED)) == (3, 0, True, False, 3.0, True, 1.5)
    assert reply(view, ob(4, 1, 4.0, last_end=END_TERMINATED)) == (4, 1, False, False, 1.0, False, 2.0)
    # read between the terminal publish and the reset's: reported once, then the next episode plainly
    window = ob(6, 1, 6.0, truncated=True, last_end=END_TRUNCATED)
    assert reply(view, window) == (6, 1, False, True, 2.0, True, 3.0)
    assert reply(view, window)[2:6] == (False, False, 0.0, False)
    assert reply(view, ob(6, 2, 6.0, last_end=END_TRUNCATED))[1:6] == (2, False, False, 0.0, False)
    # two episodes ended between reads: the terminal state is gone, how the last one ended is not
    final["obs"] = ob(9, 3, 9.0, terminated=True, last_end=END_TERMINATED)
    assert reply(view, ob(10, 4, 10.0, last_end=END_TERMINATED))[:6] == (10, 4, True, False, 4.0, True)
    assert view.ended and reply(view, ob(11, 4, 11.0), fresh=True)[5] is False and not view.ended
