"""The paper's figures, each behind one command (what ``nonstop paper FIG`` runs).

Every figure of Riemer et al. (ICLR 2025) that nonstop can make maps to machinery the project
already has: the learning figures to `nonstop sweep` cells (`nonstop.studies.sweep`), Figure 7 to
``nonstop bench nstar`` and Figure 8 to ``nonstop bench nlstar`` (past this machine's cores through
Ray). A figure here is that command at one of three budgets, then what the paper plots derived from
its output, written to ``OUT`` as ``figN.png``, ``figN.csv`` and ``figN.json``:

==========  =====================================================  ====================================
figure      what it shows                                          machinery
==========  =====================================================  ====================================
4           Pokémon battles won / wild Pokémon caught over time    sweep cells on the Game Boy
            at 100M: sequential, learn-then-infer, staggered, and
            a parallel-learning baseline
5           Tetris return vs model size, staggered vs sequential   sweep cells on the Game Boy
6           Atari (Boxing, Krull, NameThisGame) return vs size,    sweep cells (2xDeep: ``--arch``)
            staggered vs sequential, the 2xDeep curve, β lines
7           N_I* vs τ̄_θ and vs size, Algorithms 1 and 2, an       bench nstar ``--latency egreedy``
            ε-greedy policy at ε 0 and 0.5
8           N_L* vs τ_L and vs size, three batch sizes             bench nlstar ``--backend ray``
11, 12      Figure 4 at 1M and 10M (staggered vs sequential)       sweep cells on the Game Boy
13          Figure 4 at 100M over non-noop actions                 sweep cells on the Game Boy
14          Figure 6 with Rainbow                                  not offered (`NotOffered`)
==========  =====================================================  ====================================

The ``tiny`` budget is a smoke test of each pipeline (Figure 6 then runs on the delay world,
``theory/delay-cycle``, where DQN learns in a minute; Figure 5 is Tetris at every budget and, like the
other Game Boy figures, needs the user's ROM); ``small`` runs the real games briefly; ``paper`` runs the
paper's settings (a cluster's work). Figures 5 and 6 run their staggered cells as the authors simulated
delay (``sweep --delay-start zeros``: zero frames for the first d steps, `nonstop.studies.delaysim`);
the Pokémon figures ran in realtime in the paper and run as nonstop's realtime cells. Figure 7 starts
Algorithms 1 and 2 as the authors' scripts start them (``bench nstar --tau-theta-max declared``) and
reports the cold start (τ̂ = 0, no stagger) as its own rows, beside a jitter sweep and both clocks.
Game Boy figures check for the user's ROM and save states first and raise `MissingInput`, one
line naming what is missing, before anything runs.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.studies.paperlimits import nlstar_figure, nstar_figure
from nonstop.studies.sweep import GAMES, INTERACTIONS, env_available, plot, t_quantile_95

__all__ = [
    "BUDGET_NAMES",
    "FIGURES",
    "HUMAN_SCORES",
    "Figure",
    "MissingInput",
    "NotOffered",
    "beta_returns",
    "check_inputs",
    "encounter_series",
    "figure",
    "figure_listing",
    "run_figure",
]

BUDGET_NAMES: Final = ("tiny", "small", "paper")

#: where the docs say how to bring ROMs and save states
ROM_DOCS: Final = "docs/concepts.md#game-boy-worlds-bring-your-own-roms"


class MissingInput(FileNotFoundError):
    """A figure needs something of the user's (a ROM, a save state) that is not here."""


class NotOffered(ValueError):
    """A figure nonstop does not make, and why."""


