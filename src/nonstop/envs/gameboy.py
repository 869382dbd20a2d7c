"""Game Boy worlds through PyBoy, in the paper's realtime setting.

The paper runs Pokémon Blue and Tetris "at 59.7275 frames per second such that τ_M = 1/59.7275,
with noop actions executed as the default behaviour β" and six button actions (Riemer et al., ICLR
2025, §5 and Appendix A). Here one env step is one Game Boy frame; the action space is
``Discrete(7)``: 0 is the noop (no button held; the default β), then A, B, LEFT, UP, RIGHT, DOWN.
An action holds its button for the frame; the next different action releases it. With
``action_set="paper"`` the agent's space is the paper's six buttons alone, ``Discrete(6, start=1)``:
the noop stays β's (the env still takes 0 from the host), so a learner never picks "do nothing"
and every tick without an agent action is visibly β's.

PyBoy runs headless (``window="null"``) with sound emulation off and its own frame limiter off
(``set_emulation_speed(0)``): the nonstop host's clock alone decides when a frame happens.

ROMs come from the user, never from nonstop: ``rom=PATH`` (a file or a directory), or a directory
named by ``$NONSTOP_ROMS``. A ROM is recognised by its cartridge header title and must pass the
header and global checksums. ``GameBoy/TestROM`` needs no ROM: it runs the cartridge that
:mod:`nonstop.envs.gbrom` assembles, so the whole path is exercised on every CI run.

Rewards are read from the game's memory after every frame by the pure functions of
:mod:`nonstop.envs.gbrewards` (the paper's Tetris and Pokémon rewards).

Episodes start from the game's start point: the test ROM after booting, Tetris through PyBoy's
own menu navigation, Pokémon from a save state the user records (``state=PATH``; see
``nonstop gameboy record-state``). ``reset(seed=s)`` sets the timer's DIV register from ``s``,
the usual source of a Game Boy game's randomness, so a seed and an action sequence fix every frame.

>>> env = make_gameboy("TestROM")
>>> obs, info = env.reset(seed=0)
>>> obs.shape, obs.dtype, env.action_space
((84, 84), dtype('uint8'), Discrete(7))
>>> rewards = [env.step(ACTIONS.index("A"))[1] for _ in range(3)]   # the test game scores 1 per frame A is held
>>> rewards, env.unwrapped.read_ram(TEST_ROM_RAM["score"])
([1.0, 1.0, 1.0], 3)
>>> env.close()
"""

from __future__ import annotations

import functools
import io
import json
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import gymnasium
import numpy as np

from .atari import PREPROCESSED_SHAPE, AreaResize
from .gbrom import (
    TEST_ROM_GAME_OVER_X,
    TEST_ROM_RAM,
    TEST_ROM_TITLE,
    CartridgeHeader,
    RomError,
    build_test_rom,
    global_checksum,
    header_checksum,
)
from .gbrewards import (
    TETRIS_GAME_OVER_STATES,
    TETRIS_GAME_STATE,
    TETRIS_SCORE,
    PokemonBattleReward,
    PokemonCatchReward,
    RewardFunction,
    ScoreDelta,
    bcd_le,
)
from .spec import register

__all__ = [
    "ACTIONS",
    "GAMEBOY_TICK_HZ",
    "GAMES",
    "ROMS_ENV_VAR",
    "GameBoyEnv",
    "GameSpec",
    "RomError",
    "pyboy_problem",
    "ScoreDelta",
    "PokemonBattleReward",
    "PokemonCatchReward",
    "bcd_le",
    "check_gameboy_kwargs",
    "find_rom",
    "make_gameboy",
    "rom_status",
]

