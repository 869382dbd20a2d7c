"""Each team's matches in a team world: kills, deaths, survival and wins, per episode and over time.

What counts (docs/multi-agent.md, "Team self-play"):

* an agent **dies** when it leaves the world before the episode's end: a MAgent2 world counts
  each team's living agents on its grid (``get_num``), and a team's deaths are its agents missing
  from that count; another world's dead are the agents it reports terminated (PettingZoo's
  ``terminations[agent]``, not truncated). An agent still in the world when the episode ends (the
  world's time limit truncates it, or its side has won) **survives**;
* a team's **kills** in an episode are the deaths of every other team in it (in MAgent2's battle,
  the only way an agent dies is at the other team's hands);
* a team **wins** an episode when it killed more than it lost (``kills > deaths``): the bar the
  issue sets against a random team.

`TeamTally` counts them as the world steps (a wrapper around any seat world); `RUN/teams.csv` holds a
row per team and episode (`TEAM_COLUMNS`), written by team self-play (`nonstop.experiment.teamplay`);
`team_figures` and `plot_team_rates` are what ``nonstop report`` shows of it.

>>> end = EpisodeEnd(episode=0, end_tick=100, wall_s=1.0)
>>> rows = [team_row(end, "red", "snapshot 0", seats=3, deaths=1, kills=2, score=1.5),
...         team_row(end, "blue", "learner", seats=3, deaths=2, kills=1, score=-0.5)]
>>> [(r["team"], r["survivors"], r["won"]) for r in rows]
[('red', 2, 1), ('blue', 1, 0)]
>>> team_figures(rows)["red"]["win_rate"], team_figures(rows)["blue"]["survival_rate"]
(1.0, 0.3333333333333333)
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, NamedTuple

import numpy as np

from nonstop.envs.seats import team_of

__all__ = [
    "TEAM_COLUMNS",
    "TEAMS_FILE",
    "RECENT_MATCHES",
    "TeamTally",
    "EpisodeEnd",
    "team_row",
    "read_team_rows",
    "team_figures",
    "plot_team_rates",
    "write_team_rows",
]

#: the file of a run directory that holds every team's matches
TEAMS_FILE: Final = "teams.csv"
#: columns of RUN/teams.csv: the episode, its end, the team, who played it (``learner`` or the
#: opponent: ``snapshot N``, ``random``), its seats, kills, deaths, survivors, return (its seats'
#: rewards summed over the episode) and whether it won (kills > deaths)
TEAM_COLUMNS: Final = (
    "episode",
    "end_tick",
    "wall_s",
    "team",
    "player",
    "seats",
    "kills",
    "deaths",
    "survivors",
    "score",
    "won",
)
#: episodes in the rolling rates of the report, and in its "last" figures
RECENT_MATCHES: Final = 20


class EpisodeEnd(NamedTuple):
    """When an episode ended: its number, the world's tick, the seconds since the run began."""

    episode: int
    end_tick: int
    wall_s: float


def team_row(
    end: EpisodeEnd, team: str, player: str, *, seats: int, deaths: int, kills: int, score: float
) -> dict[str, Any]:
    """One row of RUN/teams.csv (`TEAM_COLUMNS`): ``team``'s (played by ``player``) in the episode ``end`` ends."""
    return {
        "episode": int(end.episode),
        "end_tick": int(end.end_tick),
        "wall_s": round(float(end.wall_s), 3),
        "team": team,
        "player": player,
        "seats": int(seats),
        "kills": int(kills),
        "deaths": int(deaths),
        "survivors": int(seats) - int(deaths),
        "score": float(score),
        "won": int(kills > deaths),
    }


