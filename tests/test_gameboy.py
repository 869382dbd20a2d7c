"""Game Boy worlds: the self-assembled test ROM run for real through PyBoy and the realtime host,
ROM and save-state validation, and the paper's Tetris and Pokémon rewards on synthetic RAM.

No commercial ROM is used anywhere: the cartridges here are built by `nonstop.envs.gbrom`, some
retitled to stand in for a game whose ROM nonstop must recognise or refuse.
"""

from __future__ import annotations

import doctest
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyboy")  # the test extra installs it; only a bare install lacks it

from conftest import run_ticks

from nonstop.cli import main
from nonstop.envs import env_info, list_envs, make_env
from nonstop.envs import gameboy, gbrewards, gbrom
from nonstop.envs.gameboy import (
    ACTIONS,
    GAMEBOY_TICK_HZ,
    GameBoyEnv,
    RomError,
    find_rom,
    make_gameboy,
)
from nonstop.envs.gbtools import parse_presses, plain_pyboy_loop, record_state
from nonstop.envs.gbrewards import (
    POKEMON_BATTLE_MON_HP,
    POKEMON_BOX_COUNT,
    POKEMON_ENEMY_MON_HP,
    POKEMON_IS_IN_BATTLE,
    POKEMON_PARTY_COUNT,
    TETRIS_GAME_STATE,
    TETRIS_SCORE,
    PokemonBattleReward,
    PokemonCatchReward,
    ScoreDelta,
    bcd_le,
)
from nonstop.envs.gbrom import (
    TEST_ROM_GAME_OVER_X,
    TEST_ROM_RAM,
    CartridgeHeader,
    build_test_rom,
    global_checksum,
    header_checksum,
)
from nonstop.realtime.host import Session

A, B, LEFT, UP, RIGHT, DOWN = (ACTIONS.index(name) for name in ("A", "B", "LEFT", "UP", "RIGHT", "DOWN"))
SCORE = TEST_ROM_RAM["score"]


@pytest.fixture(autouse=True)
def _no_user_roms(monkeypatch):
    """Tests decide where ROMs are; a developer's own $NONSTOP_ROMS must not leak in."""
    monkeypatch.delenv(gameboy.ROMS_ENV_VAR, raising=False)


class _Tracked:
    """A PyBoy that remembers whether it was stopped (PyBoy's own flag is not visible from Python)."""

    def __init__(self, emulator) -> None:
        self._emulator, self.stopped = emulator, False

    def __getattr__(self, name):
        return getattr(self._emulator, name)

    def stop(self, *args, **kwargs):
        self.stopped = True
        return self._emulator.stop(*args, **kwargs)


@pytest.fixture
def emulators(monkeypatch):
    """Every PyBoy the module starts, to check that none is left running."""
    started = []
    real = gameboy._start_pyboy

    def spy(rom):
        emulator = _Tracked(real(rom))
        started.append(emulator)
        return emulator

    monkeypatch.setattr(gameboy, "_start_pyboy", spy)
    return started


def write_rom(path: Path, title: str = "NONSTOP TEST") -> Path:
    path.write_bytes(build_test_rom(title))
    return path


# --- the cartridge --------------------------------------------------------------------------------


def test_test_rom_header_is_valid():
    rom = build_test_rom()
    header = CartridgeHeader.parse(rom)
    assert (header.title, header.cartridge_type, header.rom_banks) == ("NONSTOP TEST", 0x00, 2)
    assert rom[0x14D] == header_checksum(rom) and header.header_checksum_ok
    assert int.from_bytes(rom[0x14E:0x150], "big") == global_checksum(rom) and header.global_checksum_ok
    assert rom[0x100:0x104] == bytes((0x00, 0xC3, 0x50, 0x01))  # NOP; JP 0x0150
    assert build_test_rom() == rom  # byte-for-byte reproducible


def test_header_checksums_catch_corruption():
    rom = bytearray(build_test_rom())
    rom[0x200] ^= 0xFF  # a program byte: only the global checksum notices
    header = CartridgeHeader.parse(bytes(rom))
    assert header.header_checksum_ok and not header.global_checksum_ok
    rom[0x147] = 0x01  # a header byte: the header checksum notices
    assert not CartridgeHeader.parse(bytes(rom)).header_checksum_ok