#: The console's frame rate: a 4.194304 MHz clock and 70,224 cycles per frame.
GAMEBOY_TICK_HZ: Final = 4_194_304 / 70_224
#: Action names by index; 0 holds no button (the noop and default β), then the paper's six buttons.
ACTIONS: Final = ("NOOP", "A", "B", "LEFT", "UP", "RIGHT", "DOWN")
#: The environment variable naming a directory of the user's ROMs.
ROMS_ENV_VAR: Final = "NONSTOP_ROMS"
_ROM_SUFFIXES: Final = (".gb", ".gbc", ".sgb")
_SCREEN: Final = (144, 160)
_WRAM: Final = (0xC000, 0xE000)
#: PyBoy's "Grey" DMG palette: with R = G = B, channel 0 of the screen *is* the grayscale frame.
_GRAY_PALETTE: Final = (0xFFFFFF, 0x999999, 0x555555, 0x000000)
_STATE_MAGIC: Final = b"NONSTOP-GAMEBOY-STATE\n"
ObsType = Literal["gray84", "gray", "rgb", "ram"]
OBS_TYPES: Final = ("gray84", "gray", "rgb", "ram")


# --- the games ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GameSpec:
    """What nonstop knows about one game: how to recognise its ROM, where an episode starts, and
    how its reward is read from memory.

    ``start`` is ``"boot"`` (run ``boot_frames`` frames from power-on), ``"pyboy-wrapper"`` (PyBoy's
    own game wrapper navigates the menus) or ``"state"`` (the user's save state is required).
    """

    name: str
    titles: tuple[str, ...]
    reward: Callable[[], RewardFunction]
    start: Literal["boot", "pyboy-wrapper", "state"]
    description: str
    boot_frames: int = 0
    builtin_rom: Callable[[], bytes] | None = None

    def __post_init__(self) -> None:
        if not self.titles or not all(isinstance(t, str) and 0 < len(t) <= 16 for t in self.titles):
            raise ValueError(f"titles must be cartridge titles of 1 to 16 characters, got {self.titles!r}")
        if self.start not in ("boot", "pyboy-wrapper", "state"):
            raise ValueError(f"start must be 'boot', 'pyboy-wrapper' or 'state', got {self.start!r}")
        if not callable(self.reward):
            raise TypeError(f"reward must be a callable returning a reward function, got {self.reward!r}")
        if isinstance(self.boot_frames, bool) or not isinstance(self.boot_frames, int) or self.boot_frames < 0:
            raise ValueError(f"boot_frames must be a non-negative int, got {self.boot_frames!r}")


GAMES: Final[Mapping[str, GameSpec]] = {
    spec.name: spec
    for spec in (
        GameSpec(
            "TestROM",
            (TEST_ROM_TITLE,),
            functools.partial(
                ScoreDelta, TEST_ROM_RAM["score"], 3, game_over_address=TEST_ROM_RAM["game_over"], game_over_values=(1,)
            ),
            "boot",
            f"nonstop's own test cartridge at 59.7275 Hz: A +1, B +10 per frame held; ends when x reaches "
            f"{TEST_ROM_GAME_OVER_X}",
            boot_frames=70,  # PyBoy's boot ROM hands over at frame ~66
            builtin_rom=build_test_rom,
        ),
        GameSpec(
            "Tetris",
            ("TETRIS",),
            functools.partial(
                ScoreDelta,
                TETRIS_SCORE,
                3,
                game_over_address=TETRIS_GAME_STATE,
                game_over_values=TETRIS_GAME_OVER_STATES,
            ),
            "pyboy-wrapper",
            "Tetris at 59.7275 Hz, reward = change in score (paper Fig. 5); needs your ROM",
        ),
        GameSpec(
            "PokemonBattle",
            ("POKEMON RED", "POKEMON BLUE"),
            PokemonBattleReward,
            "state",
            "Pokémon Red/Blue battles at 59.7275 Hz: +1 opponent faints, -1 own faints (paper Fig. 4a); "
            "needs your ROM and a battle save state",
        ),
        GameSpec(
            "PokemonCatch",
            ("POKEMON RED", "POKEMON BLUE"),
            PokemonCatchReward,
            "state",
            "Pokémon Red/Blue catching at 59.7275 Hz: +1 caught, -1 encounter over without a catch "
            "(paper Fig. 4b); needs your ROM and an encounter save state",
        ),
    )
}