@dataclass(frozen=True)
class Figure:
    """One of the paper's figures: what it shows, what the paper found, and the command per budget."""

    number: int
    shows: str
    paper: str
    #: how its output is read: ``returns`` (vs model size), ``over_time``, ``over_actions``, ``nstar``, ``nlstar``, ``none``
    kind: str
    #: budget → the nonstop command it runs (without ``--out``/``--plot``/``--json``)
    commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: budget → its cost on 2 cores
    costs: dict[str, str] = field(default_factory=dict)
    #: why it is not offered (``kind == "none"``)
    why_not: str = ""
    #: budget → more commands of the same bench whose rows join the figure's (each row labelled ``part``)
    more: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = field(default_factory=dict)

    def command(self, budget: str) -> tuple[str, ...]:
        if budget not in BUDGET_NAMES:
            raise ValueError(f"--budget must be one of {', '.join(BUDGET_NAMES)}, got {budget!r}")
        return self.commands.get(budget, ())


def _sweep(budget: str, games: str, *rest: str) -> tuple[str, ...]:
    return ("sweep", "--budget", budget, "--games", games, *rest)


_POKEMON: Final = "PokemonBattle,PokemonCatch"
#: the paper's Figure 4: "inference and learning performed sequentially" (infer-then-learn), "the order flipped"
#: (learn-then-infer), staggered asynchronous inference and learning, and the parallel-learning baseline
_FIG4_INTERACTIONS: Final = ("--interactions", "infer_then_learn,learn_then_infer,staggered,parallel_learning")
_PAIR: Final = ("--interactions", "staggered,sequential")
#: Figures 5 and 6 ran on the authors' delay simulation (zero frames for the first d steps); Pokémon ran in realtime
_ZEROS: Final = ("--delay-start", "zeros")
_ATARI: Final = "Boxing,Krull,NameThisGame"
_DEEP: Final = ("--arch", "impala,2xdeep")
_NSTAR: Final = (
    "bench",
    "nstar",
    "--latency",
    "egreedy",
    "--sigma",
    "0,0.5",
    "--scheduler",
    "max_time,exp_time",
    "--return-seeds",
    "0",
    "--tau-theta-max",
    "declared,cold",
)
#: Figure 7's further data: the forward pass's jitter swept at ε 0 (the search, as the authors start), and
#: Algorithms 1 and 2 at the same N on both clocks (the wall clock holds whole-tick phases, `TickPhases`)
_NSTAR_ONE: Final = (
    "bench",
    "nstar",
    "--latency",
    "egreedy",
    "--sigma",
    "0",
    "--scheduler",
    "max_time,exp_time",
    "--return-seeds",
    "0",
    "--tau-theta",
    "5",
    "--tau-theta-max",
    "declared",
)


