"""MAgent2's worlds as realtime seat worlds (issue 32 item 1): `multi/battle` and `multi/gather`, every
agent a seat with its own queue, β, reward, inaction and delay; an agent that dies leaves its seat."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_ticks

from nonstop.envs import env_info, list_envs, make_env
from nonstop.envs.seats import team_of, teams_of
from nonstop.realtime.host import Session
from nonstop.realtime.tickcolumns import SOURCE_ABSENT, SOURCE_AGENT, SOURCE_DEFAULT

pytest.importorskip("magent2")  # the `magent` extra; the `test` extra installs it, so CI runs these


def brawl(obs: np.ndarray, rng: np.random.Generator) -> int:
    """Attack a random neighbour cell when an enemy is next to the agent, else move at random: enough
    to make agents die within a few dozen ticks on a small map."""
    near = obs[5:8, 5:8, 3].sum() > 0  # channel 3: the other team's presence, the agent at (6, 6)
    return int(rng.integers(13, 21)) if near else int(rng.integers(0, 13))


def test_battle_and_gather_are_listed_with_the_users_tick_rate() -> None:
    ids = {info.env_id: info for info in list_envs()}
    assert ids["multi/battle"].tick_hz == ids["multi/gather"].tick_hz == 20.0
    assert env_info("multi/battle", tick_hz=60).tick_hz == 60.0
    with pytest.raises(ValueError, match="map_size"):
        env_info("multi/battle", map_size=8)
    env = make_env("multi/battle", map_size=12)
    assert env.possible_agents == ["red_0", "red_1", "blue_0", "blue_1"]
    assert set(teams_of(env.possible_agents).values()) == {"red", "blue"} and team_of("blue_80") == "blue"


def test_parallel_api_test_on_the_realtime_view_of_battle() -> None:
    """PettingZoo's own checks on `nonstop.make_parallel("multi/battle")` on the virtual clock."""
    from pettingzoo.test import parallel_api_test

    import nonstop

    env = nonstop.make_parallel("multi/battle", clock="virtual", seed=0, env_kwargs={"map_size": 12, "max_cycles": 80})
    try:
        assert env.metadata["render_fps"] == 20.0
        parallel_api_test(env, num_cycles=200)
    finally:
        env.close()


def test_the_view_reports_a_dead_agent_once_then_drops_it() -> None:
    import nonstop

    rng = np.random.default_rng(0)
    env = nonstop.make_parallel("multi/battle", clock="virtual", seed=0, env_kwargs={"map_size": 12, "max_cycles": 300})
    try:
        obs, _ = env.reset(seed=0)
        died: list[str] = []
        while env.agents:
            before = list(env.agents)
            obs, rewards, terms, truncs, _ = env.step({a: brawl(obs[a], rng) for a in env.agents})
            assert set(terms) == set(before)  # every agent alive before the step, and no other
            gone = [a for a in before if terms[a] or truncs[a]]
            assert set(env.agents) == set(before) - set(gone)
            if env.agents:
                died += gone
        assert died, "nobody died mid-episode: the test shows nothing"
    finally:
        env.close()