def test_header_rejects_what_cannot_be_a_rom():
    with pytest.raises(RomError, match="multiple of 16 KiB"):
        CartridgeHeader.parse(b"\0" * 1000)
    with pytest.raises(ValueError, match="1 to 15 ASCII"):
        build_test_rom("A TITLE FAR TOO LONG")


# --- the env on the test ROM ----------------------------------------------------------------------


def test_registered_with_the_paper_rate_and_noop():
    info = env_info("GameBoy/TestROM")
    assert info.family == "gameboy" and info.noop_action == 0 and info.default_beta == "noop"
    assert info.tick_hz == pytest.approx(59.7275, abs=1e-4) == GAMEBOY_TICK_HZ
    assert {"GameBoy/TestROM", "GameBoy/Tetris", "GameBoy/PokemonBattle", "GameBoy/PokemonCatch"} <= {
        e.env_id for e in list_envs()
    }


def test_buttons_drive_the_program_and_score_is_the_reward():
    env = GameBoyEnv("TestROM", obs_type="ram")
    try:
        env.reset(seed=0)
        rewards = [env.step(a)[1] for a in (A, A, B, 0, B)]
        assert rewards == [1.0, 1.0, 10.0, 0.0, 10.0]
        assert env.read_ram(SCORE, 3) == 22 and bcd_le(env._emulator.memory, SCORE, 3) == 22
        for action, x, y in ((RIGHT, 1, 0), (RIGHT, 2, 0), (LEFT, 1, 0), (UP, 1, 1), (DOWN, 1, 0), (0, 1, 0)):
            ram = env.step(action)[0]
            assert (env.read_ram(TEST_ROM_RAM["x"]), env.read_ram(TEST_ROM_RAM["y"])) == (x, y)
            assert ram[TEST_ROM_RAM["x"] - 0xC000] == x  # the RAM observation is the same memory
        frame = env.read_ram(TEST_ROM_RAM["frame"])
        env.step(0)
        assert env.read_ram(TEST_ROM_RAM["frame"]) == (frame + 1) % 256  # one step, one frame
    finally:
        env.close()


def test_bcd_score_carries_across_bytes():
    env = GameBoyEnv("TestROM", obs_type="ram")
    try:
        env.reset(seed=0)
        total = sum(env.step(B)[1] for _ in range(12))  # 12 x 10 = 120: carries into the second byte
        assert total == 120.0 and env.read_ram(SCORE + 1) == 0x01 and env.read_ram(SCORE) == 0x20
    finally:
        env.close()


def test_game_over_terminates_and_reset_restores_the_start():
    env = make_gameboy("TestROM", obs_type="gray")
    try:
        first, _ = env.reset(seed=3)
        steps = [env.step(RIGHT) for _ in range(TEST_ROM_GAME_OVER_X)]
        assert [s[2] for s in steps] == [False] * (TEST_ROM_GAME_OVER_X - 1) + [True]
        # The program moves SCX in VBlank, so a frame shows the x of the frame before (as on the
        # console). 8 pixels of scroll invert the 8-pixel checkerboard; 16 bring it back.
        assert np.array_equal(steps[8][0], 255 - first) and np.array_equal(steps[16][0], first)
        assert not np.array_equal(steps[7][0], 255 - first)
        again, _ = env.reset(seed=3)
        np.testing.assert_array_equal(again, first)
        assert env.unwrapped.read_ram(TEST_ROM_RAM["x"]) == 0 and env.unwrapped.read_ram(SCORE, 3) == 0
    finally:
        env.close()


def test_observations_default_to_the_paper_84x84_gray():
    env = make_env("GameBoy/TestROM")
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (84, 84) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
        moved = [env.step(RIGHT)[0] for _ in range(4)][-1]
        assert not np.array_equal(moved, obs)  # actions change what the agent sees
        assert set(np.unique(make_gameboy("TestROM", obs_type="gray").reset()[0])) == {0, 255}
        rgb = make_gameboy("TestROM", obs_type="rgb").reset()[0]
        assert rgb.shape == (144, 160, 3)
    finally:
        env.close()


def test_invalid_actions_are_refused():
    env = GameBoyEnv("TestROM")
    try:
        env.reset()
        for bad in (7, -1, 1.5):
            with pytest.raises(ValueError, match="Discrete"):
                env.step(bad)
    finally:
        env.close()


