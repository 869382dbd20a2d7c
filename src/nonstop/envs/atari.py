"""Atari 2600 games through ale-py, in the paper's realtime setting.

The paper runs Atari "at 60 frames per second with noop actions executed as β, to mimic the way
humans interact with the console" (Riemer et al., ICLR 2025). That is the default here: one env step
is one frame (``frameskip=1``), there are no sticky actions (``repeat_action_probability=0.0``: the
only randomness left is the game's own), the action set is the game's minimal one and action 0 is
NOOP.
Frame skipping is deliberately not offered: in a realtime world an agent that acts every k frames,
with β = ``"repeat"`` filling the ticks in between, *is* frame skipping, and the host measures it.

``preprocess=True`` gives the usual 84×84 grayscale ``uint8`` frame (the input of the paper's IMPALA
network); the default is the raw 210×160 RGB frame.

ale_py is imported only when an Atari env is built or an ALE id is resolved, so ``import
nonstop.envs`` stays light.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Mapping
from typing import Any, Final, Literal

import gymnasium
import numpy as np

from .spec import EnvInfo, register

__all__ = [
    "ATARI_TICK_HZ",
    "AreaResize",
    "make_atari",
    "atari_info",
    "check_atari_kwargs",
    "check_game",
    "register_ale_with_gymnasium",
]

ATARI_TICK_HZ: Final = 60.0
PREPROCESSED_SHAPE: Final = (84, 84)
_AtariRenderMode = Literal["rgb_array", "human"]


class AreaResize(gymnasium.ObservationWrapper[np.ndarray, Any, np.ndarray], gymnasium.utils.RecordConstructorArgs):
    """Shrink 2-D ``uint8`` frames by area averaging (what ``cv2.INTER_AREA`` does), in numpy.

    Why not gymnasium's ``AtariPreprocessing``/``ResizeObservation``: both need OpenCV, which nonstop
    does not depend on. The weights here are integers and every sum is exact, so the output is
    bit-identical on every machine, which replay hashes rely on.

    >>> import numpy as np
    >>> from gymnasium.spaces import Box
    >>> class Still(gymnasium.Env):
    ...     observation_space = Box(0, 255, (4, 6), np.uint8)
    ...     action_space = Box(0, 1, (1,))
    ...     def reset(self, *, seed=None, options=None):
    ...         return np.arange(24, dtype=np.uint8).reshape(4, 6), {}
    >>> AreaResize(Still(), (2, 3)).reset()[0]
    array([[ 4,  6,  8],
           [16, 18, 20]], dtype=uint8)
    """

    def __init__(self, env: gymnasium.Env, shape: tuple[int, int] = PREPROCESSED_SHAPE) -> None:
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box) or space.dtype != np.uint8 or len(space.shape) != 2:
            raise TypeError(f"AreaResize needs a 2-D uint8 Box observation space, got {space}")
        if (
            not isinstance(shape, tuple)
            or len(shape) != 2
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)
        ):
            raise ValueError(f"shape must be a tuple of two positive ints, got {shape!r}")
        if shape[0] > space.shape[0] or shape[1] > space.shape[1]:
            raise ValueError(f"AreaResize only shrinks: {space.shape} -> {shape} would enlarge")
        # Recording the arguments lets gymnasium rebuild the wrapper from env.spec.
        gymnasium.utils.RecordConstructorArgs.__init__(self, shape=shape)
        gymnasium.ObservationWrapper.__init__(self, env)
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        in_h, in_w = space.shape
        # Every partial sum is an integer <= 255 * in_h * in_w; float32 holds those exactly up to
        # 2**24 (210x160 frames reach 8.6M), so it is as exact as float64 and faster.
        self._dtype: Final = np.float32 if 255 * in_h * in_w < 2**24 else np.float64
        self._rows: Final = _band(_area_weights(in_h, shape[0]), self._dtype, axis=0)
        self._cols: Final = _band(_area_weights(in_w, shape[1]), self._dtype, axis=1)
        self._denominator: Final = float(in_h * in_w)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        # Each output pixel touches at most a few input rows and columns (a band), so a handful of
        # gathered multiply-adds beats a dense matmul and never wakes BLAS threads.
        frame = observation.astype(self._dtype)
        (index, weight), *rest = self._rows
        rows = weight * frame[index]
        for index, weight in rest:
            rows += weight * frame[index]
        (index, weight), *rest = self._cols
        out = weight * rows[:, index]
        for index, weight in rest:
            out += weight * rows[:, index]
        # np.rint rounds halves to even, as OpenCV's saturate_cast does.
        return np.rint(out.astype(np.float64) / self._denominator).astype(np.uint8)


def _band(weights: np.ndarray, dtype: type, axis: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split a banded (out x in) weight matrix into K (input index, weight) pairs per output pixel.

    Pair k holds, for every output pixel, its k-th overlapping input pixel and weight (0 past the
    end of its band), shaped to broadcast along ``axis`` of the frame.
    """
    width = int((weights > 0).sum(axis=1).max())
    first = (weights > 0).argmax(axis=1)
    pairs = []
    for k in range(width):
        index = np.minimum(first + k, weights.shape[1] - 1)
        weight = weights[np.arange(weights.shape[0]), index] * (first + k < weights.shape[1])
        shape = (-1, 1) if axis == 0 else (1, -1)
        pairs.append((index, weight.astype(dtype).reshape(shape)))
    return pairs