def _nstar_more(quick: bool, wall_workers: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    q = ("--quick",) if quick else ()
    return (
        ("jitter", (*_NSTAR_ONE, "--jitter", "0.001,0.01,0.05", *q)),
        ("clocks", (*_NSTAR_ONE, "--at-workers", "6,10", *q)),
        ("clocks", (*_NSTAR_ONE, "--clock", "wall", "--at-workers", wall_workers, *q)),
    )


_NLSTAR: Final = ("bench", "nlstar", "--backend", "ray", "--batch", "16,32,64")


def _pokemon(k: str, interactions: tuple[str, ...], paper_seeds: str) -> dict[str, tuple[str, ...]]:
    return {
        "tiny": _sweep("small", _POKEMON, "--sizes", k, *interactions, "--seeds", "1", "--episodes", "2"),
        "small": _sweep("small", _POKEMON, "--sizes", k, *interactions, "--seeds", "2", "--episodes", "20"),
        "paper": _sweep("paper", _POKEMON, "--sizes", k, *interactions, "--seeds", paper_seeds),
    }


_POKEMON_COSTS: Final = {"tiny": "a few min with ROM and states", "small": "hours", "paper": "a cluster's days"}

FIGURES: Final[dict[int, Figure]] = {
    f.number: f
    for f in (
        Figure(
            4,
            "Pokémon Blue: battles won and wild Pokémon caught over time at 100M (k = 29, 70 ticks): sequential "
            "(infer-then-learn), learn-then-infer, staggered, and a parallel-learning baseline (33x batch, 33x fewer updates)",
            "staggered asynchronous inference and learning win the most battles and catch the most Pokémon over time",
            "over_time",
            _pokemon("29", _FIG4_INTERACTIONS, "3"),
            _POKEMON_COSTS,
        ),
        Figure(
            5,
            "Tetris: mean episodic return vs model size (1M-1B), staggered (Algorithm 1) vs one inference process",
            "sequential cannot beat random from 1M parameters on; staggered keeps a higher reward rate past 1B",
            "returns",
            {
                "tiny": _sweep(
                    "small", "Tetris", "--sizes", "1,29", *_PAIR, *_ZEROS, "--seeds", "1", "--episodes", "1"
                ),
                "small": _sweep("small", "Tetris", *_PAIR, *_ZEROS, "--seeds", "1", "--episodes", "5"),
                "paper": _sweep("paper", "Tetris", *_PAIR, *_ZEROS),
            },
            {"tiny": "a few min with a ROM", "small": "~1 h", "paper": "a cluster's weeks"},
        ),
        Figure(
            6,
            "Atari Boxing, Krull, NameThisGame: mean episodic return vs model size, staggered vs sequential, the "
            "2xDeep curve, and β's noop and random returns as lines",
            "staggered beats sequential at every size past 1M, more so for 2xDeep; how much return survives delay "
            "depends on the game (Krull keeps human level, Boxing does not)",
            "returns",
            {
                "tiny": _sweep(
                    "tiny",
                    "delay-world",
                    "--sizes",
                    "1,29",
                    *_DEEP,
                    "--deep-sizes",
                    "0.75,18.5",
                    *_ZEROS,
                    "--seeds",
                    "1",
                    "--episodes",
                    "2",
                ),
                "small": _sweep(
                    "small",
                    "Boxing",
                    "--sizes",
                    "1,29",
                    *_DEEP,
                    "--deep-sizes",
                    "0.75,18.5",
                    *_ZEROS,
                    "--seeds",
                    "1",
                    "--episodes",
                    "1",
                ),
                "paper": _sweep("paper", _ATARI, *_DEEP, *_ZEROS),
            },
            {
                "tiny": "~1-2 min (the delay world stands in for Atari)",
                "small": "~1-2 h (Boxing, one episode, eps ~0.9)",
                "paper": "a cluster's weeks (~80 h per Boxing cell on a core)",
            },
        ),
        Figure(
            7,
            "N_I* vs mean inference time and vs model size, Algorithm 1 (max_time) vs 2 (exp_time), an eps-greedy "
            "policy at eps 0 and 0.5 (random actions are fast: variance)",
            "N_I* grows about linearly with tau_theta and |theta|; at eps 0 both algorithms match, at eps 0.5 "
            "Algorithm 2 needs fewer",
            "nstar",
            {
                "tiny": (*_NSTAR, "--quick", "--tau-theta", "5,5.5,8"),
                "small": (*_NSTAR, "--tau-theta", "5,5.5,8,70"),
                "paper": (*_NSTAR, "--tau-theta", "5,5.5,8,70,596"),
            },
            {"tiny": "~3 min (2 of them the wall clock's)", "small": "~20 min", "paper": "~1-2 h"},
            more={
                "tiny": _nstar_more(True, "6"),
                "small": _nstar_more(False, "6,10"),
                "paper": _nstar_more(False, "6,10"),
            },
        ),
        Figure(
            8,
            "N_L* vs learning time per transition and vs model size, three batch sizes, learners past the local "
            "cores on Ray actors",
            "N_L* grows about linearly with tau_L and |theta|; larger batches need fewer learners",
            "nlstar",
            {
                "tiny": (*_NLSTAR, "--k", "1,3", "--window", "2", "--max-learners", "4"),
                "small": (*_NLSTAR, "--k", "1,2,4", "--window", "5", "--max-learners", "6"),
                "paper": (*_NLSTAR, "--k", "1,7,29", "--window", "10", "--max-learners", "64"),
            },
            {"tiny": "~5-8 min", "small": "~30-60 min", "paper": "a Ray cluster (--ray-address)"},
        ),
        Figure(
            11,
            "Figure 4 at 1M (k = 1, 5 ticks): staggered vs sequential",
            "little difference: the game takes up to 17 frames to register an action",
            "over_time",
            _pokemon("1", _PAIR, "10"),
            _POKEMON_COSTS,
        ),
        Figure(
            12,
            "Figure 4 at 10M (k = 7, 8 ticks): staggered vs sequential",
            "little difference below the 17-frame response time",
            "over_time",
            _pokemon("7", _PAIR, "10"),
            _POKEMON_COSTS,
        ),
        Figure(
            13,
            "Figure 4 at 100M against non-noop actions taken instead of time",
            "per non-noop action, sequential and staggered progress alike (no significant difference)",
            "over_actions",
            _pokemon("29", _PAIR, "3"),
            _POKEMON_COSTS,
        ),
        Figure(
            14,
            "Figure 6 with Rainbow learning instead of DQN",
            "the same trend as DQN",
            "none",
            why_not="nonstop learns with DQN only: no distributional (C51), noisy-net, dueling or n-step learner, so "
            "Rainbow is not offered (and a DQN run under its name would be a different figure); "
            "`nonstop paper 6` is the DQN figure in the same setting",
        ),
    )
}


def figure(number: int) -> Figure:
    if number not in FIGURES:
        raise ValueError(
            f"FIG must be one of {', '.join(map(str, FIGURES))} (the paper's figures nonstop maps), got {number}"
        )
    return FIGURES[number]


def figure_listing() -> list[dict[str, Any]]:
    """Each figure: what it shows, what the paper found, its command and cost per budget."""
    return [
        {
            "figure": f.number,
            "shows": f.shows,
            "paper": f.paper,
            "offered": f.kind != "none",
            "commands": {b: "nonstop " + " ".join(f.command(b)) for b in BUDGET_NAMES if f.command(b)},
            "costs": f.costs,
            "why_not": f.why_not or None,
        }
        for f in FIGURES.values()
    ]


# ----------------------------------------------------------------------------- inputs


def _games_of(argv: Sequence[str]) -> list[str]:
    return argv[list(argv).index("--games") + 1].split(",") if "--games" in argv else []


def check_inputs(fig: Figure, budget: str, game_args: dict[str, list[str]], available: Any = None) -> None:
    """`NotOffered` for a figure nonstop does not make; `MissingInput` (one line naming each missing
    ROM, save state or emulator) when a Game Boy game cannot run here."""
    if fig.kind == "none":
        raise NotOffered(f"Figure {fig.number} is not offered: {fig.why_not}")
    available = available if available is not None else env_available
    missing: list[str] = []
    for game in _games_of(fig.command(budget)):
        if GAMES[game].needs_rom and not available(game, game_args.get(game, []))[0]:
            missing += [m for m in _missing(game, game_args.get(game, [])) if m not in missing]
    if missing:
        raise MissingInput(f"Figure {fig.number} needs " + "; ".join(missing) + f" (see {ROM_DOCS})")


def _missing(game: str, kvs: Sequence[str]) -> list[str]:
    """What ``game`` lacks here, each as the user would supply it."""
    from nonstop.envs.gameboy import GAMES as GB_GAMES
    from nonstop.envs.gameboy import RomError, find_rom, pyboy_problem

    spec = GB_GAMES[GAMES[game].env.removeprefix("GameBoy/")]
    given = dict(kv.partition("=")[::2] for kv in kvs)
    out = []
    try:
        find_rom(spec.name, given.get("rom"))
    except RomError as error:
        titles = " or ".join(repr(t) for t in spec.titles)
        found = f"; {str(error).partition(':')[0]}" if "rom" in given else ""
        out.append(
            f"your {spec.name.removesuffix('Battle').removesuffix('Catch')} ROM (a .gb whose header title is "
            f"{titles}{found}): set NONSTOP_ROMS=DIR or pass --game-arg GAME:rom=PATH"
        )
    if pyboy_problem():
        out.append(pyboy_problem())
    if spec.start == "state" and "state" not in given:
        where = "a battle" if game == "PokemonBattle" else "a wild encounter"
        out.append(
            f"a save state at the start of {where}: --game-arg {game}:state=PATH (`nonstop gameboy record-state`)"
        )
    return out or [f"{game} (it cannot run here)"]


# ----------------------------------------------------------------------------- running


def _run_json(argv: Sequence[str], log: Path) -> dict[str, Any]:
    """Run ``nonstop ARGV --json`` in a child (its progress on this stderr), return its last-line JSON."""
    # a child, not a library call: isolation is the point (a figure is the one command its document records, rerun
    # as it stands; what it starts — cells, Ray, torch threads, signal handlers — ends with it, and one that
    # fails leaves the other figures to run)
    command = [sys.executable, "-m", "nonstop.cli", *argv, "--json"]
    log.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, check=False)
    log.write_text("$ nonstop " + " ".join(argv) + "\n" + done.stdout)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        document = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        document = None
    if not isinstance(document, dict):
        raise RuntimeError(f"`nonstop {' '.join(argv)}` exited {done.returncode} without its JSON (log: {log})")
    document["_returncode"] = done.returncode
    return document


