"""Tools around the Game Boy worlds: recording a start state (``nonstop gameboy record-state``) and
the plain-PyBoy loop that ``nonstop bench host`` compares the host with.

They drive PyBoy beside the env rather than through it, so they live apart from
:mod:`nonstop.envs.gameboy`, whose emulator start, ROM checks and save-state format they reuse.

>>> parse_presses("start*2, wait*60, a")
[('start', 2), ('wait', 60), ('a', 1)]
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium

from . import gameboy
from .atari import PREPROCESSED_SHAPE, AreaResize
from .gbrom import RomError

__all__ = ["parse_presses", "plain_pyboy_loop", "record_state"]


def parse_presses(script: str) -> list[tuple[str, int]]:
    """``"start*2,wait*60,a"`` -> ``[("start", 2), ("wait", 60), ("a", 1)]``: a button (or ``wait``)
    held for a number of frames.

    >>> parse_presses("right*30, wait*5, a")
    [('right', 30), ('wait', 5), ('a', 1)]
    """
    allowed = ("a", "b", "left", "up", "right", "down", "start", "select", "wait")
    steps = []
    for item in filter(None, (part.strip() for part in script.split(","))):
        name, _, count = item.partition("*")
        name = name.strip().lower()
        if name not in allowed:
            raise ValueError(f"unknown button {name!r} in {script!r}; use {', '.join(allowed)}")
        try:
            frames = int(count) if count else 1
        except ValueError:
            raise ValueError(f"{item!r}: the count after '*' must be a whole number of frames") from None
        if frames < 1:
            raise ValueError(f"{item!r}: a press lasts at least 1 frame")
        steps.append((name, frames))
    return steps


def record_state(
    game: str,
    out: str | os.PathLike[str],
    *,
    rom: str | os.PathLike[str] | None = None,
    from_state: str | os.PathLike[str] | None = None,
    presses: str = "",
    boot_frames: int | None = None,
) -> dict[str, Any]:
    """Record a nonstop save state for ``game``: start from power-on (after ``boot_frames``, by
    default the game's own) or from a PyBoy state file the user saved (``from_state``: in PyBoy's
    window, press Z), play ``presses`` (see :func:`parse_presses`), and save with a header that
    ties the state to this exact ROM. Returns what was recorded."""
    spec = gameboy._game(game)
    found = gameboy.find_rom(game, rom)
    steps = parse_presses(presses)
    if boot_frames is not None and (not isinstance(boot_frames, int) or boot_frames < 0):
        raise ValueError(f"boot_frames must be a non-negative int, got {boot_frames!r}")
    payload = None
    if from_state is not None:
        path = Path(from_state).expanduser()
        try:
            payload = path.read_bytes()
        except OSError as error:
            raise RomError(f"cannot read PyBoy state {path}: {error.strerror or error}") from None
        if payload.startswith(gameboy._STATE_MAGIC):
            payload = gameboy.read_state(path, found)  # already a nonstop state: still must match the ROM
    emulator = gameboy._start_pyboy(found)
    try:
        if payload is not None:
            try:
                emulator.load_state(io.BytesIO(payload))
            except Exception as error:
                raise RomError(
                    f"{from_state} is not a PyBoy save state PyBoy {gameboy._pyboy_version()} can load: {error}"
                ) from None
            gameboy._release_all(emulator)
        else:
            emulator.tick(spec.boot_frames if boot_frames is None else boot_frames, True, False)
        frames = 0
        for name, count in steps:
            if name != "wait":
                emulator.button(name, count)
            emulator.tick(count, True, False)  # draws the last frame, so the state holds a screen
            frames += count
        buffer = io.BytesIO()
        emulator.save_state(buffer)
    finally:
        emulator.stop(save=False)
    gameboy.write_state(out, buffer.getvalue(), found, spec.name)
    return {
        "game": spec.name,
        "rom": found.source,
        "title": found.header.title,
        "frames_played": frames,
        "out": str(out),
    }


def plain_pyboy_loop(
    game: str,
    steps: int,
    *,
    obs_type: gameboy.ObsType = "gray84",
    timers: tuple[Callable[[], float], Callable[[], float]],
) -> dict[str, float]:
    """The baseline a hand-written PyBoy loop reaches on ``game``: from the env's own start state,
    ``tick(1)`` per frame and the same observation the env returns (the same copy, the same
    resize), no Gymnasium and no host. Also times bare ``tick(1)`` calls, the emulator's ceiling.

    ``timers`` are ``(wall, cpu)`` stopwatches (the benchmark's own). Returns steps per second:
    ``steps_per_s``/``cpu_steps_per_s`` with the observation, ``tick_only_steps_per_s`` without.
    """
    wall, cpu = timers
    env = gameboy.GameBoyEnv(game, obs_type="gray" if obs_type == "gray84" else obs_type)
    try:
        env.reset(seed=0)
        emulator, render, observe = env._emulator, env._render_frames, env._observe
        if obs_type == "gray84":
            resize = AreaResize(_FrameStub(env.observation_space), PREPROCESSED_SHAPE).observation
            raw_observe = observe
            observe = lambda: resize(raw_observe())  # noqa: E731
        tick = emulator.tick
        start, start_cpu = wall(), cpu()
        for _ in range(steps):
            tick(1, render, False)
            observe()
        elapsed, elapsed_cpu = wall() - start, cpu() - start_cpu
        start = wall()
        for _ in range(steps):
            tick(1, render, False)
        tick_only = wall() - start
    finally:
        env.close()
    return {
        "steps_per_s": steps / elapsed,
        "cpu_steps_per_s": steps / elapsed_cpu,
        "tick_only_steps_per_s": steps / tick_only,
    }


class _FrameStub(gymnasium.Env):
    """Only an observation space: lets the plain-PyBoy baseline build the very resize the env uses."""

    def __init__(self, space: gymnasium.Space) -> None:
        self.observation_space = space
        self.action_space = gymnasium.spaces.Discrete(1)