@functools.lru_cache(maxsize=None)
def _area_weights(size_in: int, size_out: int) -> np.ndarray:
    """Integer overlap of each input pixel with each output pixel, in units of 1/(size_in*size_out).

    On a fine grid, input pixel i spans [i*size_out, (i+1)*size_out) and output pixel j spans
    [j*size_in, (j+1)*size_in); their overlap is an integer, so every weight is exact.
    """
    j = np.arange(size_out)[:, None]
    i = np.arange(size_in)[None, :]
    lo = np.maximum(j * size_in, i * size_out)
    hi = np.minimum((j + 1) * size_in, (i + 1) * size_out)
    weights = np.clip(hi - lo, 0, None).astype(np.float64)
    weights.setflags(write=False)  # cached and shared: nobody may edit it
    return weights


def register_ale_with_gymnasium() -> None:
    """Import ale_py and register its ``ALE/*`` ids with gymnasium (idempotent).

    Also sets ALE's (process-wide, static) log level to errors only: every ``ALEInterface``
    otherwise prints its "A.L.E ... [Powered by Stella]" banner on stderr as it is constructed,
    once per env and per spawned host process. ale_py's own env lowers the level the same way,
    but only after its interface, and so the banner, exists.
    """
    try:
        import ale_py
    except ImportError as error:  # pragma: no cover - ale-py is a hard dependency
        raise ImportError("Atari envs need ale-py: pip install 'ale-py>=0.9'") from error
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    if "ALE/Pong-v5" not in gymnasium.registry:
        gymnasium.register_envs(ale_py)


def _ale_game_ids() -> list[str]:
    register_ale_with_gymnasium()
    return sorted(
        env_id.removeprefix("ALE/").removesuffix("-v5")
        for env_id in gymnasium.registry
        if env_id.startswith("ALE/") and env_id.endswith("-v5") and "-ram-" not in env_id
    )


def check_game(game: str) -> None:
    """Raise a ``ValueError`` naming close matches unless ``game`` is an ALE game (imports ale_py)."""
    if not isinstance(game, str) or not game:
        raise TypeError(f"game must be a non-empty str such as 'Boxing', got {game!r}")
    games = _ale_game_ids()
    if game not in games:
        close = difflib.get_close_matches(game, games, n=5, cutoff=0.6)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"unknown Atari game {game!r}.{hint} Games are named as in 'ALE/<Game>-v5' "
            f"({len(games)} available, e.g. {', '.join(games[:3])})"
        )


def check_atari_kwargs(**options: Any) -> None:
    """Validate :func:`make_atari`'s options (not the game); raise a precise error for the first bad
    one. Names and defaults come from `make_atari`'s own signature, so the two never disagree."""
    bound = inspect.signature(make_atari).bind("Boxing", **options)  # an unknown name: TypeError
    bound.apply_defaults()
    _check_options(bound.arguments)