def _trace(seed: int, actions: list[int]) -> tuple[int, str]:
    env = make_gameboy("TestROM")
    try:
        div = env.reset(seed=seed)[1]["timer_div"]
        digest = hashlib.sha256()
        for action in actions:
            obs, reward, *_ = env.step(action)
            digest.update(obs.tobytes())
            digest.update(np.float64(reward).tobytes())
        return div, digest.hexdigest()
    finally:
        env.close()


def test_same_seed_same_actions_same_frames():
    actions = list(np.random.default_rng(0).integers(0, len(ACTIONS), 120))
    first, second = _trace(5, actions), _trace(5, actions)
    assert first == second
    assert _trace(6, actions)[0] != first[0]  # the seed sets the DIV register


# --- in realtime on the host ----------------------------------------------------------------------


def test_realtime_session_beta_actions_and_rewards(no_shm_leak):
    with Session("GameBoy/TestROM", clock="virtual", seed=0) as world:
        assert world.tick_hz == GAMEBOY_TICK_HZ
        run_ticks(world, 10)  # nobody acts: β holds no button, nothing scores
        world.queue.submit(A, obs_tick=world.slot.read().tick, episode=0)
        run_ticks(world, 1)
        run_ticks(world, 5)  # β's noop releases A
        world.queue.submit(B, obs_tick=world.slot.read().tick, episode=0)
        run_ticks(world, 1)
        ram_score = world.host.env.unwrapped.read_ram(SCORE, 3)
    log = world.tick_log
    summary = log.summary()
    assert (summary["ticks"], summary["agent_ticks"], summary["inaction_ticks"]) == (17, 2, 15)
    rewards = log["reward"]
    assert rewards[10] == 1.0 and rewards[16] == 10.0 and rewards.sum() == 11.0 == ram_score


def test_repeat_beta_holds_the_button_to_game_over(no_shm_leak):
    with Session("GameBoy/TestROM", clock="virtual", seed=0, default="repeat") as world:
        world.queue.submit(RIGHT, obs_tick=0, episode=0)
        run_ticks(world, TEST_ROM_GAME_OVER_X + 3)
        episode = world.host.episode
    log = world.tick_log
    assert log["terminated"][TEST_ROM_GAME_OVER_X - 1] == 1 and episode == 1  # the host reset at once
    assert int(log["terminated"].sum()) == 1


def _scripted_run(seed: int) -> tuple[np.ndarray, np.ndarray, bytes]:
    plan = {3: A, 9: RIGHT, 20: B, 31: UP, 40: A}
    with Session("GameBoy/TestROM", clock="virtual", seed=seed, default="repeat") as world:
        for tick in range(50):
            if tick in plan:
                world.queue.submit(plan[tick], obs_tick=world.slot.read().tick, episode=0)
            run_ticks(world, 1)
        screen = world.slot.read().obs.copy()
        ram = bytes(world.host.env.unwrapped.read_ram(a) for a in range(0xC000, 0xC100))
    log = world.tick_log
    return np.stack([log["action"], log["reward"], log["source"]]), screen, ram + screen.tobytes()


def test_replays_are_exact_on_the_virtual_clock(no_shm_leak):
    first, second = _scripted_run(7), _scripted_run(7)
    np.testing.assert_array_equal(first[0], second[0])
    assert first[2] == second[2]
    assert first[0][1].sum() == 6 * 1 + 11 * 10 + 10 * 1  # A, B, A, each held by β=repeat until replaced


@pytest.mark.wall
def test_wall_clock_host_process(no_shm_leak):
    with Session("GameBoy/TestROM", clock="wall", seed=0, default="repeat") as world:
        world.queue.submit(A, obs_tick=0, episode=0)
        world.run_for(0.3)
    log = world.tick_log
    assert len(log) >= 10 and log["reward"].sum() == len(log)  # A held every frame: +1 each


# --- ROMs from the user ---------------------------------------------------------------------------


def test_rom_from_path_directory_and_env_var(tmp_path, monkeypatch):
    write_rom(tmp_path / "fake_tetris.gb", "TETRIS")
    write_rom(tmp_path / "other.gb", "SOMETHING ELSE")
    (tmp_path / "notes.gb").write_bytes(b"not a rom")
    assert find_rom("Tetris", tmp_path / "fake_tetris.gb").header.title == "TETRIS"
    assert find_rom("Tetris", tmp_path).source.endswith("fake_tetris.gb")
    monkeypatch.setenv(gameboy.ROMS_ENV_VAR, str(tmp_path))
    assert find_rom("Tetris").source.endswith("fake_tetris.gb")
    with pytest.raises(
        RomError,
        match=r"no PokemonBattle ROM in .*NONSTOP_ROMS.*notes.gb \(not a Game Boy ROM\), other.gb \('SOMETHING ELSE'\)",
    ):
        find_rom("PokemonBattle")


