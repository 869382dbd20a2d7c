"""Scripted policies that play from the screen: equal skill on every seat, no training.

`ScriptedBoxer` plays two-player Atari Boxing (``multi/Boxing``) for either seat: it finds both
boxers on the RGB screen by colour (``first_0`` is the white boxer, ``second_0`` the black one),
steps to a punching post beside the opponent, and punches from there. ``nonstop bench duel``
puts the same scripted boxer on both seats and slows one of them, so the only difference between
the two sides is latency.

Why that post: Boxing scores a punch when a glove meets the opponent's head, so the boxers must
stand close side by side with one about a head higher than the other; measured on the ROM (RAM
positions, the opponent standing still), 16 px apart horizontally and 14 px vertically lands a
punch about every 18 frames, a KO (100 points) inside 1,800 frames. The boxer takes the post
above the opponent when the opponent is in the lower half of the ring, below it otherwise, so it
never aims for a post outside the ring.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from gymnasium import spaces

from nonstop.policies.base import Decision, Policy, _check_seed

__all__ = ["ScriptedBoxer", "boxer_positions", "BOXER_COLOURS"]

#: the red channel of each seat's boxer on Boxing's screen (white 214, black 0; the ring's
#: floor 110, its ropes 195: no other pixel inside the ring has either value)
BOXER_COLOURS: Final = {"first_0": 214, "second_0": 0}
#: the ring's inside on the 210×160 screen (rows, columns): the scores, clock and logo lie outside
_RING_ROWS: Final = slice(25, 188)
_RING_COLS: Final = slice(24, 136)
#: from a boxer's back edge (the side away from the opponent) to its body position, in pixels,
#: so both boxers' positions agree with the ROM's own (a punching arm only moves the front edge)
_BACK_TO_BODY_FACING_RIGHT: Final = 19.5
_BACK_TO_BODY_FACING_LEFT: Final = 7.5
#: the black boxer's sprite sits a pixel higher about its ROM position than the white one's
_ROW_CORRECTION: Final = {"first_0": 0.0, "second_0": 1.0}
_RING_MIDDLE_ROW: Final = 81.0  # ring coordinates: the opponent below it -> take the post above

# the ALE's 18 actions (Boxing's minimal action set is all of them, in this order), by
# (horizontal, vertical, fire): -1 left/up, +1 right/down
_ACTIONS: Final = {
    (0, 0, 0): 0,
    (0, 0, 1): 1,
    (0, -1, 0): 2,
    (1, 0, 0): 3,
    (-1, 0, 0): 4,
    (0, 1, 0): 5,
    (1, -1, 0): 6,
    (-1, -1, 0): 7,
    (1, 1, 0): 8,
    (-1, 1, 0): 9,
    (0, -1, 1): 10,
    (1, 0, 1): 11,
    (-1, 0, 1): 12,
    (0, 1, 1): 13,
    (1, -1, 1): 14,
    (-1, -1, 1): 15,
    (1, 1, 1): 16,
    (-1, 1, 1): 17,
}
N_ACTIONS: Final = 18


def _extent(ring_red: np.ndarray, colour: int) -> tuple[int, int, int, int] | None:
    """Rows and columns (first, last) holding ``colour`` in the ring, or None if it is absent."""
    mask = ring_red == colour
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    return int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def boxer_positions(screen: np.ndarray) -> dict[str, tuple[float, float]] | None:
    """Each seat's boxer as ``(row, column)`` in ring pixels, from one RGB Boxing screen.

    The row is the middle of the boxer's sprite (its head: the gloves sit above and below it);
    the column is read from its back edge, which a punch does not move. None while either boxer
    is off the screen (never in a running match).

    >>> screen = np.zeros((210, 160, 3), np.uint8); screen[..., 0] = 110   # an empty ring
    >>> screen[60:106, 50:63, 0] = 214; screen[100:146, 90:103, 0] = 0     # white left, black right
    >>> boxer_positions(screen)
    {'first_0': (57.5, 45.5), 'second_0': (98.5, 85.5)}
    """
    ring = screen[_RING_ROWS, _RING_COLS, 0]
    white, black = _extent(ring, BOXER_COLOURS["first_0"]), _extent(ring, BOXER_COLOURS["second_0"])
    if white is None or black is None:
        return None
    white_left = white[2] + white[3] <= black[2] + black[3]
    out = {}
    for seat, (top, bottom, left, right), facing_right in (
        ("first_0", white, white_left),
        ("second_0", black, not white_left),
    ):
        column = left + _BACK_TO_BODY_FACING_RIGHT if facing_right else right + _BACK_TO_BODY_FACING_LEFT
        out[seat] = ((top + bottom) / 2 + _ROW_CORRECTION[seat], column)
    return out


class ScriptedBoxer(Policy):
    """A scripted two-player Boxing policy for ``seat`` (``"first_0"``: white, ``"second_0"``: black).

    Each observation: find both boxers (`boxer_positions`), move toward the punching post
    (``reach`` pixels beside the opponent, ``offset`` pixels above it, or below it when the
    opponent is in the upper half of the ring) and punch while within ``tolerance`` pixels of
    it. With probability ``epsilon`` it takes a uniformly random action instead, from its own
    generator (``seed``): matches between two scripted boxers then differ, so a score over
    several matches has a spread to measure. It beats a random player by a KO.

    >>> screen = np.zeros((210, 160, 3), np.uint8); screen[..., 0] = 110
    >>> screen[60:106, 50:63, 0] = 214; screen[100:146, 90:103, 0] = 0
    >>> ScriptedBoxer("first_0").act(screen).action     # far away, above-left: down-right
    8
    >>> ScriptedBoxer("third_0")
    Traceback (most recent call last):
    ...
    ValueError: ScriptedBoxer seat must be one of ['first_0', 'second_0'], got 'third_0'
    """

    def __init__(
        self,
        seat: str,
        *,
        epsilon: float = 0.0,
        seed: int | None = None,
        reach: float = 16.0,
        offset: float = 14.0,
        tolerance: float = 4.0,
    ) -> None:
        if seat not in BOXER_COLOURS:
            raise ValueError(f"ScriptedBoxer seat must be one of {sorted(BOXER_COLOURS)}, got {seat!r}")
        if not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be a probability in [0, 1], got {epsilon!r}")
        for name, value in (("reach", reach), ("offset", offset), ("tolerance", tolerance)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of pixels >= 0, got {value!r}")
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.seat: Final = seat
        self._opponent: Final = "second_0" if seat == "first_0" else "first_0"
        self.epsilon, self.reach, self.offset, self.tolerance = (
            float(epsilon),
            float(reach),
            float(offset),
            float(tolerance),
        )
        self._rng = np.random.default_rng()
        self.seed(seed)

    def seed(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(_check_seed(seed))

    def act(self, obs: np.ndarray) -> Decision:
        if self.epsilon and self._rng.random() < self.epsilon:
            return Decision(int(self._rng.integers(N_ACTIONS)))
        found = boxer_positions(np.asarray(obs))
        if found is None:
            return Decision(0)
        (my_row, my_col), (their_row, their_col) = found[self.seat], found[self._opponent]
        across = their_col - my_col
        post_row = their_row - self.offset if their_row >= _RING_MIDDLE_ROW else their_row + self.offset
        miss_col, miss_row = abs(across) - self.reach, post_row - my_row  # >0: too far / too high
        toward = 1 if across > 0 else -1
        horizontal = toward if miss_col > 1 else (-toward if miss_col < -1 else 0)
        vertical = 1 if miss_row > 1 else (-1 if miss_row < -1 else 0)
        fire = int(abs(miss_col) <= self.tolerance and abs(miss_row) <= self.tolerance)
        return Decision(_ACTIONS[(horizontal, vertical, fire)])

    def __repr__(self) -> str:
        return f"ScriptedBoxer(seat={self.seat!r}, epsilon={self.epsilon})"