def _game(name: str) -> GameSpec:
    if not isinstance(name, str) or name not in GAMES:
        raise ValueError(f"unknown Game Boy game {name!r}; nonstop knows {', '.join(GAMES)}")
    return GAMES[name]


# --- finding and checking the user's ROM ----------------------------------------------------------


@dataclass(frozen=True)
class FoundRom:
    """A validated ROM: its bytes, its header, and where it came from (a path, or the built-in test ROM)."""

    data: bytes
    header: CartridgeHeader
    source: str


def _read_rom(path: Path) -> tuple[bytes, CartridgeHeader]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RomError(f"cannot read ROM {path}: {error.strerror or error}") from None
    return data, CartridgeHeader.parse(data, source=f"ROM {path}")


def _check_rom(spec: GameSpec, data: bytes, header: CartridgeHeader, source: str) -> FoundRom:
    wanted = " or ".join(repr(t) for t in spec.titles)
    if header.title not in spec.titles:
        raise RomError(
            f"{source} is not {spec.name}: its cartridge header title is {header.title!r}, expected {wanted}"
        )
    if not header.header_checksum_ok:
        raise RomError(
            f"{source} is corrupt: its cartridge header checksum is {header.header_checksum:#04x} but the "
            f"header bytes give {header_checksum(data):#04x}; use a good dump of {spec.name}"
        )
    if not header.global_checksum_ok:
        raise RomError(
            f"{source} is corrupt or modified: its global checksum says {header.global_checksum:#06x} but its "
            f"bytes sum to {global_checksum(data):#06x}; use an unmodified dump of {spec.name}"
        )
    return FoundRom(data, header, source)


def _candidates(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in _ROM_SUFFIXES)


#: how a game's keyword (``rom=PATH``, ``state=PATH``) is given on each command line that takes it
_ON_THE_COMMAND_LINE = "`nonstop train`: --env-arg {key}=PATH; `nonstop gameboy`: --{key} PATH"


def find_rom(game: str, rom: str | os.PathLike[str] | None = None) -> FoundRom:
    """Locate and validate the ROM for ``game``, or raise :class:`RomError` saying where nonstop
    looked and what it expected.

    ``rom`` is a ROM file or a directory to search; without it, ``$NONSTOP_ROMS`` names the
    directory. A directory is searched (not recursively) for ``.gb``/``.gbc`` files whose header
    title matches the game.

    >>> find_rom("TestROM").header.title
    'NONSTOP TEST'
    """
    spec = _game(game)
    if rom is None and spec.builtin_rom is not None:
        data = spec.builtin_rom()
        return _check_rom(spec, data, CartridgeHeader.parse(data), "the built-in test ROM")
    wanted = " or ".join(repr(t) for t in spec.titles)
    how = (
        f"pass rom=PATH ({_ON_THE_COMMAND_LINE.format(key='rom')}) or set {ROMS_ENV_VAR}=DIR to a directory holding a .gb file whose "
        f"header title is {wanted} (nonstop cannot ship Game Boy ROMs)"
    )
    if rom is None:
        env_dir = os.environ.get(ROMS_ENV_VAR)
        if not env_dir:
            raise RomError(f"no ROM for {spec.name}: {how}")
        path, origin = Path(env_dir).expanduser(), f"${ROMS_ENV_VAR}"
        if not path.is_dir():
            raise RomError(f"{origin} is {env_dir!r}, which is not a directory; {how}")
    else:
        if not isinstance(rom, (str, os.PathLike)):
            raise TypeError(f"rom must be a path (str or os.PathLike), got {type(rom).__name__}")
        path, origin = Path(rom).expanduser(), "rom="
        if not path.exists():
            raise RomError(f"ROM not found at {path}: {how}")
        if path.is_file():
            data, header = _read_rom(path)
            return _check_rom(spec, data, header, f"ROM {path}")
    seen: list[str] = []
    for candidate in _candidates(path):
        try:
            data, header = _read_rom(candidate)
        except RomError:
            seen.append(f"{candidate.name} (not a Game Boy ROM)")
            continue
        if header.title in spec.titles:
            return _check_rom(spec, data, header, f"ROM {candidate}")  # a bad dump of the game is an error
        seen.append(f"{candidate.name} ({header.title!r})")
    found = f"; found {', '.join(seen)}" if seen else "; it holds no .gb/.gbc file"
    raise RomError(f"no {spec.name} ROM in {path} (from {origin}){found}. {how[0].upper()}{how[1:]}")