def run_figure(
    number: int,
    budget: str,
    out: Path,
    *,
    game_args: dict[str, list[str]] | None = None,
    extra: Sequence[str] = (),
    available: Any = None,
) -> dict[str, Any]:
    """Make figure ``number`` at ``budget`` into ``out``; returns its document (also ``out/figN.json``).
    ``extra``: more flags for the command it runs (e.g. ``--ray-address``)."""
    from nonstop.metrics.limits import machine_info

    fig = figure(number)
    game_args = game_args or {}
    check_inputs(fig, budget, game_args, available)
    out.mkdir(parents=True, exist_ok=True)
    argv = list(fig.command(budget)) + [
        a for g, kvs in game_args.items() for kv in kvs for a in ("--game-arg", f"{g}:{kv}")
    ]
    argv += list(extra)
    if argv[0] == "sweep":
        argv += ["--out", str(out / f"fig{number}-sweep")]
    else:
        argv += ["--plot", str(out / f"fig{number}-bench.png")]
    t0 = time.monotonic()
    source = _run_json(argv, out / "logs" / f"fig{number}.log")
    for row in source.get("rows", []):
        row.setdefault("part", "search")
        row.setdefault("clock", source.get("clock"))
    for i, (part, more) in enumerate(fig.more.get(budget, ())):
        more_argv = [*more, *extra, "--plot", ""]
        got = _run_json(more_argv, out / "logs" / f"fig{number}-{part}{i}.log")
        source["rows"] = source.get("rows", []) + [
            {**r, "part": part, "clock": got.get("clock")} for r in got.get("rows", [])
        ]
        argv += ["&&", "nonstop", *more_argv]
    derive = {
        "returns": _returns,
        "over_time": _over_time,
        "over_actions": _over_time,
        "nstar": nstar_figure,
        "nlstar": nlstar_figure,
    }
    rows, picture = derive[fig.kind](fig, budget, source, out)
    document = {
        "figure": number,
        "budget": budget,
        "shows": fig.shows,
        "paper": fig.paper,
        "command": "nonstop " + " ".join(argv),
        "returncode": source.pop("_returncode"),
        "wall_s": round(time.monotonic() - t0, 1),
        "rows": rows,
        "png": str(picture) if picture else None,
        "csv": str(out / f"fig{number}.csv"),
        "machine": machine_info(),
    }
    _write_csv(out / f"fig{number}.csv", rows)
    (out / f"fig{number}.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
    return document


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns or ["empty"])
        writer.writeheader()
        for row in rows:
            writer.writerow({c: "" if row.get(c) is None else row[c] for c in columns})