def test_many_seats_some_slow_some_dying_checked_tick_by_tick_against_the_log() -> None:
    """12 agents of battle on the virtual clock: seats 0, 3, 6, 9 act every tick on the newest
    observation (delay 1), seats 1, 4, 7, 10 every fourth tick on an observation two ticks old
    (delay 3), the rest never (β: noop, the move to their own cell). Agents die; each tick the log
    says, seat by seat, what was applied, with which delay, who was absent (dead) and who idle."""
    ticks = 160
    rng = np.random.default_rng(1)
    with Session(
        "multi/battle", clock="virtual", seed=0, env_kwargs={"map_size": 16, "max_cycles": 1000}, default="noop"
    ) as world:
        env, seats = world.host.env, world.seats
        assert seats is not None and len(seats) == 12 and world.tau_m == pytest.approx(1 / 20)
        expected_source = np.full((ticks, 12), SOURCE_DEFAULT)
        expected_delay = np.full((ticks, 12), -1)
        expected_action = np.full((ticks, 12), 6.0)  # β's noop
        history: list[list] = []  # each tick's observations, by seat
        alive = set(env.agents)
        for t in range(ticks):  # before tick t + 1
            latest = [slot.read() for slot in world.slots]
            history.append([lt.obs for lt in latest])
            for i, seat in enumerate(seats):
                if seat not in alive:
                    expected_source[t, i], expected_action[t, i] = SOURCE_ABSENT, np.nan
                    assert latest[i].terminated  # its slot says it is gone
                    continue
                slow = i % 3 == 1
                if i % 3 == 0 or (slow and t % 4 == 0):
                    back = 2 if slow else 0
                    obs_tick = max(latest[i].tick - back, 0)
                    action = brawl(history[obs_tick][i], rng)
                    world.queues[i].submit(action, obs_tick=obs_tick, episode=latest[i].episode)
                    expected_source[t, i], expected_action[t, i] = SOURCE_AGENT, action
                    expected_delay[t, i] = t + 1 - obs_tick
            run_ticks(world, 1)
            if not env.agents:  # the battle ended: the world reset at once
                break
            alive = set(env.agents)
        n = t + 1
    log = world.tick_log
    assert log["episode"][-1] == 0, "the battle ended inside the test: the expectations assume one episode"
    source, delay, action, reward = (log.block(q) for q in ("source", "delay", "action", "reward"))
    assert np.array_equal(source, expected_source[:n])
    assert np.array_equal(delay, expected_delay[:n])
    assert np.array_equal(action, expected_action[:n], equal_nan=True)
    dead = (source == SOURCE_ABSENT).any(axis=0)
    assert 2 <= dead.sum() < 12, "some seats must die, not all"
    assert (reward[source == SOURCE_ABSENT] == 0).all()
    summary = log.summary(teams=teams_of(seats))
    for i, seat in enumerate(seats):
        s = summary["seats"][seat]
        absent = int((source[:, i] == SOURCE_ABSENT).sum())
        assert s["absent_ticks"] == absent and s["agent_ticks"] + s["inaction_ticks"] + absent == n
        if i % 3 == 0:
            assert s["inaction_ticks"] == 0 and s["delay_histogram"] == (
                {1: s["agent_ticks"]} if s["agent_ticks"] else {}
            )
        elif i % 3 == 1:
            assert s["inaction_ticks"] > 0 and set(s["delay_histogram"]) <= {1, 3}  # 1: tick 1's, from tick 0
        else:
            assert s["agent_ticks"] == 0
    assert summary["teams"]["red"]["seats"] == [s for s in seats if s.startswith("red_")]


def test_gather_runs_its_495_seats() -> None:
    with Session("multi/gather", clock="virtual", seed=0, env_kwargs={"max_cycles": 10}) as world:
        assert world.seats is not None and len(world.seats) == 495
        world.run_for(12 / 20)
    log = world.tick_log
    assert log.seats == 495 and log["truncated"].nonzero()[0].tolist() == [9]
    assert (log.block("source")[:10] == SOURCE_DEFAULT).all()  # nobody acted: β everywhere, nobody absent


def test_battle_agents_counts_what_magent2_places_and_the_map_for_a_thousand() -> None:
    """`battle_agents` agrees with the agents MAgent2 puts on a map (small maps lose border cells);
    `battle_map_for` gives the smallest map of at least n (45, the default, at least)."""
    from nonstop.envs.magent import BATTLE_1000_MAP, battle_agents, battle_map_for

    for map_size in (12, 15, 16, 20, 33):
        assert battle_agents(map_size) == len(make_env("multi/battle", map_size=map_size).possible_agents)
    assert [battle_agents(m) for m in (45, 80, 110, 115)] == [162, 512, 968, 1058]
    assert battle_map_for(162) == 45 and battle_map_for(163) == 50 and battle_map_for(1000) == BATTLE_1000_MAP
    with pytest.raises(ValueError, match="agents must be a positive integer"):
        battle_map_for(0)
    with pytest.raises(ValueError, match="no battle map"):
        battle_map_for(10**6)


@pytest.mark.parametrize("env_id,agents", [("multi/battle-1000", 1058), ("multi/gather", 495)])
def test_parallel_api_test_on_the_worlds_of_hundreds_of_agents(env_id: str, agents: int) -> None:
    """PettingZoo's checks on the realtime view of the ~1,000-agent battle (a 115×115 map) and of
    gather's 495 agents: a few cycles each, episodes cut short so a reset is checked too."""
    from pettingzoo.test import parallel_api_test

    import nonstop

    env = nonstop.make_parallel(env_id, clock="virtual", seed=0, env_kwargs={"max_cycles": 5})
    try:
        assert len(env.possible_agents) == agents
        parallel_api_test(env, num_cycles=8)
    finally:
        env.close()
    with pytest.raises(TypeError, match="map_size"):  # its map is fixed: another is multi/battle's map_size
        env_info("multi/battle-1000", map_size=80)
