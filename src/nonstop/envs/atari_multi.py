"""Two-player Atari: seat worlds ``multi/<Game>`` through ``multi-agent-ale-py`` (docs/design.md §4b).

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
from typing import Any, Callable, Final

import numpy as np
from gymnasium import spaces

from .spec import register

try:  # see nonstop.envs.duel: the PettingZoo API is spoken with or without pettingzoo installed
    from pettingzoo import ParallelEnv as _Base
except ImportError:  # pragma: no cover
    _Base = object

__all__ = ["TwoPlayerAtari", "TWO_PLAYER_GAMES", "plain_ale_loop"]

ATARI_TICK_HZ: Final = 60.0
SEATS: Final = ("first_0", "second_0")
#: nonstop id suffix -> ale-py ROM name, the games with a two-player mode (checked with
#: ``getAvailableModes(2)`` on the ROMs of ale-py 0.12)
TWO_PLAYER_GAMES: Final = {
    "Boxing": "boxing",
    "Pong": "pong",
    "Tennis": "tennis",
    "IceHockey": "ice_hockey",
    "DoubleDunk": "double_dunk",
    "MarioBros": "mario_bros",
    "Joust": "joust",
    "Surround": "surround",
    "SpaceInvaders": "space_invaders",
    "Combat": "combat",
    "FlagCapture": "flag_capture",
    "Entombed": "entombed",
    "SpaceWar": "space_war",
    "Othello": "othello",
    "VideoCheckers": "video_checkers",
    "WizardOfWor": "wizard_of_wor",
}
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
            raise ImportError(
                f"two-player Atari needs multi-agent-ale-py and ale-py ({exc}): pip install 'nonstop[multi-atari]'"
            ) from exc
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
        self._bind_fast_path()
        self.possible_agents = list(SEATS)
        self.agents: list[str] = []
        screen = spaces.Box(0, 255, self._screen_shape, np.uint8)
        self.observation_spaces = {a: screen for a in SEATS}
        self.action_spaces = {a: spaces.Discrete(len(self._actions)) for a in SEATS}
        self._frames = 0

    def _bind_fast_path(self) -> None:
        """The per-step calls straight into the ALE's C library, with buffers and their addresses
        made once: the Python wrapper's ``act``/``getScreenRGB`` rebuild a ctypes view of every
        array on every call (~25 µs a step, a tenth of Boxing's step)."""
        from multi_agent_ale_py.ale_python_interface import ale_lib

        self._lib, self._obj = ale_lib, self.ale.obj
        self._joint = np.zeros(len(SEATS), np.intc)  # owned here, rewritten each step
        self._rewards = np.zeros(len(SEATS), np.intc)
        self._joint_at, self._rewards_at = self._joint.ctypes.data, self._rewards.ctypes.data
        self._n_actions = len(self._actions)
        self._minimal = self._actions.tolist()  # index -> ALE action, as Python ints
        width, height = self.ale.getScreenDims()
        self._screen_shape = (height, width, 3)

    def _screen(self) -> np.ndarray:
        """A fresh RGB frame (each step's observation is its own array, never overwritten later)."""
        screen = np.empty(self._screen_shape, np.uint8)
        self._lib.getScreenRGB(self._obj, screen.ctypes.data)
        return screen

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
        screen = self._screen()
        return {a: screen for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset()")
        if len(actions) > 2 or any(seat not in SEATS for seat in actions):
            unknown = sorted(set(actions) - set(SEATS))
            raise KeyError(f"no seat {unknown}; the seats are {self.agents}")
        joint, minimal, n = self._joint, self._minimal, self._n_actions
        for i, seat in enumerate(SEATS):
            a = actions.get(seat, 0)
            if not 0 <= a < n:  # a negative index must not wrap to another action
                raise ValueError(f"action {a!r} for {seat} is outside Discrete({n})")
            joint[i] = minimal[int(a)]
        lib, obj = self._lib, self._obj
        lib.actMulti(obj, self._joint_at, self._rewards_at)
        first, second = float(self._rewards[0]), float(self._rewards[1])
        self._frames += 1
        screen = self._screen()
        over, cut = bool(lib.game_over(obj)), self._frames >= self.max_frames
        if over or cut:
            self.agents = []
        ended = cut and not over
        return (
            {"first_0": screen, "second_0": screen},
            {"first_0": first, "second_0": second},
            {"first_0": over, "second_0": over},
            {"first_0": ended, "second_0": ended},
            {"first_0": {}, "second_0": {}},
        )

    def close(self) -> None:
        pass


def plain_ale_loop(
    game: str, steps: int, *, timers: tuple[Callable[[], float], Callable[[], float]]
) -> dict[str, float]:
    """The baseline a hand-written ``multi-agent-ale-py`` loop reaches on ``game`` (a key of
    `TWO_PLAYER_GAMES`): the same ROM, mode and settings as the env, then the library's own calls
    per frame, both seats NOOP: ``act(joint)``, ``getScreenRGB()`` (the observation),
    ``game_over()`` and ``reset_game()`` when it is. No PettingZoo dicts, no host.

    ``timers`` are ``(wall, cpu)`` stopwatches (the benchmark's own); returns ``steps_per_s`` and
    ``cpu_steps_per_s``.
    """
    wall, cpu = timers
    env = TwoPlayerAtari(game)
    try:
        ale = env.ale
        ale.reset_game()
        joint = np.zeros(len(SEATS), np.int32)
        start, start_cpu = wall(), cpu()
        for _ in range(steps):
            ale.act(joint)
            ale.getScreenRGB()
            if ale.game_over():
                ale.reset_game()
        elapsed, elapsed_cpu = wall() - start, cpu() - start_cpu
    finally:
        env.close()
    return {"steps_per_s": steps / elapsed, "cpu_steps_per_s": steps / elapsed_cpu}


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
    register(
        f"multi/{_game}",
        _make,
        family="multi",
        tick_hz=ATARI_TICK_HZ,
        noop_action=0,
        default_beta="noop",
        description=f"two-player Atari {_game} (multi-agent-ale-py, ale-py's ROM, 60 Hz, no frame skip)",
    )