# ----------------------------------------------------------------------------- return vs model size (Figs 5, 6)

#: episodes and a tick cap per episode for β's lines, per budget
_BETA_EPISODES: Final = {"tiny": (2, 1_200), "small": (5, 20_000), "paper": (30, 200_000)}


def beta_returns(
    game: str, *, episodes: int, max_ticks: int, seed: int = 0, env_args: Sequence[str] = ()
) -> dict[str, float]:
    """The mean episodic return of β alone in ``game``'s world: ``noop`` (the env's noop at every
    tick: the default behaviour's return, the paper's β) and ``random`` (a uniformly random agent
    action at every tick). Episodes past ``max_ticks`` are cut there (their return so far counts).

    >>> r = beta_returns("delay-world", episodes=1, max_ticks=1200)
    >>> sorted(r), 0 <= r["noop"] <= 1200
    (['noop', 'random'], True)
    """
    from nonstop.envs.registry import env_info, make_env, parse_env_args

    spec = GAMES[game]
    args = list(spec.train_args) + list(env_args)
    kwargs = parse_env_args([args[i + 1] for i, a in enumerate(args) if a == "--env-arg"])
    noop = env_info(spec.env, **kwargs).noop_action
    out: dict[str, float] = {}
    for name in ("noop", "random"):
        env = make_env(spec.env, **kwargs)
        env.action_space.seed(seed)
        totals = []
        try:
            for episode in range(episodes):
                env.reset(seed=seed + episode)
                total, ticks, over = 0.0, 0, False
                while not over and ticks < max_ticks:
                    action = noop if name == "noop" else env.action_space.sample()
                    _, reward, terminated, truncated, _ = env.step(action)
                    total, ticks, over = total + float(reward), ticks + 1, bool(terminated or truncated)
                totals.append(total)
        finally:
            env.close()
        out[name] = float(np.mean(totals))
    return out


