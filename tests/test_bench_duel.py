"""``nonstop bench duel`` on two-player Boxing: the scripted boxer it puts on both seats, and the
head-to-head pairings (virtual clock, short matches)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from gymnasium import spaces

pytest.importorskip("multi_agent_ale_py")

from nonstop.bench.duel import DuelSetup, play, render, run
from nonstop.envs.atari_multi import TwoPlayerAtari
from nonstop.policies import RandomPolicy
from nonstop.policies.scripted import ScriptedBoxer, boxer_positions

SEATS = ("first_0", "second_0")


def _match(players: dict, ticks: int) -> tuple[np.ndarray, TwoPlayerAtari]:
    """Both seats' points after ``ticks`` ticks (or a KO), stepping the env directly."""
    env = TwoPlayerAtari("Boxing", max_frames=ticks)
    obs, _ = env.reset()
    points = np.zeros(2)
    while env.agents:
        obs, rewards, *_ = env.step({seat: players[seat].act(obs[seat]).action for seat in SEATS})
        points += [rewards[seat] for seat in SEATS]
    return points, env


def test_boxing_action_set_is_the_one_the_scripted_boxer_speaks():
    env = TwoPlayerAtari("Boxing")
    assert env._actions.tolist() == list(range(18))  # ScriptedBoxer returns indices into the ALE's 18 actions


@pytest.mark.parametrize("seat", SEATS)
def test_scripted_boxer_beats_a_random_player_from_either_seat(seat):
    other = SEATS[1 - SEATS.index(seat)]
    margins = []
    for match in range(2):
        players = {
            seat: ScriptedBoxer(seat, epsilon=0.05, seed=match),
            other: RandomPolicy(spaces.Discrete(18), seed=10 + match),
        }
        points, _ = _match(players, 900)
        margins.append(points[SEATS.index(seat)] - points[SEATS.index(other)])
    # a random player lands a point now and then; the script lands dozens in 15 s
    assert min(margins) > 0 and sum(margins) >= 40, margins


def test_boxer_positions_track_the_rom_for_both_colours():
    """Read off the screen, each seat's boxer sits where the ROM says (RAM 32/33: x of white/black,
    34/35: y), up to a constant offset, so seats know which boxer they are and where the other is."""
    env = TwoPlayerAtari("Boxing", max_frames=400)
    players = {s: ScriptedBoxer(s, epsilon=0.3, seed=i) for i, s in enumerate(SEATS)}
    obs, _ = env.reset()
    gaps = []
    while env.agents:
        obs, *_ = env.step({s: players[s].act(obs[s]).action for s in SEATS})
        found, ram = boxer_positions(obs["first_0"]), env.ale.getRAM().astype(int)
        (wy, wx), (by, bx) = found["first_0"], found["second_0"]
        gaps.append((bx - wx - (ram[33] - ram[32]), by - wy - (ram[35] - ram[34])))
    gaps = np.abs(np.array(gaps))
    assert np.median(gaps[:, 0]) <= 1 and np.median(gaps[:, 1]) <= 2
    assert (gaps[:, 0] <= 1).mean() > 0.95


def test_scripted_boxer_validates_its_arguments():
    with pytest.raises(ValueError, match="seat must be one of"):
        ScriptedBoxer("player_1")
    with pytest.raises(ValueError, match="epsilon must be a probability"):
        ScriptedBoxer("first_0", epsilon=1.5)
    with pytest.raises(ValueError, match="reach must be"):
        ScriptedBoxer("first_0", reach=float("nan"))
    blank = np.full((210, 160, 3), 110, np.uint8)  # no boxer on the screen: stand still
    assert ScriptedBoxer("second_0").act(blank).action == 0


def test_scripted_boxer_is_reproducible_under_its_seed():
    screen = TwoPlayerAtari("Boxing").reset()[0]["first_0"]
    a = [ScriptedBoxer("first_0", epsilon=0.5, seed=7).act(screen).action for _ in range(1)]
    one, two = ScriptedBoxer("first_0", epsilon=0.5, seed=7), ScriptedBoxer("first_0", epsilon=0.5, seed=7)
    assert [one.act(screen).action for _ in range(30)] == [two.act(screen).action for _ in range(30)]
    assert a


# ----------------------------------------------------------------------------- the bench