def rom_status(game: str) -> tuple[str | None, str]:
    """``(source, "")`` when ``game``'s ROM is found without arguments, else ``(None, why not)``."""
    try:
        return find_rom(game).source, ""
    except RomError as error:
        return None, str(error)


# --- save states: PyBoy's state behind a header naming the exact ROM it belongs to ----------------


def _state_header(rom: FoundRom, game: str) -> dict[str, Any]:
    return {"format": 1, "game": game, "title": rom.header.title, "rom_sha1": rom.header.sha1}


def write_state(path: str | os.PathLike[str], pyboy_state: bytes, rom: FoundRom, game: str) -> None:
    """Save ``pyboy_state`` with a header naming ``rom``, so it can never load into another ROM."""
    header = json.dumps(_state_header(rom, game), sort_keys=True).encode()
    Path(path).write_bytes(_STATE_MAGIC + header + b"\n" + pyboy_state)


def read_state(path: str | os.PathLike[str], rom: FoundRom) -> bytes:
    """PyBoy's state from a nonstop save state, after checking it was recorded on ``rom``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"state must be a path (str or os.PathLike), got {type(path).__name__}")
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RomError(f"cannot read save state {path}: {error.strerror or error}") from None
    if not data.startswith(_STATE_MAGIC):
        raise RomError(
            f"{path} is not a nonstop save state; wrap a PyBoy state with `nonstop gameboy record-state "
            f"--rom ROM --from {path} --out NEW.state` (it records which ROM the state belongs to)"
        )
    header_line, _, payload = data[len(_STATE_MAGIC) :].partition(b"\n")
    try:
        header = json.loads(header_line)
    except ValueError:
        raise RomError(f"save state {path} has a damaged header") from None
    if header.get("rom_sha1") != rom.header.sha1:
        raise RomError(
            f"save state {path} was recorded on another ROM ({header.get('title')!r}, sha1 "
            f"{header.get('rom_sha1')}); this ROM is {rom.header.title!r} (sha1 {rom.header.sha1}) from "
            f"{rom.source}"
        )
    if not payload:
        raise RomError(f"save state {path} is empty after its header")
    return payload


# --- the emulator ---------------------------------------------------------------------------------


def pyboy_problem() -> str:
    """``""`` when PyBoy imports, else the one line saying how to install it (for listings such as
    ``nonstop envs``, which must not call a ROM usable when the emulator is missing)."""
    try:
        _import_pyboy()
    except ImportError as error:
        return str(error)
    return ""


def _import_pyboy() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pysdl2 announces its bundled binaries on import
            import pyboy
            from pyboy.utils import WindowEvent
    except ImportError:
        raise ImportError("Game Boy envs need PyBoy: pip install 'nonstop[gameboy]' (or pyboy>=2.4)") from None
    return pyboy, WindowEvent


def _start_pyboy(rom: FoundRom) -> Any:
    """A headless PyBoy on ``rom``: no window, no sound, no frame limiter, no input from a window."""
    pyboy, _ = _import_pyboy()
    # A file-like ROM: PyBoy then reads and writes no .ram/.rtc files next to the user's ROM.
    emulator = pyboy.PyBoy(
        io.BytesIO(rom.data),
        window="null",
        sound_emulated=False,
        no_input=True,
        log_level="ERROR",
        color_palette=_GRAY_PALETTE,
        cgb=False,
    )
    emulator.set_emulation_speed(0)  # 0 = unlimited: the host's clock governs time
    return emulator


def _set_timer_div(emulator: Any, value: int) -> None:
    # PyBoy's game wrappers seed games this way (start_game/reset_game(timer_div=...)); a plain
    # write to 0xFF04 would only reset DIV to 0.
    emulator.game_wrapper._set_timer_div(value)


class GameBoyEnv(gymnasium.Env[np.ndarray, np.int64]):
    """One Game Boy game as a Gymnasium env: one step is one frame at 59.7275 Hz.

    ``obs_type``: ``"gray"`` the 144×160 grayscale screen, ``"rgb"`` the 144×160×3 screen,
    ``"ram"`` the 8 KiB of work RAM (``0xC000``–``0xDFFF``); :func:`make_gameboy` adds the paper's
    84×84 ``"gray84"``. The emulator is private to the env; :meth:`read_ram` reads its memory.

    >>> env = GameBoyEnv("TestROM", obs_type="ram")
    >>> ram, _ = env.reset(seed=1)
    >>> ram.shape, int(ram[TEST_ROM_RAM["score"] - 0xC000])
    ((8192,), 0)
    >>> env.close()
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": GAMEBOY_TICK_HZ}

    def __init__(
        self,
        game: str,
        *,
        rom: str | os.PathLike[str] | None = None,
        state: str | os.PathLike[str] | None = None,
        obs_type: Literal["gray", "rgb", "ram"] = "gray",
        max_episode_steps: int | None = None,
        render_mode: Literal["rgb_array"] | None = None,
        action_set: Literal["full", "paper"] = "full",
    ) -> None:
        _check_action_set(action_set)
        if obs_type not in ("gray", "rgb", "ram"):
            raise ValueError(f"obs_type must be 'gray', 'rgb' or 'ram', got {obs_type!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.game = spec = _game(game)
        self.rom = rom_found = find_rom(game, rom)
        start_state = read_state(state, rom_found) if state is not None else None
        if spec.start == "state" and start_state is None:
            raise RomError(_needs_state(spec))
        self.obs_type = obs_type
        self.max_episode_steps = _check_max_steps(max_episode_steps)
        self.render_mode = render_mode
        self.action_set = action_set
        #: the agent's actions: all seven, or (``paper``) the six buttons, noop left to β
        self.action_space = (
            gymnasium.spaces.Discrete(len(ACTIONS))
            if action_set == "full"
            else gymnasium.spaces.Discrete(len(ACTIONS) - 1, start=1)
        )
        #: actions the env takes from β but no agent may choose (nonstop's `Session` reads it)
        self.beta_only_actions: tuple[int, ...] = () if action_set == "full" else (0,)
        if obs_type == "gray":
            self.observation_space = gymnasium.spaces.Box(0, 255, _SCREEN, np.uint8)
        elif obs_type == "rgb":
            self.observation_space = gymnasium.spaces.Box(0, 255, (*_SCREEN, 3), np.uint8)
        else:
            self.observation_space = gymnasium.spaces.Box(0, 255, (_WRAM[1] - _WRAM[0],), np.uint8)
        _, events = _import_pyboy()
        buttons = ("a", "b", "left", "up", "right", "down")
        self._press = [None] + [getattr(events, f"PRESS_{_event_name(b)}") for b in buttons]
        self._release = [None] + [getattr(events, f"RELEASE_{_event_name(b)}") for b in buttons]
        self._emulator = _start_pyboy(rom_found)
        try:
            self._wrapper_start = False
            if start_state is not None:
                self._start_state = start_state
            elif spec.start == "pyboy-wrapper":
                _await_tetris_title(self._emulator, rom_found)
                self._emulator.game_wrapper.start_game(timer_div=0)  # PyBoy's own menu navigation
                self._wrapper_start = True
                self._start_state = b""
            else:
                # render=True draws the last frame only; the state then holds a screen, not a blank
                self._emulator.tick(spec.boot_frames, True, False)
                buffer = io.BytesIO()
                self._emulator.save_state(buffer)
                self._start_state = buffer.getvalue()
            self._reward = spec.reward()
            try:
                self._restart(0)
            except Exception as error:  # a damaged payload behind a good header
                raise RomError(f"save state {state} could not be loaded by PyBoy {_pyboy_version()}: {error}") from None
            self._reward.reset(self._emulator.memory)  # a start state outside the game fails here
        except BaseException:
            self.close()
            raise
        self._render_frames = obs_type != "ram" or render_mode is not None
        self._screen = self._emulator.screen.ndarray  # a live view PyBoy updates in place
        self._held = 0
        self._frames = 0

    # -- gymnasium ---------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        timer_div = int(self.np_random.integers(0, 256))
        self._restart(timer_div)
        _release_all(self._emulator)  # a state saved with a button down would keep it down
        self._held = 0
        self._frames = 0
        self._reward.reset(self._emulator.memory)
        return self._observe(), {"timer_div": timer_div}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        button = int(action)
        if button != action or not 0 <= button < len(ACTIONS):
            raise ValueError(f"action {action!r} is not in {self.action_space} ({', '.join(ACTIONS)})")
        if button != self._held:
            if self._held:
                self._emulator.send_input(self._release[self._held])
            if button:
                self._emulator.send_input(self._press[button])
            self._held = button
        self._emulator.tick(1, self._render_frames, False)
        reward, terminated = self._reward.step(self._emulator.memory)
        self._frames += 1
        truncated = self.max_episode_steps is not None and self._frames >= self.max_episode_steps
        return self._observe(), reward, terminated, truncated, {"frame": self._frames}

    def render(self) -> np.ndarray | None:
        return self._screen[:, :, :3].copy() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        emulator, self._emulator = getattr(self, "_emulator", None), None
        if emulator is not None:
            emulator.stop(save=False)

    # -- helpers -----------------------------------------------------------------------------------

    def read_ram(self, address: int, n_bytes: int = 1) -> int:
        """One byte of memory, or ``n_bytes`` of little-endian BCD when ``n_bytes > 1`` (scores)."""
        return self._emulator.memory[address] if n_bytes == 1 else bcd_le(self._emulator.memory, address, n_bytes)

    def save_state(self) -> bytes:
        """The emulator's state now (PyBoy's format), e.g. for :func:`write_state`."""
        buffer = io.BytesIO()
        self._emulator.save_state(buffer)
        return buffer.getvalue()

    def _restart(self, timer_div: int) -> None:
        if self._wrapper_start:
            self._emulator.game_wrapper.reset_game(timer_div=timer_div)
            # reset_game plays 7 frames without drawing them; one more, drawn, gives a true first frame
            self._emulator.tick(1, True, False)
        else:
            self._emulator.load_state(io.BytesIO(self._start_state))
            _set_timer_div(self._emulator, timer_div)

    def _observe(self) -> np.ndarray:
        if self.obs_type == "gray":
            return self._screen[:, :, 0].copy()
        if self.obs_type == "rgb":
            return self._screen[:, :, :3].copy()
        return np.asarray(self._emulator.memory[_WRAM[0] : _WRAM[1]], dtype=np.uint8)


#: Background tiles of "1PLAYER" on Tetris's title screen, which PyBoy's Tetris wrapper waits for
#: (unboundedly) before pressing START; nonstop waits for them first, with a bound.
_TETRIS_TITLE_TILES: Final = [89, 25, 21, 10, 34, 14, 27]
_TETRIS_TITLE_WITHIN: Final = 1200  # frames: 20 s of game time; the real title screen comes in ~5 s


def _await_tetris_title(emulator: Any, rom: FoundRom) -> None:
    for _ in range(_TETRIS_TITLE_WITHIN):
        if emulator.tilemap_background[2:9, 14] == _TETRIS_TITLE_TILES:
            return
        emulator.tick(1, False, False)
    raise RomError(
        f"{rom.source} is titled {rom.header.title!r} but never showed Tetris's title screen within "
        f"{_TETRIS_TITLE_WITHIN} frames: it is not the Game Boy Tetris PyBoy can start (or pass state=PATH)"
    )


def _release_all(emulator: Any) -> None:
    """Queue a release of every button for the next frame (before any press queued after it)."""
    for button in ("a", "b", "left", "up", "right", "down", "start", "select"):
        emulator.button_release(button)


def _event_name(button: str) -> str:
    return f"ARROW_{button.upper()}" if button in ("left", "up", "right", "down") else f"BUTTON_{button.upper()}"


def _check_max_steps(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"max_episode_steps must be an int or None, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {value}")
    return int(value)


def check_gameboy_kwargs(
    game: str,
    *,
    rom: str | os.PathLike[str] | None = None,
    state: str | os.PathLike[str] | None = None,
    obs_type: ObsType = "gray84",
    max_episode_steps: int | None = None,
    action_set: str = "full",
) -> None:
    """Everything :func:`make_gameboy` would refuse, checked without starting an emulator: the
    options, PyBoy being installed, the ROM (found, right game, checksums) and the save state
    (recorded on that ROM; required where the game starts from one)."""
    spec = _game(game)
    _check_action_set(action_set)
    if obs_type not in OBS_TYPES:
        raise ValueError(f"obs_type must be one of {OBS_TYPES}, got {obs_type!r}")
    _check_max_steps(max_episode_steps)
    _import_pyboy()
    found = find_rom(game, rom)
    if state is not None:
        read_state(state, found)
    elif spec.start == "state":
        raise RomError(_needs_state(spec))


def _check_action_set(action_set: str) -> None:
    if action_set not in ("full", "paper"):
        raise ValueError(
            f"action_set must be 'full' (noop + six buttons) or 'paper' (the six buttons; noop is β's), "
            f"got {action_set!r}"
        )


def _needs_state(spec: GameSpec) -> str:
    return (
        f"{spec.name} episodes start from a save state: pass state=PATH ({_ON_THE_COMMAND_LINE.format(key='state')}). Record one with "
        f"`nonstop gameboy record-state --game {spec.name} --rom ROM --from PYBOY_STATE --out FILE` "
        f"(play to the encounter in PyBoy's window, `pyboy ROM`, and press Z to save a PyBoy state first)"
    )


def make_gameboy(
    game: str,
    *,
    rom: str | os.PathLike[str] | None = None,
    state: str | os.PathLike[str] | None = None,
    obs_type: ObsType = "gray84",
    max_episode_steps: int | None = None,
    action_set: Literal["full", "paper"] = "full",
) -> gymnasium.Env:
    """Build Game Boy ``game`` (a key of :data:`GAMES`) in the paper's setting.

    ``obs_type="gray84"`` (default) is the paper's preprocessing: the grayscale screen area-averaged
    to 84×84 ``uint8`` (the same :class:`~nonstop.envs.atari.AreaResize` the Atari envs use).
    """
    check_gameboy_kwargs(
        game, rom=rom, state=state, obs_type=obs_type, max_episode_steps=max_episode_steps, action_set=action_set
    )
    raw = "gray" if obs_type == "gray84" else obs_type
    env = GameBoyEnv(
        game, rom=rom, state=state, obs_type=raw, max_episode_steps=max_episode_steps, action_set=action_set
    )
    return AreaResize(env, PREPROCESSED_SHAPE) if obs_type == "gray84" else env


def _pyboy_version() -> str:
    pyboy, _ = _import_pyboy()
    return getattr(pyboy, "__version__", "?")


# --- registration ---------------------------------------------------------------------------------


def _register_games() -> None:
    for name, spec in GAMES.items():
        register(
            f"GameBoy/{name}",
            functools.partial(make_gameboy, name),
            family="gameboy",
            tick_hz=GAMEBOY_TICK_HZ,
            noop_action=0,
            default_beta="noop",
            description=spec.description,
            check=functools.partial(check_gameboy_kwargs, name),
        )


_register_games()