#: The human scores Figure 6 draws, as the paper takes them from Mnih et al. (2015, "Human-level control
#: through deep reinforcement learning", Nature 518), its table of Atari results: a professional tester's
#: mean episodic return. Only games nonstop's sweep runs are listed.
HUMAN_SCORES: Final[dict[str, float]] = {"Boxing": 4.3, "Krull": 2395.0, "NameThisGame": 8049.0}


def _returns(fig: Figure, budget: str, source: dict[str, Any], out: Path) -> tuple[list[dict[str, Any]], Path | None]:
    results = source.get("results") or []
    episodes, max_ticks = _BETA_EPISODES[budget]
    lines = {
        game: beta_returns(game, episodes=episodes, max_ticks=max_ticks)
        for game in sorted({r["game"] for r in results})
    }
    rows = [
        {
            k: r.get(k)
            for k in (
                "game",
                "arch",
                "params",
                "k",
                "delay",
                "interaction",
                "mean_return",
                "ci95",
                "seeds",
                "inaction_fraction",
                "delay_mean_ticks",
            )
        }
        for r in results
    ]
    rows += [
        {"game": game, "interaction": f"beta_{name}", "mean_return": value, "seeds": episodes}
        for game, by in lines.items()
        for name, value in by.items()
    ]
    for game, by in lines.items():
        if game in HUMAN_SCORES:
            by["human"] = HUMAN_SCORES[game]
            rows.append({"game": game, "interaction": "human (Mnih et al. 2015)", "mean_return": HUMAN_SCORES[game]})
    picture = (
        plot(
            results,
            out / f"fig{fig.number}.png",
            lines=lines,
            title=f"Figure {fig.number} (--budget {budget}): return vs model size",
        )
        if results
        else None
    )
    return rows, picture


# ----------------------------------------------------------------------------- over time (Figs 4, 11-13)