def _check_options(options: Mapping[str, Any]) -> None:
    for name in ("preprocess", "full_action_space"):
        value = options[name]
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    for name in ("mode", "difficulty"):
        value = options[name]
        if value is not None and not _is_int(value):
            raise TypeError(f"{name} must be an int or None, got {type(value).__name__} {value!r}")
    max_episode_steps = options["max_episode_steps"]
    if max_episode_steps is not None:
        if not _is_int(max_episode_steps):
            raise TypeError(f"max_episode_steps must be an int or None, got {max_episode_steps!r}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    sticky = options["repeat_action_probability"]
    if isinstance(sticky, bool) or not isinstance(sticky, (int, float)):
        raise TypeError(f"repeat_action_probability must be a float, got {sticky!r}")
    if not 0.0 <= sticky <= 1.0:
        raise ValueError(f"repeat_action_probability must be in [0, 1], got {sticky}")
    frameskip = options["frameskip"]
    if frameskip != 1:
        raise ValueError(
            f"frameskip must be 1 (got {frameskip!r}): in nonstop one tick is one 60 Hz frame; to act "
            f"every k frames, act every k ticks and let β='repeat' fill the gap"
        )
    render_mode = options["render_mode"]
    if render_mode not in (None, "rgb_array", "human"):
        raise ValueError(f"render_mode must be None, 'rgb_array' or 'human', got {render_mode!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def make_atari(
    game: str,
    *,
    preprocess: bool = False,
    max_episode_steps: int | None = None,
    repeat_action_probability: float = 0.0,
    full_action_space: bool = False,
    mode: int | None = None,
    difficulty: int | None = None,
    frameskip: int = 1,
    render_mode: _AtariRenderMode | None = None,
) -> gymnasium.Env:
    """Build ALE game ``game`` (``"Boxing"``, ``"NameThisGame"``) with the paper's realtime defaults.

    ``max_episode_steps`` truncates an episode after that many ticks (ALE itself stops at 108,000
    frames, 30 minutes). ``reset(seed=s)`` reseeds ALE, so a seed and an action sequence fix the
    frames exactly.

    >>> env = make_atari("Boxing", preprocess=True)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, obs.dtype, info["episode_frame_number"]
    ((84, 84), dtype('uint8'), 0)
    >>> env.step(0)[4]["episode_frame_number"]   # one step, one frame
    1
    """
    _check_options(locals())  # first statement: locals() is exactly the arguments
    check_game(game)
    env = gymnasium.make(
        f"ALE/{game}-v5",
        obs_type="grayscale" if preprocess else "rgb",
        frameskip=1,
        repeat_action_probability=float(repeat_action_probability),
        full_action_space=full_action_space,
        mode=mode,
        difficulty=difficulty,
        max_episode_steps=max_episode_steps,
        render_mode=render_mode,
    )
    # Gymnasium's AtariPreprocessing(frame_skip=1, noop_max=0) amounts to ALE's own grayscale
    # screen plus an area resize; doing it here avoids its OpenCV dependency.
    return AreaResize(env, PREPROCESSED_SHAPE) if preprocess else env


def atari_info(env_id: str, game: str) -> EnvInfo:
    """The realtime facts of an ALE game in the paper's setting."""
    return EnvInfo(
        env_id=env_id,
        family="atari",
        tick_hz=ATARI_TICK_HZ,
        noop_action=0,  # the minimal action set always starts with NOOP
        default_beta="noop",
        description=f"Atari {game} (ale-py): 60 Hz, one frame per tick, no sticky actions, minimal actions",
    )


def _register_named_games() -> None:
    descriptions = {
        "Boxing": "Atari Boxing at 60 Hz; its stochastic opponent makes delay costly (paper Fig. 6a)",
        "Krull": "Atari Krull at 60 Hz; predictable enough to tolerate delay (paper Fig. 6b)",
        "NameThisGame": "Atari Name This Game at 60 Hz (paper Fig. 6c)",
    }
    for game, description in descriptions.items():
        register(
            game,
            functools.partial(make_atari, game),
            family="atari",
            tick_hz=ATARI_TICK_HZ,
            noop_action=0,
            default_beta="noop",
            description=description,
            check=check_atari_kwargs,
        )


_register_named_games()
