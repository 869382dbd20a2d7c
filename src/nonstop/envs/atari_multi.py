"""Two-player Atari: seat worlds ``multi/<Game>`` through ``multi-agent-ale-py`` (DESIGN §4b).

``multi-agent-ale-py`` is the ALE fork PettingZoo's Atari games use; its module is
``multi_agent_ale_py``, so it installs beside ``ale-py`` (module ``ale_py``) without touching it.
The ROMs are the ones that ship inside ``ale-py`` (``ale_py.roms``): nothing is downloaded. The
setting is the paper's: 60 Hz, no frame skip, no sticky actions. Each game is played in its first
two-player mode; both seats observe the same RGB screen (210×160×3, uint8) and act from the game's
minimal action set (index 0: NOOP, β's no-op). An episode ends at ``game_over()`` (terminated) or
after ``max_frames`` ticks (truncated).

Both packages are imported only when a game is built (``pip install nonstop[multi-atari]``).
"""

from __future__ import annotations

import os
from typing import Any, Final

import numpy as np
from gymnasium import spaces

from .registry import register

try:  # see nonstop.envs.duel: the PettingZoo API is spoken with or without pettingzoo installed
    from pettingzoo import ParallelEnv as _Base
except ImportError:  # pragma: no cover
    _Base = object

__all__ = ["TwoPlayerAtari", "TWO_PLAYER_GAMES"]

ATARI_TICK_HZ: Final = 60.0
SEATS: Final = ("first_0", "second_0")
#: nonstop id suffix -> ale-py ROM name, the games with a two-player mode (checked with
#: ``getAvailableModes(2)`` on the ROMs of ale-py 0.12)
TWO_PLAYER_GAMES: Final = {
    "Boxing": "boxing", "Pong": "pong", "Tennis": "tennis", "IceHockey": "ice_hockey", "DoubleDunk": "double_dunk",
    "MarioBros": "mario_bros", "Joust": "joust", "Surround": "surround", "SpaceInvaders": "space_invaders",
    "Combat": "combat", "FlagCapture": "flag_capture", "Entombed": "entombed", "SpaceWar": "space_war",
    "Othello": "othello", "VideoCheckers": "video_checkers", "WizardOfWor": "wizard_of_wor",
}  # fmt: skip
DEFAULT_MAX_FRAMES: Final = 108_000  # 30 minutes at 60 Hz, ALE's usual cap


class TwoPlayerAtari(_Base):
    """One two-player Atari game as a PettingZoo parallel env (see the module docstring).

    ``game``: a key of `TWO_PLAYER_GAMES`. ``mode``: a two-player mode of the ROM (default: its first).
    """

    metadata = {"name": "nonstop_two_player_atari_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, game: str = "Boxing", mode: int | None = None, max_frames: int = DEFAULT_MAX_FRAMES) -> None:
        if game not in TWO_PLAYER_GAMES:
            raise ValueError(f"no two-player Atari game {game!r}; choose one of {sorted(TWO_PLAYER_GAMES)}")
        if not isinstance(max_frames, int) or isinstance(max_frames, bool) or max_frames < 1:
            raise ValueError(f"max_frames must be a positive integer, got {max_frames!r}")
        try:
            import multi_agent_ale_py
            from ale_py import roms
        except ImportError as exc:
            raise ImportError(f"two-player Atari needs multi-agent-ale-py and ale-py ({exc}): "
                              "pip install 'nonstop[multi-atari]'") from exc  # fmt: skip
        self.game, self.max_frames = game, max_frames
        self.ale = ale = multi_agent_ale_py.ALEInterface()
        ale.setFloat(b"repeat_action_probability", 0.0)  # no sticky actions
        ale.setInt(b"frame_skip", 1)  # one frame per tick
        ale.setInt(b"random_seed", 0)
        self._rom = str(roms.get_rom_path(TWO_PLAYER_GAMES[game]))
        with _quiet_stdout():  # the ALE prints its banner on loadROM
            ale.loadROM(self._rom)
        modes = [int(m) for m in ale.getAvailableModes(2)]
        if mode is None:
            mode = modes[0]
        if mode not in modes:
            raise ValueError(f"{game} has no two-player mode {mode!r}; its two-player modes are {modes}")
        self.mode = mode
        ale.setMode(mode)
        self._actions = np.asarray(ale.getMinimalActionSet(), np.int32)
        self.possible_agents = list(SEATS)
        self.agents: list[str] = []
        screen = spaces.Box(0, 255, (210, 160, 3), np.uint8)
        self.observation_spaces = {a: screen for a in SEATS}
        self.action_spaces = {a: spaces.Discrete(len(self._actions)) for a in SEATS}
        self._frames = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:  # the ALE takes its seed at load time
            self.ale.setInt(b"random_seed", int(seed) % (2**31))
            with _quiet_stdout():
                self.ale.loadROM(self._rom)
            self.ale.setMode(self.mode)
        self.ale.reset_game()
        self.agents = list(SEATS)
        self._frames = 0
        screen = self.ale.getScreenRGB()
        return {a: screen for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset()")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise KeyError(f"no seat {sorted(unknown)}; the seats are {self.agents}")
        joint = np.array([self._actions[int(actions.get(seat, 0))] for seat in SEATS], np.int32)
        rewards = self.ale.act(joint)
        self._frames += 1
        screen = self.ale.getScreenRGB()
        over, cut = bool(self.ale.game_over()), self._frames >= self.max_frames
        agents = self.agents
        if over or cut:
            self.agents = []
        return (
            {a: screen for a in agents},
            {a: float(rewards[i]) for i, a in enumerate(SEATS) if a in agents},
            {a: over for a in agents},
            {a: cut and not over for a in agents},
            {a: {} for a in agents},
        )

    def close(self) -> None:
        pass


class _quiet_stdout:
    """Silence the C library's prints on file descriptor 1 for a moment (the ALE's banner)."""

    def __enter__(self) -> None:
        self._saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)

    def __exit__(self, *exc: Any) -> None:
        os.dup2(self._saved, 1)
        os.close(self._saved)


def _factory(game: str) -> Any:
    def make(mode: int | None = None, max_frames: int = DEFAULT_MAX_FRAMES) -> TwoPlayerAtari:
        return TwoPlayerAtari(game, mode=mode, max_frames=max_frames)

    make.__name__ = make.__qualname__ = f"make_{TWO_PLAYER_GAMES[game]}"
    return make


for _game in TWO_PLAYER_GAMES:
    _make = _factory(_game)
    globals()[_make.__name__] = _make  # module-level, so a wall-clock host process can rebuild it
    register(f"multi/{_game}", _make, family="multi", tick_hz=ATARI_TICK_HZ, noop_action=0, default_beta="noop",
             description=f"two-player Atari {_game} (multi-agent-ale-py, ale-py's ROM, 60 Hz, no frame skip)")  # fmt: skip