def test_missing_rom_says_where_nonstop_looked(tmp_path, monkeypatch):
    with pytest.raises(RomError, match=r"no ROM for Tetris: pass rom=PATH .*NONSTOP_ROMS.*'TETRIS'"):
        make_env("GameBoy/Tetris")
    with pytest.raises(RomError, match=r"ROM not found at .*nothing.gb"):
        make_env("GameBoy/Tetris", rom=str(tmp_path / "nothing.gb"))
    monkeypatch.setenv(gameboy.ROMS_ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(RomError, match="not a directory"):
        find_rom("Tetris")


def test_the_missing_rom_and_state_errors_name_flags_that_exist(capsys, monkeypatch):
    """The ROM error once said ``--rom PATH``, which `nonstop train` does not take (it takes
    ``--env-arg rom=PATH``); each flag the errors name must exist on the command they name it for."""
    import argparse
    import re

    from nonstop.cli import build_parser

    monkeypatch.delenv(gameboy.ROMS_ENV_VAR, raising=False)
    assert main(["train", "--env", "GameBoy/Tetris", "--seconds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--env-arg rom=PATH" in err and len(err.strip().splitlines()) == 1
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    def options(p: argparse.ArgumentParser) -> set[str]:  # a verb's flags and those of its actions (gameboy check, ...)
        found = set(p._option_string_actions)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found |= options(sub)
        return found

    for message in (err, gameboy._needs_state(gameboy._game("PokemonBattle"))):
        named = re.findall(r"`nonstop (\w+)`: (--[\w-]+)", message)
        assert {verb for verb, _ in named} == {"train", "gameboy"}, message
        for verb, flag in named:
            assert flag in options(verbs[verb]), f"{message!r} names {flag} for `nonstop {verb}`, which has none"


def test_wrong_game_and_corrupt_roms_are_refused(tmp_path):
    rom = write_rom(tmp_path / "test.gb")
    with pytest.raises(
        RomError, match=r"is not Tetris: its cartridge header title is 'NONSTOP TEST', expected 'TETRIS'"
    ):
        make_env("GameBoy/Tetris", rom=str(rom))
    data = bytearray(build_test_rom("TETRIS"))
    data[0x300] ^= 0x55
    (tmp_path / "bad.gb").write_bytes(bytes(data))
    with pytest.raises(RomError, match="global checksum"):
        make_env("GameBoy/Tetris", rom=str(tmp_path / "bad.gb"))
    data[0x148] ^= 0x01
    (tmp_path / "bad.gb").write_bytes(bytes(data))
    with pytest.raises(RomError, match="header checksum"):
        find_rom("Tetris", tmp_path / "bad.gb")
    (tmp_path / "short.gb").write_bytes(bytes(data[:20000]))
    with pytest.raises(RomError, match="20000 bytes"):
        find_rom("Tetris", tmp_path / "short.gb")


def test_a_rom_titled_tetris_that_is_not_tetris_fails_instead_of_hanging(tmp_path, emulators):
    impostor = write_rom(tmp_path / "tetris.gb", "TETRIS")  # our program behind Tetris's title
    with pytest.raises(RomError, match="never showed Tetris's title screen"):
        make_env("GameBoy/Tetris", rom=str(impostor))
    assert len(emulators) == 1 and emulators[0].stopped


def test_unknown_game_names():
    with pytest.raises(ValueError, match="unknown environment id 'GameBoy/Zelda'"):
        make_env("GameBoy/Zelda")
    with pytest.raises(ValueError, match="nonstop knows TestROM, Tetris"):
        make_gameboy("Zelda")
    with pytest.raises(ValueError, match="obs_type"):
        make_env("GameBoy/TestROM", obs_type="grey")


def test_bad_rom_fails_before_a_session_starts(tmp_path, no_shm_leak, emulators):
    with pytest.raises(RomError, match="is not Tetris"):
        Session("GameBoy/Tetris", env_kwargs={"rom": str(write_rom(tmp_path / "t.gb"))})
    assert emulators == []  # refused at the door: no emulator was ever started


# --- save states ----------------------------------------------------------------------------------


def test_recorded_state_starts_episodes_where_it_was_saved(tmp_path):
    state = tmp_path / "five.state"
    report = record_state("TestROM", state, presses="a*5,wait*2")
    assert report["frames_played"] == 7
    env = GameBoyEnv("TestROM", state=state, obs_type="ram")
    try:
        env.reset(seed=0)
        assert env.read_ram(SCORE, 3) == 5
        assert env.step(A)[1] == 1.0 and env.read_ram(SCORE, 3) == 6  # the reward is the change
        env.reset(seed=0)
        assert env.read_ram(SCORE, 3) == 5
    finally:
        env.close()


def test_state_for_another_rom_is_refused(tmp_path, emulators):
    state = tmp_path / "test.state"
    record_state("TestROM", state)
    fake_blue = write_rom(tmp_path / "blue.gb", "POKEMON BLUE")
    with pytest.raises(RomError, match=r"recorded on another ROM \('NONSTOP TEST'.*this ROM is 'POKEMON BLUE'"):
        make_env("GameBoy/PokemonBattle", rom=str(fake_blue), state=str(state))
    assert all(e.stopped for e in emulators)  # record_state's emulator was stopped


def test_raw_or_damaged_states_are_refused(tmp_path):
    raw = tmp_path / "raw.state"
    raw.write_bytes(b"\x09" * 100)
    with pytest.raises(RomError, match=r"not a nonstop save state; wrap .*record-state"):
        make_env("GameBoy/TestROM", state=str(raw))
    with pytest.raises(RomError, match="cannot read save state"):
        make_env("GameBoy/TestROM", state=str(tmp_path / "absent.state"))
    damaged = tmp_path / "damaged.state"
    gameboy.write_state(damaged, b"\x1d" + bytes(50), find_rom("TestROM"), "TestROM")
    with pytest.raises(RomError, match="could not be loaded by PyBoy"):
        make_env("GameBoy/TestROM", state=str(damaged))


def test_episodes_truncate_after_max_steps():
    env = make_gameboy("TestROM", max_episode_steps=3)
    try:
        env.reset(seed=0)
        assert [env.step(0)[3] for _ in range(3)] == [False, False, True]
    finally:
        env.close()
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env("GameBoy/TestROM", max_episode_steps=0)


def test_pokemon_needs_a_state_inside_a_battle(tmp_path, emulators):
    fake_red = write_rom(tmp_path / "red.gb", "POKEMON RED")
    with pytest.raises(RomError, match="start from a save state"):
        make_env("GameBoy/PokemonCatch", rom=str(fake_red))
    state = tmp_path / "overworld.state"
    record_state("PokemonCatch", state, rom=fake_red, boot_frames=80)  # the fake game: never in battle
    with pytest.raises(RomError, match=r"must start inside a battle.*wIsInBattle = 0x00"):
        make_env("GameBoy/PokemonCatch", rom=str(fake_red), state=str(state))
    assert len(emulators) == 2 and all(e.stopped for e in emulators)  # nothing left running


def test_record_state_from_a_pyboy_state(tmp_path):
    env = GameBoyEnv("TestROM", obs_type="ram")
    try:
        env.reset(seed=0)
        for _ in range(4):
            env.step(B)
        (tmp_path / "pyboy.state").write_bytes(env.save_state())  # what PyBoy's Z key writes
    finally:
        env.close()
    record_state("TestROM", tmp_path / "wrapped.state", from_state=tmp_path / "pyboy.state", presses="a")
    again = GameBoyEnv("TestROM", state=tmp_path / "wrapped.state", obs_type="ram")
    try:
        again.reset()
        assert again.read_ram(SCORE, 3) == 41
    finally:
        again.close()


def test_press_scripts():
    assert parse_presses("start*2, wait*60,A") == [("start", 2), ("wait", 60), ("a", 1)]
    for bad, message in (("jump", "unknown button"), ("a*x", "whole number"), ("a*0", "at least 1")):
        with pytest.raises(ValueError, match=message):
            parse_presses(bad)


# --- rewards from memory (synthetic RAM: the commercial games cannot be run here) ------------------


def _battle(in_battle=1, enemy=30, own=25):
    return {
        POKEMON_IS_IN_BATTLE: in_battle,
        POKEMON_ENEMY_MON_HP: enemy >> 8,
        POKEMON_ENEMY_MON_HP + 1: enemy & 0xFF,
        POKEMON_BATTLE_MON_HP: own >> 8,
        POKEMON_BATTLE_MON_HP + 1: own & 0xFF,
        POKEMON_PARTY_COUNT: 2,
        POKEMON_BOX_COUNT: 0,
    }


def _set_hp(ram, address, hp):
    ram[address], ram[address + 1] = hp >> 8, hp & 0xFF


def test_tetris_reward_is_the_change_in_bcd_score():
    ram = {TETRIS_SCORE: 0, TETRIS_SCORE + 1: 0, TETRIS_SCORE + 2: 0, TETRIS_GAME_STATE: 0}
    reward = gameboy.GAMES["Tetris"].reward()
    reward.reset(ram)
    ram[TETRIS_SCORE], ram[TETRIS_SCORE + 1] = 0x00, 0x12  # 1200: a Tetris at level 0
    assert reward.step(ram) == (1200.0, False)
    ram[TETRIS_SCORE], ram[TETRIS_SCORE + 1], ram[TETRIS_SCORE + 2] = 0x56, 0x34, 0x12  # 123,456
    assert reward.step(ram) == (123_456.0 - 1200.0, False)
    assert reward.step(ram) == (0.0, False)
    for over in (0x04, 0x0D):
        ram[TETRIS_GAME_STATE] = over
        assert reward.step(ram) == (0.0, True)


def test_game_specs_validate():
    with pytest.raises(ValueError, match="start"):
        gameboy.GameSpec("X", ("X",), ScoreDelta, "cartridge", "")
    with pytest.raises(ValueError, match="titles"):
        gameboy.GameSpec("X", (), ScoreDelta, "boot", "")


def test_score_delta_validates():
    with pytest.raises(ValueError, match="n_bytes"):
        ScoreDelta(0xC0A0, 5, game_over_address=0, game_over_values=())


def test_pokemon_battle_rewards_faints():
    ram, battle = _battle(), PokemonBattleReward()
    battle.reset(ram)
    _set_hp(ram, POKEMON_ENEMY_MON_HP, 12)
    assert battle.step(ram) == (0.0, False)  # damage is not a faint
    _set_hp(ram, POKEMON_ENEMY_MON_HP, 0)
    assert battle.step(ram) == (1.0, False)
    assert battle.step(ram) == (0.0, False)  # still fainted: counted once
    _set_hp(ram, POKEMON_ENEMY_MON_HP, 40)
    assert battle.step(ram) == (0.0, False)  # the next opponent is sent out
    _set_hp(ram, POKEMON_BATTLE_MON_HP, 0)
    assert battle.step(ram) == (-1.0, False)
    _set_hp(ram, POKEMON_BATTLE_MON_HP, 18)
    _set_hp(ram, POKEMON_ENEMY_MON_HP, 0)
    assert battle.step(ram) == (1.0, False)
    ram[POKEMON_IS_IN_BATTLE] = 0
    assert battle.step(ram) == (0.0, True)  # won: the last faint already paid +1


def test_pokemon_battle_simultaneous_faints_and_a_loss():
    ram, battle = _battle(in_battle=2), PokemonBattleReward()
    battle.reset(ram)
    _set_hp(ram, POKEMON_ENEMY_MON_HP, 0)
    _set_hp(ram, POKEMON_BATTLE_MON_HP, 0)
    assert battle.step(ram) == (0.0, False)  # +1 and -1 on the same frame
    ram[POKEMON_IS_IN_BATTLE] = 0xFF  # the game marks a lost battle with -1
    assert battle.step(ram) == (0.0, True)


def test_pokemon_catch_rewards():
    ram, catch = _battle(), PokemonCatchReward()
    catch.reset(ram)
    assert catch.step(ram) == (0.0, False)
    ram[POKEMON_PARTY_COUNT] = 3
    assert catch.step(ram) == (1.0, False)
    ram[POKEMON_IS_IN_BATTLE] = 0
    assert catch.step(ram) == (0.0, True)  # caught: no penalty when the encounter ends
    ram = _battle()
    ram[POKEMON_PARTY_COUNT] = 6
    catch.reset(ram)
    ram[POKEMON_BOX_COUNT] = 1  # a full party sends the catch to the PC box
    assert catch.step(ram) == (1.0, False)
    ram = _battle()
    catch.reset(ram)
    _set_hp(ram, POKEMON_ENEMY_MON_HP, 0)  # knocked out instead of caught
    assert catch.step(ram) == (0.0, False)
    ram[POKEMON_IS_IN_BATTLE] = 0
    assert catch.step(ram) == (-1.0, True)


def test_pokemon_rewards_need_a_battle_at_the_start():
    for reward in (PokemonBattleReward(), PokemonCatchReward()):
        with pytest.raises(RomError, match="inside a battle"):
            reward.reset(_battle(in_battle=0))


# --- the command line and the baseline loop -------------------------------------------------------


def test_envs_command_reports_roms(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(gameboy.ROMS_ENV_VAR, str(tmp_path))
    write_rom(tmp_path / "t.gb", "TETRIS")
    assert main(["envs", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["GameBoy/TestROM"]["rom"] == "the built-in test ROM"
    assert rows["GameBoy/Tetris"]["rom"].endswith("t.gb")
    assert (
        rows["GameBoy/PokemonBattle"]["rom"] is None and "POKEMON BLUE" in rows["GameBoy/PokemonBattle"]["rom_problem"]
    )


def test_gameboy_commands(capsys, tmp_path):
    out = tmp_path / "s.state"
    assert main(["gameboy", "record-state", "--game", "TestROM", "--press", "b*2", "--out", str(out)]) == 0
    assert main(["gameboy", "check", "--game", "TestROM", "--state", str(out)]) == 0
    assert "state" in capsys.readouterr().out
    assert main(["gameboy", "check", "--game", "Tetris", "--rom", str(write_rom(tmp_path / "x.gb"))]) == 2
    assert "is not Tetris" in capsys.readouterr().err


def test_plain_pyboy_baseline_runs():
    import time

    figures = plain_pyboy_loop("TestROM", 50, timers=(time.perf_counter, time.thread_time))
    assert all(figures[k] > 0 for k in ("steps_per_s", "cpu_steps_per_s", "tick_only_steps_per_s"))


@pytest.mark.parametrize("module", [gameboy, gbrewards, gbrom], ids=["gameboy", "gbrewards", "gbrom"])
def test_module_doctests(module):
    failures, tried = doctest.testmod(module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_host_bench_compares_with_plain_pyboy():
    import argparse

    from nonstop.bench import host

    parser = argparse.ArgumentParser()
    host.add_arguments(parser)
    args = parser.parse_args(["--env", "GameBoy/TestROM", "--steps", "200", "--repeats", "1"])
    args.quick = True
    result = host.run(args)
    for key in ("pyboy_steps_per_s", "pyboy_tick_only_steps_per_s", "ratio_vs_pyboy", "ratio_cpu_vs_pyboy"):
        assert np.isfinite(result[key]) and result[key] > 0, key
    assert isinstance(result["meets_target_vs_pyboy"], bool)
    json.dumps(result, allow_nan=False)


def test_importing_the_envs_does_not_import_pyboy():
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(Path(gameboy.__file__).parents[2])}
    code = "import sys, nonstop.envs as e, nonstop.cli; e.list_envs(); print('pyboy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("obs_type", ["gray84", "ram"])
def test_passes_gymnasiums_env_checker(obs_type):
    from conftest import check_env_strictly

    env = make_gameboy("TestROM", obs_type=obs_type)
    # gray84 is the emulator's screen under AreaResize (84x84): check_env warns it was handed a wrapper,
    # and that wrapped world is the one nonstop serves, so it is the one checked (every check still runs)
    allowed = {"is different from the unwrapped version": "gray84 is a wrapper"} if obs_type == "gray84" else {}
    try:
        check_env_strictly(env, allowed)
    finally:
        env.close()


def test_without_pyboy_envs_says_not_playable_and_check_fails_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "pyboy", None)  # as if PyBoy were not installed
    monkeypatch.setitem(__import__("sys").modules, "pyboy.utils", None)
    assert gameboy.pyboy_problem().startswith("Game Boy envs need PyBoy: pip install")
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "GameBoy/TestROM:" in line)
    assert "not playable" in line and "pip install" in line and "found:" not in line
    assert main(["gameboy", "check", "--game", "TestROM"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "nonstop: error: Game Boy envs need PyBoy: pip install 'nonstop[gameboy]' (or pyboy>=2.4)"
    ]


def test_with_pyboy_there_is_no_problem_to_report():
    assert gameboy.pyboy_problem() == ""


# --- the paper's six-action space (noop is β's only) ----------------------------------------------


def test_paper_action_set_leaves_the_noop_to_beta(no_shm_leak):
    import gymnasium

    env = make_gameboy("TestROM", action_set="paper")
    assert env.action_space == gymnasium.spaces.Discrete(6, start=1)
    assert 0 not in env.action_space and A in env.action_space
    env.close()
    with Session("GameBoy/TestROM", clock="virtual", seed=0, env_kwargs={"action_set": "paper"}) as world:
        run_ticks(world, 5)  # β: the noop, applied although no agent may choose it
        world.queue.submit(A, obs_tick=world.slot.read().tick, episode=0)
        run_ticks(world, 1)
        with pytest.raises((ValueError, TypeError)):
            world.queue.submit(0, obs_tick=world.slot.read().tick, episode=0)  # the agent cannot pick the noop
        run_ticks(world, 2)
    log = world.tick_log
    assert list(log["source"]) == [0] * 5 + [1] + [0, 0]
    assert list(log["action"]) == [0] * 5 + [A] + [0, 0]
    assert log["reward"].sum() == 1.0
    with pytest.raises(ValueError, match="action_set must be"):
        make_gameboy("TestROM", action_set="eight")


def test_dqn_acts_and_learns_in_a_space_that_starts_at_one():
    import gymnasium
    import torch

    from nonstop.learning.dqn import DQNConfig, DQNPolicy, build_q_network
    from nonstop.learning.weights import flat_parameters
    from nonstop.learning.replay import ReplayBuffer, ReplayRecorder
    from nonstop.learning.weights import SharedWeights

    space = gymnasium.spaces.Discrete(6, start=1)
    model = build_q_network((4,), 6, DQNConfig())
    with torch.no_grad():  # Q-value index 5 wins everywhere: the greedy action is 1 + 5 = 6 (DOWN)
        model.net[-1].bias[:] = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 100.0])
    weights = SharedWeights.create(sum(p.numel() for p in model.parameters()))
    try:
        weights.publish(flat_parameters(model))
        weights.epsilon = 1.0
        policy = DQNPolicy(model, weights, space, seed=0)
        explored = {policy.act(np.zeros(4, np.float32)).action for _ in range(200)}
        assert explored == set(range(1, 7))  # ε-random over the six buttons, never the noop
        weights.epsilon = 0.0
        assert policy.act(np.zeros(4, np.float32)).action == DOWN
    finally:
        weights.close()
        weights.unlink()
    replay = ReplayBuffer.create(capacity=64, obs_shape=(4,), dtype=np.float32)
    try:
        rec = ReplayRecorder(replay, gamma=0.9, history=16, action_start=1)
        import pickle

        assert pickle.loads(pickle.dumps(rec)).action_start == 1  # the host process gets its own copy
        rec.on_observation(0, np.zeros(4, np.float32))
        for t in range(1, 6):
            rec.on_tick(t, agent=True, action=DOWN, obs_tick=t - 1, reward=1.0, terminated=False, truncated=False)
            rec.on_observation(t, np.full(4, t, np.float32))
        batch = replay.sample(4, np.random.default_rng(0))
        assert batch is not None and set(np.asarray(batch.action).tolist()) == {DOWN - 1}  # the Q-value index
    finally:
        replay.close()
        replay.unlink()


def test_train_finds_the_rom_its_error_names(tmp_path, capsys):
    """`nonstop train --env GameBoy/Tetris --env-arg rom=PATH` (the flag the missing-ROM error names)
    reaches the ROM: the train command once looked the world up without its arguments, so it said
    "no ROM" to the very flag it recommends. A test cartridge titled TETRIS is found and read (then
    refused for not being Tetris, which proves it was opened)."""
    rom = write_rom(tmp_path / "t.gb", title="TETRIS")
    assert (
        main(
            [
                "train",
                "--env",
                "GameBoy/Tetris",
                "--env-arg",
                f"rom={rom}",
                "--seconds",
                "1",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(rom) in err and "is titled 'TETRIS'" in err, err