def encounter_series(
    game: str,
    tick: np.ndarray,
    episode: np.ndarray,
    reward: np.ndarray,
    source: np.ndarray,
    action: np.ndarray,
    *,
    noop: int = 0,
) -> list[dict[str, Any]]:
    """Per finished encounter (episode) of a Pokémon cell: the tick it ended, whether it was won
    (``PokemonBattle``: the last faint of the battle was the opponent's, reward +1) or caught
    (``PokemonCatch``: a +1), and the non-noop agent actions taken so far (Figure 13's axis).

    >>> s = encounter_series("PokemonCatch", np.arange(1, 7), np.array([0, 0, 0, 1, 1, 2]),
    ...                      np.array([0, 0, 1., 0, -1, 0]), np.array([0, 1, 1, 1, 0, 1]), np.array([0, 2, 3, 0, 0, 1]))
    >>> [(e["end_tick"], e["success"], e["non_noop_actions"]) for e in s]
    [(3, True, 2), (5, False, 2)]
    """
    acted = np.cumsum((source == 1) & (action != noop))
    out = []
    episodes = np.unique(episode)
    for e in episodes[:-1]:  # the last episode is still running when the log ends
        idx = np.flatnonzero(episode == e)
        rewards = reward[idx][reward[idx] != 0]
        if game == "PokemonBattle":
            success = bool(len(rewards) and rewards[-1] > 0)
        else:
            success = bool((rewards > 0).any())
        out.append({"end_tick": int(tick[idx[-1]]), "success": success, "non_noop_actions": int(acted[idx[-1]])})
    return out


def _cell_series(cell_dir: Path, game: str) -> list[dict[str, Any]]:
    from nonstop.learning.runlog import read_ticklog

    log = read_ticklog(cell_dir)
    return encounter_series(
        game,
        np.asarray(log["tick"]),
        np.asarray(log["episode"]),
        np.asarray(log["reward"]),
        np.asarray(log["source"]),
        np.asarray(log["action"]).astype(int),
    )


def _over_time(fig: Figure, budget: str, source: dict[str, Any], out: Path) -> tuple[list[dict[str, Any]], Path | None]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axis = "non_noop_actions" if fig.kind == "over_actions" else "end_tick"
    cells_dir = out / f"fig{fig.number}-sweep" / "cells"
    rows: list[dict[str, Any]] = []
    games = [g for g in ("PokemonBattle", "PokemonCatch") if any(cells_dir.glob(f"{g}-*"))]
    fig_, axes = plt.subplots(1, max(1, len(games)), figsize=(5 * max(1, len(games)), 3.8), squeeze=False)
    for ax, game in zip(axes[0], games):
        for interaction in INTERACTIONS:
            seeds = [_cell_series(d, game) for d in sorted(cells_dir.glob(f"{game}-k*-{interaction}-s*"))]
            seeds = [s for s in seeds if s]
            if not seeds:
                continue
            end = min(s[-1][axis] for s in seeds)
            grid = np.linspace(0, end, 50)
            counts = np.array([[sum(e["success"] for e in s if e[axis] <= x) for x in grid] for s in seeds], float)
            mean = counts.mean(0)
            ci = (
                t_quantile_95(len(seeds) - 1) * counts.std(0, ddof=1) / math.sqrt(len(seeds))
                if len(seeds) > 1
                else 0 * mean
            )
            xs = grid / 59.7275 / 3600 if axis == "end_tick" else grid
            (line,) = ax.plot(xs, mean, label=interaction.replace("_", "-"))
            ax.fill_between(xs, mean - ci, mean + ci, color=line.get_color(), alpha=0.2, linewidth=0)
            rows.append(
                {
                    "game": game,
                    "interaction": interaction,
                    "seeds": len(seeds),
                    "x": axis,
                    "x_end": float(end),
                    "successes_at_end": float(mean[-1]),
                    "ci95": float(ci[-1]),
                    "encounters": float(np.mean([len(s) for s in seeds])),
                }
            )
        ax.set_xlabel("game hours" if axis == "end_tick" else "non-noop actions taken")
        ax.set_ylabel("battles won" if game == "PokemonBattle" else "wild Pokémon caught")
        ax.set_title(game)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig_.suptitle(f"Figure {fig.number} (nonstop paper --budget {budget})", fontsize=10)
    fig_.tight_layout()
    path = out / f"fig{fig.number}.png"
    fig_.savefig(path, dpi=110)
    plt.close(fig_)
    return rows, path