class TeamTally:
    """A seat world that counts each team's deaths and return in the current episode as it steps.

    Wraps PettingZoo's parallel API (everything else passes through): ``deaths[team]`` counts the
    team's agents reported terminated this episode, ``returns[team]`` its seats' rewards summed.
    ``finished`` holds the tallies of episodes that ended (``(deaths, returns)`` per episode, the
    newest last), taken when the world is reset; `take_finished` hands them over and forgets them.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.team = {str(a): team_of(str(a)) for a in self.possible_agents}
        self.teams = list(dict.fromkeys(self.team.values()))
        self.sizes = {t: sum(1 for a in self.team.values() if a == t) for t in self.teams}
        self.deaths = dict.fromkeys(self.teams, 0)
        self.returns = dict.fromkeys(self.teams, 0.0)
        self.finished: list[tuple[dict[str, int], dict[str, float]]] = []
        self.stepped = False

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not yet set: no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self.env.action_space(agent)

    def reset(self, **kwargs: Any) -> Any:
        if self.stepped:  # the episode that ends here is counted; a reset before any step is not
            self.finished.append((dict(self.deaths), dict(self.returns)))
        self.deaths = dict.fromkeys(self.teams, 0)
        self.returns = dict.fromkeys(self.teams, 0.0)
        self.stepped = False
        return self.env.reset(**kwargs)

    def step(self, actions: dict[str, Any]) -> Any:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self.stepped = True
        for agent, reward in rewards.items():
            self.returns[self.team[str(agent)]] += float(reward)
        counts = self._living()
        if counts is not None:  # the world counts its living agents: deaths are what is missing
            for team, alive in zip(self.teams, counts):
                self.deaths[team] = self.sizes[team] - alive
        else:
            for agent, done in terminated.items():
                if done and not truncated.get(agent, False):
                    self.deaths[self.team[str(agent)]] += 1
        return obs, rewards, terminated, truncated, infos

    def _living(self) -> list[int] | None:
        """Each team's living agents as a MAgent2 world counts them (its grid's ``get_num`` per
        team handle, teams in seat order), or None for a world that does not: a world that
        terminates every agent when it ends (MAgent2 does) must not count its survivors as dead."""
        world = getattr(self.env, "unwrapped", self.env)
        grid, handles = getattr(world, "env", None), getattr(world, "handles", None)
        if grid is None or handles is None or not hasattr(grid, "get_num") or len(handles) != len(self.teams):
            return None
        return [int(grid.get_num(h)) for h in handles]

    def take_finished(self) -> list[tuple[dict[str, int], dict[str, float]]]:
        done, self.finished = self.finished, []
        return done

    def kills(self, deaths: dict[str, int]) -> dict[str, int]:
        """Each team's kills: every other team's deaths."""
        total = sum(deaths.values())
        return {t: total - deaths[t] for t in self.teams}

    def close(self) -> None:
        self.env.close()


def read_team_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """RUN/teams.csv as rows (numbers as numbers); a last line cut short by a kill is left out."""
    text = Path(path).read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    for raw in csv.DictReader(text.splitlines()):
        missing = [c for c in TEAM_COLUMNS if c not in raw]
        if missing:
            raise ValueError(f"{path} lacks the columns {missing} (is it a teams.csv of nonstop?)")
        row: dict[str, Any] = dict(raw)
        for key in ("episode", "end_tick", "seats", "kills", "deaths", "survivors", "won"):
            row[key] = int(float(raw[key]))
        for key in ("wall_s", "score"):
            row[key] = float(raw[key])
        rows.append(row)
    return rows


def write_team_rows(path: str | os.PathLike, rows: Iterable[dict[str, Any]], *, append: bool = True) -> None:
    """Append ``rows`` to RUN/teams.csv (its header written when the file is new)."""
    path = Path(path)
    new = not path.exists() or not append
    with path.open("w" if not append else "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TEAM_COLUMNS)
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow({c: row[c] for c in TEAM_COLUMNS})


def team_figures(rows: list[dict[str, Any]], recent: int = RECENT_MATCHES) -> dict[str, dict[str, Any]]:
    """Each team's rates over all its episodes and over its last ``recent``: win rate (kills >
    deaths), kill rate (kills over the other teams' seats), survival rate (survivors over its seats),
    mean return; and with whom (``players``: each player's episodes)."""
    out: dict[str, dict[str, Any]] = {}
    by_episode: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_episode.setdefault(row["episode"], []).append(row)
    for team in dict.fromkeys(r["team"] for r in rows):
        mine = [r for r in rows if r["team"] == team]
        last = mine[-recent:]

        win, kill, survive = _rates(mine, team, by_episode)
        win_last, kill_last, survive_last = _rates(last, team, by_episode)
        players: dict[str, int] = {}
        for r in mine:
            players[r["player"]] = players.get(r["player"], 0) + 1
        out[team] = {
            "episodes": len(mine),
            "win_rate": win,
            "kill_rate": kill,
            "survival_rate": survive,
            "score_mean": float(np.mean([r["score"] for r in mine])),
            f"win_rate_last{recent}": win_last,
            f"kill_rate_last{recent}": kill_last,
            f"survival_rate_last{recent}": survive_last,
            "players": players,
        }
    return out


def _rates(
    sel: list[dict[str, Any]], team: str, by_episode: dict[int, list[dict[str, Any]]]
) -> tuple[float, float, float]:
    """Win, kill and survival rates of ``team`` over its rows ``sel``."""
    others = [sum(o["seats"] for o in by_episode[r["episode"]] if o["team"] != team) for r in sel]
    kill = [r["kills"] / n for r, n in zip(sel, others) if n]
    return (
        float(np.mean([r["won"] for r in sel])),
        float(np.mean(kill)) if kill else float("nan"),
        float(np.mean([r["survivors"] / r["seats"] for r in sel if r["seats"]])),
    )


def plot_team_rates(rows: list[dict[str, Any]], path: str | os.PathLike, tau_m: float | None = None) -> Path:
    """Each team's win, kill and survival rates (rolling over `RECENT_MATCHES` episodes) against
    world time (``end_tick``·τ_M; episodes where τ_M is unknown)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nonstop.metrics.plots import rolling_mean

    teams = list(dict.fromkeys(r["team"] for r in rows))
    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    for team in teams:
        mine = [r for r in rows if r["team"] == team]
        x = np.array([r["end_tick"] * tau_m if tau_m else r["episode"] for r in mine], float)
        seats_other = {
            r["episode"]: sum(o["seats"] for o in rows if o["episode"] == r["episode"] and o["team"] != team)
            for r in mine
        }
        series = {
            "win rate": np.array([r["won"] for r in mine], float),
            "kill rate": np.array([r["kills"] / max(1, seats_other[r["episode"]]) for r in mine], float),
            "survival rate": np.array([r["survivors"] / max(1, r["seats"]) for r in mine], float),
        }
        for ax, (name, values) in zip(axes, series.items()):
            ax.plot(x, rolling_mean(values, RECENT_MATCHES), label=team)
            ax.set_ylabel(f"{name}\n(last {RECENT_MATCHES})")
            ax.set_ylim(-0.05, 1.05)
    axes[0].legend(loc="best")
    axes[0].set_title("Each team's matches (RUN/teams.csv)")
    axes[-1].set_xlabel("world time (s)" if tau_m else "episode")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
