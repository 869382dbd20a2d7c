"""Game Boy rewards read from memory: pure functions of RAM values, no emulator needed.

Each reward function is told the game's memory (anything with ``mem[address] -> int``: PyBoy's
``pyboy.memory`` in play, a dict in tests) at an episode's start (``reset``) and after every frame
(``step``, which returns ``(reward, terminated)``). They implement the paper's rewards (Riemer et
al., ICLR 2025, Appendix A): Tetris "changes in the in-game score"; Pokémon battling +1 when the
opponent's Pokémon is knocked out, -1 when the agent's is; catching +1 when a wild Pokémon is
caught, -1 when the encounter ends without a catch.
"""

from __future__ import annotations

from typing import Final, Protocol

from .gbrom import RomError

__all__ = [
    "Memory",
    "RewardFunction",
    "ScoreDelta",
    "PokemonBattleReward",
    "PokemonCatchReward",
    "bcd_le",
    "u16_be",
    "POKEMON_IS_IN_BATTLE",
    "POKEMON_ENEMY_MON_HP",
    "POKEMON_BATTLE_MON_HP",
    "POKEMON_PARTY_COUNT",
    "POKEMON_BOX_COUNT",
    "TETRIS_SCORE",
    "TETRIS_GAME_STATE",
    "TETRIS_GAME_OVER_STATES",
]


class Memory(Protocol):
    def __getitem__(self, address: int) -> int: ...


def bcd_le(mem: Memory, address: int, n_bytes: int) -> int:
    """The decimal value of ``n_bytes`` of little-endian packed BCD at ``address``.

    >>> bcd_le({0xC0A0: 0x45, 0xC0A1: 0x23, 0xC0A2: 0x01}, 0xC0A0, 3)
    12345
    """
    value = 0
    for i in reversed(range(n_bytes)):
        byte = mem[address + i]
        value = value * 100 + (byte >> 4) * 10 + (byte & 0x0F)
    return value


def u16_be(mem: Memory, address: int) -> int:
    """A big-endian 16-bit value (how Pokémon Red/Blue store HP)."""
    return (mem[address] << 8) | mem[address + 1]


class RewardFunction(Protocol):
    """Reads a game's state from memory once per frame: ``reset`` at an episode's start, then
    ``step`` after every frame returns ``(reward, terminated)``."""

    def reset(self, mem: Memory) -> None: ...

    def step(self, mem: Memory) -> tuple[float, bool]: ...


class ScoreDelta:
    """Reward = change in an in-game BCD score; the episode ends when a game-over byte takes one of
    ``game_over_values``. The paper's Tetris reward ("changes in the in-game score").

    >>> ram = {0xC0A0: 0x00, 0xC0A1: 0x00, 0xC0A2: 0x00, 0xFFE1: 0x00}
    >>> score = ScoreDelta(0xC0A0, 3, game_over_address=0xFFE1, game_over_values=(0x0D,))
    >>> score.reset(ram)
    >>> ram[0xC0A0] = 0x40; score.step(ram)          # a single line at level 0: 40 points
    (40.0, False)
    >>> ram[0xFFE1] = 0x0D; score.step(ram)
    (0.0, True)
    """

    def __init__(
        self, score_address: int, n_bytes: int, *, game_over_address: int, game_over_values: tuple[int, ...]
    ) -> None:
        if not 1 <= n_bytes <= 4:
            raise ValueError(f"n_bytes must be 1 to 4, got {n_bytes}")
        self.score_address = score_address
        self.n_bytes = n_bytes
        self.game_over_address = game_over_address
        self.game_over_values = frozenset(game_over_values)
        self._score = 0

    def reset(self, mem: Memory) -> None:
        self._score = bcd_le(mem, self.score_address, self.n_bytes)

    def step(self, mem: Memory) -> tuple[float, bool]:
        score = bcd_le(mem, self.score_address, self.n_bytes)
        reward, self._score = score - self._score, score
        return float(reward), mem[self.game_over_address] in self.game_over_values


# Pokémon Red/Blue (English) work-RAM addresses, from the pret/pokered disassembly's symbol file
# (wram.asm); Red and Blue share them. Yellow is laid out differently and is not supported.
POKEMON_IS_IN_BATTLE: Final = 0xD057  # wIsInBattle: 0 none, 1 wild, 2 trainer, 0xFF lost
POKEMON_ENEMY_MON_HP: Final = 0xCFE6  # wEnemyMonHP: the opponent's active Pokémon, 2 bytes big-endian
POKEMON_BATTLE_MON_HP: Final = 0xD015  # wBattleMonHP: the agent's active Pokémon, 2 bytes big-endian
POKEMON_PARTY_COUNT: Final = 0xD163  # wPartyCount
POKEMON_BOX_COUNT: Final = 0xDA80  # wBoxCount (current PC box): a catch lands here when the party is full
_BATTLE_ON: Final = (1, 2)