def test_boxing_pairings_slow_side_loses_and_staggering_trades_inaction_for_delay():
    even = play(0, False, DuelSetup(env="multi/Boxing", matches=2, match_ticks=300))
    assert even["inaction_fraction"] == 0 and even["delay_mean_ticks"] == 1 and even["n_inference"] == 1
    assert even["world_seconds"] == pytest.approx(2 * 300 / 60)
    seq = play(30, False, DuelSetup(env="multi/Boxing", matches=2, match_ticks=300))
    stag = play(30, True, DuelSetup(env="multi/Boxing", matches=2, match_ticks=300))
    assert seq["score_differential"] < 0 and seq["win_rate"] < 0.5  # half a second of latency loses
    assert seq["inaction_fraction"] == pytest.approx(30 / 31, abs=0.02) and seq["delay_mean_ticks"] == 31
    # staggered: β only at a world's start, while the 31 workers' first cycles (max_time learning
    # τ_θ, then spacing the workers) are in flight: about two inference times
    assert stag["n_inference"] == 31 and stag["inaction_fraction"] <= 2 * 31 / 300 + 0.01
    assert stag["delay_mean_ticks"] == pytest.approx(31, abs=0.2)
    assert len(seq["differentials"]) == 2


def test_the_slowed_side_plays_both_seats():
    """With two matches the slowed side is second_0 in one and first_0 in the other: a 0-tick
    pairing then has the same two matches mirrored, so their differentials cancel."""
    even = play(0, False, DuelSetup(env="multi/Boxing", matches=2, match_ticks=240, epsilon=0.0))
    first, second = even["differentials"]
    assert first == -second and even["score_differential"] == 0 and even["win_rate"] == 0.5


def test_bench_duel_run_writes_a_table_and_a_plot(tmp_path, capsys):
    args = argparse.Namespace(
        env="multi/Boxing",
        extra="0,6",
        base_ticks=1,
        matches=2,
        match_ticks=120,
        epsilon=0.05,
        rounds=10,
        seed=0,
        plot=str(tmp_path / "duel.png"),
        quick=False,
    )
    result = run(args)
    assert [(p["extra_ticks"], p["mode"]) for p in result["pairings"]] == [
        (0, "sequential"),
        (0, "staggered"),
        (6, "sequential"),
        (6, "staggered"),
    ]
    assert result["match_ticks"] == 120 and result["world_seconds_total"] == pytest.approx(4 * 2 * 120 / 60)
    assert (tmp_path / "duel.png").stat().st_size > 10_000
    json.dumps(result)  # the --json output
    render(result)
    out = capsys.readouterr().out
    assert "matches cut at 120 ticks" in out and "staggered" in out


def test_play_validates_its_arguments():
    with pytest.raises(ValueError, match="bench duel plays"):
        play(0, True, DuelSetup(env="multi/Pong"))
    with pytest.raises(ValueError, match="match_ticks is out of range: 0"):
        play(0, True, DuelSetup(env="multi/Boxing", match_ticks=0))
    with pytest.raises(ValueError, match="epsilon must be a probability"):
        play(0, True, DuelSetup(env="multi/Boxing", epsilon=-0.1))


def test_bench_duel_help_renders():
    from nonstop.bench import duel

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    duel.add_arguments(sub.add_parser("duel", help=duel.DESCRIPTION))
    text = sub.choices["duel"].format_help()  # argparse %-formats every help string
    assert "--match-ticks" in text and "multi/Boxing" in text


# ----------------------------------------------------------------------------- bench host, two seats


def test_bench_host_on_two_player_atari_also_times_plain_multi_agent_ale_py():
    from nonstop.bench import host

    parser = argparse.ArgumentParser()
    host.add_arguments(parser)
    args = parser.parse_args(["--env", "multi/Boxing", "--steps", "300", "--repeats", "2"])
    args.quick = True
    result = host.run(args)
    assert result["ale_runs"]["n"] == 2 and result["ratio_pairs_vs_ale"]["n"] == 2
    assert result["ratio_vs_ale"] == pytest.approx(result["host_steps_per_s"] / result["ale_steps_per_s"])
    assert isinstance(result["meets_target_vs_ale"], bool) and result["ale_cpu_steps_per_s"] > 0
    json.loads(json.dumps(result, allow_nan=False))


def test_plain_ale_loop_and_the_env_step_the_same_game():
    """The env's direct C calls and the library's wrapper give the same frames and rewards."""
    fast, plain = TwoPlayerAtari("Boxing"), TwoPlayerAtari("Boxing")
    fast.reset(), plain.reset()
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = (int(x) for x in rng.integers(18, size=2))
        obs, rewards, *_ = fast.step({"first_0": a, "second_0": b})
        expected = plain.ale.act(np.array([a, b], np.int32))
        assert [rewards["first_0"], rewards["second_0"]] == expected.tolist()
        assert np.array_equal(obs["first_0"], plain.ale.getScreenRGB())
    assert obs["first_0"] is obs["second_0"]  # one screen, both seats
