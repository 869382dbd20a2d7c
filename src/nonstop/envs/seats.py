"""A seat world's teams, read from its seat names: the one home of `team_of` and its kin.

A seat's **team** is its name up to the last ``_`` (PettingZoo's convention: ``red_3`` plays for
``red``, ``first_0`` for ``first``); a name without one is a team of its own. The rule belongs to
no one family of worlds (MAgent2's battle, a two-seat duel and a user's PettingZoo world read
alike), so it sits here, low enough for the realtime core, the inference server's lanes, the
server, the composition and the benches to share it.

>>> team_of("red_17"), team_of("first_0"), team_of("agent")
('red', 'first', 'agent')
>>> teams_of(["red_0", "red_1", "blue_0"])
{'red_0': 'red', 'red_1': 'red', 'blue_0': 'blue'}
>>> team_names(["red_0", "blue_0", "red_1"])
['red', 'blue']
>>> team_seats(["red_0", "blue_0", "red_1"])
{'red': [0, 2], 'blue': [1]}
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["team_of", "teams_of", "team_names", "team_seats"]


def team_of(seat: str) -> str:
    """A seat's team: its name up to the last ``_`` (``red_17`` → ``red``); a name without one is its own team."""
    return seat.rsplit("_", 1)[0] if "_" in seat else seat


def teams_of(seats: Iterable[str]) -> dict[str, str]:
    """``{seat: team}`` for every seat (`team_of`)."""
    return {seat: team_of(seat) for seat in seats}


def team_names(seats: Iterable[str]) -> list[str]:
    """The teams of ``seats``, each once, in the order of its first seat."""
    return list(dict.fromkeys(team_of(seat) for seat in seats))


def team_seats(seats: list[str]) -> dict[str, list[int]]:
    """Each team's seat indices, teams in the order of their first seat."""
    out: dict[str, list[int]] = {}
    for i, seat in enumerate(seats):
        out.setdefault(team_of(seat), []).append(i)
    return out