def _battle_ended(before: int, now: int) -> bool:
    return before in _BATTLE_ON and now not in _BATTLE_ON


def _require_battle(mem: Memory, what: str) -> None:
    value = mem[POKEMON_IS_IN_BATTLE]
    if value not in _BATTLE_ON:
        raise RomError(
            f"the {what} episode must start inside a battle, but the start state has wIsInBattle = "
            f"{value:#04x} at {POKEMON_IS_IN_BATTLE:#06x} (1 wild, 2 trainer): record the state once "
            f"the encounter has begun"
        )


class PokemonBattleReward:
    """The paper's battling reward: +1 when the opponent's active Pokémon faints (its HP drops to
    0), -1 when the agent's does; the episode ends when the battle does. Winning a battle *is* the
    opponent's last faint, so it is counted once, not twice.

    >>> ram = {POKEMON_IS_IN_BATTLE: 2, POKEMON_ENEMY_MON_HP: 0, POKEMON_ENEMY_MON_HP + 1: 20,
    ...        POKEMON_BATTLE_MON_HP: 0, POKEMON_BATTLE_MON_HP + 1: 9}
    >>> battle = PokemonBattleReward()
    >>> battle.reset(ram)
    >>> ram[POKEMON_ENEMY_MON_HP + 1] = 0; battle.step(ram)     # the opponent faints
    (1.0, False)
    >>> ram[POKEMON_IS_IN_BATTLE] = 0; battle.step(ram)         # ... and the battle is over
    (0.0, True)
    """

    def __init__(self) -> None:
        self._in_battle = self._enemy_hp = self._own_hp = 0

    def reset(self, mem: Memory) -> None:
        _require_battle(mem, "battle")
        self._in_battle = mem[POKEMON_IS_IN_BATTLE]
        self._enemy_hp = u16_be(mem, POKEMON_ENEMY_MON_HP)
        self._own_hp = u16_be(mem, POKEMON_BATTLE_MON_HP)

    def step(self, mem: Memory) -> tuple[float, bool]:
        in_battle = mem[POKEMON_IS_IN_BATTLE]
        enemy_hp, own_hp = u16_be(mem, POKEMON_ENEMY_MON_HP), u16_be(mem, POKEMON_BATTLE_MON_HP)
        reward = 0.0
        if in_battle in _BATTLE_ON:
            # A faint is HP reaching 0; a fresh Pokémon sent out (0 -> full) earns nothing.
            reward += float(self._enemy_hp > 0 and enemy_hp == 0) - float(self._own_hp > 0 and own_hp == 0)
        terminated = _battle_ended(self._in_battle, in_battle)
        self._in_battle, self._enemy_hp, self._own_hp = in_battle, enemy_hp, own_hp
        return reward, terminated


class PokemonCatchReward:
    """The paper's catching reward: +1 when a wild Pokémon is caught (the party plus the current box
    grows), -1 when the encounter ends without a catch; the episode ends with the encounter.

    >>> ram = {POKEMON_IS_IN_BATTLE: 1, POKEMON_PARTY_COUNT: 1, POKEMON_BOX_COUNT: 0}
    >>> catch = PokemonCatchReward()
    >>> catch.reset(ram)
    >>> ram[POKEMON_IS_IN_BATTLE] = 0; catch.step(ram)           # ran away: no catch
    (-1.0, True)
    """

    def __init__(self) -> None:
        self._in_battle = self._owned = 0
        self._caught = False

    def _count(self, mem: Memory) -> int:
        return mem[POKEMON_PARTY_COUNT] + mem[POKEMON_BOX_COUNT]

    def reset(self, mem: Memory) -> None:
        _require_battle(mem, "catching")
        self._in_battle, self._owned, self._caught = mem[POKEMON_IS_IN_BATTLE], self._count(mem), False

    def step(self, mem: Memory) -> tuple[float, bool]:
        in_battle, owned = mem[POKEMON_IS_IN_BATTLE], self._count(mem)
        reward = 0.0
        if owned > self._owned:
            reward, self._caught = 1.0, True
        terminated = _battle_ended(self._in_battle, in_battle)
        if terminated and not self._caught:
            reward -= 1.0
        self._in_battle, self._owned = in_battle, owned
        return reward, terminated


# Tetris (Game Boy, 1989): the score is 3 bytes of little-endian BCD at 0xC0A0 and the game state
# byte hGameState is at 0xFFE1 (Data Crystal's "Tetris (Game Boy)/RAM map", used the same way by
# public Tetris RL envs); 0x0D is the game-over animation and 0x04 the game-over screen.
TETRIS_SCORE: Final = 0xC0A0
TETRIS_GAME_STATE: Final = 0xFFE1
TETRIS_GAME_OVER_STATES: Final = (0x04, 0x0D)
