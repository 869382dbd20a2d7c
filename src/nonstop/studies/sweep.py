"""The paper's learning experiments (Figures 4–6, 11–14) as cells of training runs (what ``nonstop sweep`` runs).

The design, as the paper states it (§5 and Appendix A, "Training Procedure for Atari"): to isolate
what realtime costs, every cell learns **the same k = 1 IMPALA ResNet** and only the *declared*
inference time changes with the model size it stands for — the forward times the authors measured
for k = 1, 7, 29, 98 (about 1M, 10M, 100M, 1B parameters): 5, 8, 70 and 599 ticks at 60 Hz (596 on
the Game Boy's 59.73 Hz). A `LatencyPolicy` makes each action arrive exactly that late, so a small
network on a laptop acts like the large one would in the world, on the virtual clock.

Per (game, size, seed) two ways to act are compared:

* ``staggered`` — Algorithm 1 (``max_time``) with N_I* = ⌈τ_θ/τ_M⌉ workers: an action at every
  tick, each τ_θ old;
* ``sequential`` — one inference process (the paper's "single inference process" baseline): an
  action every τ_θ ticks, β (the env's noop) on the ticks between;

and, on request (``--interactions``), the two sequential learning loops of Figure 4
(``infer_then_learn``, ``learn_then_infer``) and its parallel-learning baseline
(``parallel_learning``: staggered acting, a 33× larger batch and 33× fewer updates). Learning is
asynchronous in every cell at the paper's cadence, counted per transition on the virtual clock
(Atari: one update per 4 transitions, ``--atari-learn-every``; Tetris one per transition; Pokémon
every 5 ticks). ``--arch 2xdeep`` adds Figure 6's 2xDeep cells: the authors' 30-layer network at the
appendix's widths, its declared delay its own (`declared_delays`). The figure of merit is the
paper's: the mean episodic return over the training episodes, averaged over seeds with a 95 %
Student-t confidence interval, plotted against model size (``sweep.png``) and tabled
(``results.csv``, ``cells.csv``, ``sweep.json``).

Budgets make a small run and a faithful one the same command (``--budget``; any of its settings
can be overridden):

========  ==================================================================  =====================
budget    what                                                                cost on 2 cores
========  ==================================================================  =====================
tiny      the delay world, k = 1 and 29, 1 seed, 2 episodes (a smoke test)     ~1 min
small     the delay world (3 seeds, 6 episodes) and Boxing (1 seed, 1         ~30-45 min
          episode: ε is still ~0.9, so it measures acting, not learning)
medium    the delay world (5 seeds, 40 episodes), Boxing, Krull,               ~days
          NameThisGame (3 seeds, 20 episodes)
paper     Boxing, Krull, NameThisGame, Tetris and Pokémon where their ROMs     far beyond 2 cores:
          are found; 3 seeds (0, 1, 2), 2,000 episodes (the paper's)           for a cluster
learned   with ``--schedulers``: the learned-policy table, the delay world    ~1 h
          (5 seeds, 5 episodes) and Boxing (5 seeds, 1 episode, a k = 0.25
          network), τ_θ of k = 1's mean (5 ticks)
========  ==================================================================  =====================

``--schedulers fill,exp_time,quantile_hold@0.9 --workers bound,2x --latency-sigma 0.5`` turns each
staggered cell into one per scheduler and per N_I (`Cell.scheduler`, `Cell.workers`) with τ_θ lognormal
of the declared mean, as remote workers see it: which scheduler a learning agent should act with, each
(scheduler, N_I) its own row of return with its 95 % interval over seeds.

The *delay world* is ``theory/delay-cycle`` (8 states; reward 1 when the action names the current
state, which stays put w.p. 0.97 per tick; 1,200-tick episodes, longer than the 1B model's 599-tick delay): the world of the paper's Theorem 1
for delay, small enough that DQN learns it within a minute, so a small budget shows the paper's
shape — staggered return falls only as the delay outgrows the world's predictability (Eq. 4),
sequential return falls with every tick of inaction (Eq. 3).

Every cell is an ordinary run directory (``OUT/cells/<cell>``) that ``nonstop report`` reads. The
sweep is resumable: a finished cell is kept, a cell with a checkpoint resumes (``--resume``), one
without starts over; running the same command again completes what is missing, and a larger
``--episodes`` extends finished cells. Cells run in parallel, one process each (``--jobs``,
default: the cores this process may use); Ctrl-C or SIGTERM stops them with their final
checkpoints and leaves nothing running.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nonstop.studies.delays import DEEP_SIZES, PAPER_SIZES, declared_delays, deep_paper_ticks, delay_ticks, fmt_k
from nonstop.metrics.tquantile import t_quantile_95

__all__ = [
    "ARCHS",
    "BUDGETS",
    "BUDGET_HELP",
    "Budget",
    "Cell",
    "DEEP_SIZES",
    "GAMES",
    "Game",
    "INTERACTIONS",
    "PAPER_SIZES",
    "aggregate",
    "cell_result",
    "declared_delays",
    "deep_paper_ticks",
    "env_available",
    "SweepPlan",
    "plan_cells",
    "plot",
    "t_quantile_95",
    "write_tables",
]

_PARAMS: Final = {"70k": 7e4, "1M": 1e6, "10M": 1e7, "100M": 1e8, "1B": 1e9}

#: the network whose delay a cell declares: the 15-layer IMPALA ResNet, or the authors' 30-layer 2xDeep
ARCHS: Final = ("impala", "2xdeep")

INTERACTIONS: Final = ("staggered", "sequential", "infer_then_learn", "learn_then_infer", "parallel_learning")

#: Figure 4's parallel-learning baseline: "an effective batch size that is 33x larger, incurring 33x fewer updates"
PARALLEL_LEARNING_FACTOR: Final = 33


@dataclass(frozen=True)
class Game:
    """One world of the sweep and how the paper trains in it."""

    env: str
    #: `nonstop train` flags that set the paper's learning settings for this world
    train_args: tuple[str, ...]
    #: world seconds one episode can last at most (the cap that stops a cell that never ends an episode)
    max_episode_s: float
    game_boy: bool = False
    #: the env must be found (a ROM): left out of a budget, with a note, when it is not
    needs_rom: bool = False
    #: what a small budget changes (replay capacity: no cell of it stores more transitions than this)
    small_args: tuple[str, ...] = ()
    #: the paper's learning cadence: an update per this many transitions (counted on either clock); None: the preset's
    learn_every: int | None = None
    #: the batch size the preset sets (Figure 4's parallel-learning baseline multiplies it)
    batch_size: int = 16
    #: seconds of one update for the parallel-learning baseline's cadence (None: one tick)
    tau_l: float | None = None


_ATARI_ARGS: Final = (
    "--preset",
    "paper-atari",
)  # the cadence: `Cell.learn_every` ("we now learn every 4 environment steps")


GAMES: Final[dict[str, Game]] = {
    "delay-world": Game(
        "theory/delay-cycle",
        (
            "--env-arg",
            "p_minimax=0.97",
            "--env-arg",
            "max_steps=1200",
            "--lr",
            "1e-3",
            "--batch-size",
            "32",
            "--epsilon-ticks",
            "1500",
            "--epsilon-end",
            "0.02",
            "--learning-starts",
            "200",
            "--target-update",
            "200",
            "--replay-capacity",
            "20000",
        ),
        max_episode_s=20.0,
        batch_size=32,
    ),
    "Boxing": Game(
        "Boxing", _ATARI_ARGS, max_episode_s=1800.0, small_args=("--replay-capacity", "50000"), learn_every=4
    ),
    "Krull": Game("Krull", _ATARI_ARGS, max_episode_s=1800.0, small_args=("--replay-capacity", "50000"), learn_every=4),
    "NameThisGame": Game(
        "NameThisGame", _ATARI_ARGS, max_episode_s=1800.0, small_args=("--replay-capacity", "50000"), learn_every=4
    ),
    # Figure 5: a fixed ε of 0.05 and "one update on the replay buffer for each action taken"
    "Tetris": Game(
        "GameBoy/Tetris",
        ("--preset", "paper-tetris", "--epsilon-start", "0.05", "--epsilon-end", "0.05"),
        max_episode_s=3600.0,
        game_boy=True,
        needs_rom=True,
        learn_every=1,
    ),
    # Figure 4: "enough learning threads to learn every 5 environment steps"
    "PokemonBattle": Game(
        "GameBoy/PokemonBattle",
        ("--preset", "paper-pokemon", "--tau-l", f"{5 / 59.7275:.6f}"),
        max_episode_s=3600.0,
        game_boy=True,
        needs_rom=True,
        tau_l=5 / 59.7275,
    ),
    "PokemonCatch": Game(
        "GameBoy/PokemonCatch",
        ("--preset", "paper-pokemon", "--tau-l", f"{5 / 59.7275:.6f}"),
        max_episode_s=3600.0,
        game_boy=True,
        needs_rom=True,
        tau_l=5 / 59.7275,
    ),
}


@dataclass(frozen=True)
class Budget:
    """What a budget runs: per game, (episodes per cell, seeds)."""

    games: dict[str, tuple[int, int]]
    sizes: tuple[float, ...] = (1, 7, 29, 98)
    note: str = ""
    #: the Atari replay at 50k transitions, more than any cell of the budget stores (so a cell's checkpoint can hold it)
    small_replay: bool = False
    #: per game, more `nonstop train` flags this budget's cells take (after the game's own)
    train_args: dict[str, tuple[str, ...]] = field(default_factory=dict)


BUDGETS: Final[dict[str, Budget]] = {
    "tiny": Budget(
        {"delay-world": (2, 1)}, sizes=(1, 29), note="a smoke test of the whole pipeline", small_replay=True
    ),
    "small": Budget(
        {"delay-world": (6, 3), "Boxing": (1, 1)},
        note="Boxing: one episode while ε is still ~0.9, so its cells measure acting (inaction, delay), not learning",
        small_replay=True,
    ),
    "medium": Budget({"delay-world": (40, 5), "Boxing": (20, 3), "Krull": (20, 3), "NameThisGame": (20, 3)}),
    "paper": Budget(
        {
            "Boxing": (2000, 3),
            "Krull": (2000, 3),
            "NameThisGame": (2000, 3),
            "Tetris": (2000, 3),
            "PokemonBattle": (2000, 3),
            "PokemonCatch": (2000, 3),
        },
        note="the paper's 2,000 episodes per cell; Game Boy games where their ROMs are found",
    ),
    # the learned-policy table (`--schedulers`): DQN learning as it acts, per scheduler and N_I, 5 seeds
    "learned": Budget(
        {"delay-world": (5, 5), "Boxing": (1, 5)},
        sizes=(1,),
        note="Boxing learns a small network (ImpalaCNN at k = 0.25) at lr 1e-4 with ε annealed over the first "
        "half of its one episode: one episode of DQN, far from the paper's 2,000",
        small_replay=True,
        train_args={
            "Boxing": (
                *("--k", "0.25", "--lr", "1e-4", "--epsilon-ticks", "3500", "--epsilon-end", "0.05"),
                *("--learning-starts", "1000", "--target-update", "500", "--replay-capacity", "20000"),
            )
        },
    ),
}

#: the schedulers a ``--schedulers`` cell may act with (``quantile_hold@Q``: at hold quantile Q)
CELL_SCHEDULERS: Final = ("max_time", "exp_time", "quantile_hold", "fill", "auto")


@dataclass(frozen=True)
class Cell:
    """One training run of the sweep."""

    game: str
    k: float
    delay: str  # a latency spec, e.g. "70t"
    interaction: str
    seed: int
    episodes: int
    extra: tuple[str, ...] = field(default=(), compare=False)
    arch: str = "impala"
    #: an update per this many transitions (None: the game's own cadence, `Game.learn_every`)
    learn_every: int | None = field(default=None, compare=False)
    #: how an episode's first τ_θ ticks are acted on: ``beta`` (nonstop's realtime cell: β's, the actions in
    #: flight dropped as stale) or ``zeros`` (the authors' simulation, `nonstop.studies.delaysim`: the
    #: policy on zero frames; staggered cells only, the others have no such start)
    delay_start: str = "beta"
    #: a staggered cell's scheduler (``--schedulers``; ``quantile_hold@0.9``), empty: the interaction's own
    scheduler: str = ""
    #: N_I of a ``scheduler`` cell (None: ⌈τ̄_θ/τ_M⌉)
    workers: int | None = None
    #: τ_θ lognormal with the declared mean and this σ (0: constant, the paper's cells)
    sigma: float = 0.0

    @property
    def name(self) -> str:
        arch = "" if self.arch == "impala" else f"-{self.arch}"
        zeros = "-zeros" if self.delay_start == "zeros" else ""
        how = f"{self.scheduler}-n{self.workers}" if self.scheduler else self.interaction
        sd = f"-sd{self.sigma:g}" if self.sigma else ""
        return f"{self.game}{arch}-k{fmt_k(self.k)}-{self.delay}{sd}-{how}{zeros}-s{self.seed}"

    def latency(self) -> str:
        """The cell's ``--latency``: its declared delay, or a lognormal τ_θ of that mean and ``sigma``.

        >>> Cell("delay-world", 1, "5t", "staggered", 0, 1, sigma=0.5).latency()
        'lognormal:4.4125t,0.5'
        """
        if not self.sigma:
            return self.delay
        mean = delay_ticks(self.delay, game_boy=GAMES[self.game].game_boy)
        return f"lognormal:{mean / math.exp(self.sigma**2 / 2):.5g}t,{self.sigma:g}"  # median = mean·e^(−σ²/2)

    def argv(self, out: Path) -> list[str]:
        """The command that runs this cell into ``out``: ``nonstop train``, or the authors' delay
        simulation (``python -m nonstop.studies.delaysim``) for a ``zeros`` cell."""
        if self.delay_start != "zeros":
            return [sys.executable, "-m", "nonstop.cli", *self.train_argv(out)]
        game = GAMES[self.game]
        every = self.learn_every if self.learn_every is not None else game.learn_every
        return [
            sys.executable,
            "-m",
            "nonstop.studies.delaysim",
            "--env",
            game.env,
            *game.train_args,
            *self.extra,
            "--delay",
            str(delay_ticks(self.delay, game_boy=game.game_boy)),
            "--seed",
            str(self.seed),
            "--episodes",
            str(self.episodes),
            *(["--learn-every", str(every)] if every else []),
            "--out",
            str(out),
        ]

    def train_argv(self, out: Path) -> list[str]:
        game = GAMES[self.game]
        how: list[str]
        if self.scheduler:
            name, _, quantile = self.scheduler.partition("@")
            how = ["--scheduler", name, *(["--scheduler-arg", f"quantile={quantile}"] if quantile else [])]
            how += ["--n-inference", str(self.workers)] if self.workers else []
        elif self.interaction in ("staggered", "parallel_learning"):
            how = ["--scheduler", "max_time"]  # Algorithm 1 at N_I* = ⌈τ_θ/τ_M⌉ (nonstop train's default N_I)
        elif self.interaction == "sequential":
            how = ["--scheduler", "sequential"]  # one inference process; β on the ticks between its actions
        else:
            how = ["--interaction", self.interaction]
        learn_every = self.learn_every if self.learn_every is not None else game.learn_every
        if learn_every is not None:  # the cadence per transition (the virtual learners honour the cap too)
            how += ["--updates-per-transition", f"{1 / learn_every:.6g}"]
        if self.interaction == "parallel_learning":  # 33x the batch, 33x fewer updates
            f = PARALLEL_LEARNING_FACTOR
            how += ["--batch-size", str(f * game.batch_size), "--tau-l", f"{f * (game.tau_l or 1 / 60):.6f}"]
            if learn_every is not None:
                how += ["--updates-per-transition", f"{1 / (f * learn_every):.6g}"]
        seconds = 1.5 * self.episodes * game.max_episode_s + 60  # a cap only: --episodes ends the cell
        return [
            "train",
            "--env",
            game.env,
            *game.train_args,
            *self.extra,
            "--latency",
            self.latency(),
            *how,
            "--seed",
            str(self.seed),
            "--episodes",
            str(self.episodes),
            "--seconds",
            f"{seconds:g}",
            "--progress-every",
            f"{min(10.0, game.max_episode_s):g}",
            "--checkpoint-every",
            "300",
            "--out",
            str(out),
        ]


#: how the sweep's cells start each episode (``--delay-start``)
DELAY_STARTS: Final = ("beta", "zeros")


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep runs beyond its budget (each field a ``nonstop sweep`` flag; None: the budget's),
    checked at the door with the flag's name in the error.

    ``delay_start``: how staggered cells start each episode (`Cell.delay_start`). ``archs`` adds 2xDeep
    cells at ``deep_sizes`` (default: the appendix's 1M-1B widths); ``gb_actions`` 6 gives the Game Boy
    agent the paper's six buttons (noop is β's), 7 adds noop; ``atari_learn_every`` overrides the Atari
    games' update per 4 transitions. ``schedulers`` (e.g. ``fill``, ``quantile_hold@0.9``) make each
    staggered cell one per scheduler and per N_I in ``workers`` (``bound``: ⌈τ̄_θ/τ_M⌉, ``2x``: twice
    it, or a number); ``sigma`` > 0 makes τ_θ lognormal (`Cell.latency`).

    >>> SweepPlan(gb_actions=5)
    Traceback (most recent call last):
    ...
    ValueError: --gb-actions takes 6 (the paper's buttons; noop is β's) or 7 (noop too), got 5
    """

    games: Sequence[str] | None = None
    sizes: Sequence[float] | None = None
    seeds: int | None = None
    episodes: int | None = None
    interactions: Sequence[str] = ("staggered", "sequential")
    latency_source: str = "paper"
    latency_overrides: dict[float, str] = field(default_factory=dict)
    game_args: dict[str, list[str]] = field(default_factory=dict)
    small_replay: bool = False
    archs: Sequence[str] = ("impala",)
    deep_sizes: Sequence[float] | None = None
    gb_actions: int = 6
    atari_learn_every: int | None = None
    delay_start: str = "beta"
    schedulers: Sequence[str] = ()
    workers: Sequence[str] = ("bound",)
    sigma: float = 0.0

    def __post_init__(self) -> None:
        for g in self.games or ():
            if g not in GAMES:
                raise ValueError(f"unknown game {g!r} for --games: choose from {', '.join(GAMES)}")
        for i in self.interactions:
            if i not in INTERACTIONS:
                raise ValueError(f"unknown interaction {i!r} for --interactions: choose from {', '.join(INTERACTIONS)}")
        for a in self.archs:
            if a not in ARCHS:
                raise ValueError(f"unknown network {a!r} for --arch: choose from {', '.join(ARCHS)}")
        if self.delay_start not in DELAY_STARTS:
            raise ValueError(f"--delay-start must be one of {', '.join(DELAY_STARTS)}, got {self.delay_start!r}")
        if self.gb_actions not in (6, 7):
            raise ValueError(
                f"--gb-actions takes 6 (the paper's buttons; noop is β's) or 7 (noop too), got {self.gb_actions!r}"
            )
        every = self.atari_learn_every
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"--atari-learn-every must be an integer >= 1 (transitions per update), got {every!r}")
        if self.seeds is not None and self.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {self.seeds}")
        if self.episodes is not None and self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {self.episodes}")
        for name in self.schedulers:
            base, at, q = name.partition("@")
            if base not in CELL_SCHEDULERS or (at and (base != "quantile_hold" or not _is_fraction(q))):
                raise ValueError(
                    f"--schedulers takes {', '.join(CELL_SCHEDULERS)} (quantile_hold@Q with 0 < Q < 1), got {name!r}"
                )
        for w in self.workers:
            _workers_multiple(w)
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ValueError(f"--latency-sigma must be a finite number >= 0, got {self.sigma!r}")
        for g in self.game_args:
            if g not in GAMES:
                raise ValueError(f"unknown game {g!r} in --game-arg: choose from {', '.join(GAMES)}")


def plan_cells(budget: Budget, plan: SweepPlan, available: Any = None) -> tuple[list[Cell], list[str]]:
    """The cells a sweep runs and notes on what it left out (a Game Boy game without its ROM).
    ``available(game, game_args)`` says whether a ROM-backed game can run (default `env_available`).

    >>> cells, notes = plan_cells(BUDGETS["tiny"], SweepPlan())
    >>> [c.name for c in cells]  # doctest: +NORMALIZE_WHITESPACE
    ['delay-world-k1-5t-staggered-s0', 'delay-world-k1-5t-sequential-s0',
     'delay-world-k29-70t-staggered-s0', 'delay-world-k29-70t-sequential-s0']
    """
    available = available if available is not None else env_available
    notes: list[str] = []
    cells: list[Cell] = []
    for g in list(plan.games) if plan.games else list(budget.games):
        if GAMES[g].needs_rom:
            ok, why = available(g, plan.game_args.get(g, []))
            if not ok:
                if plan.games:  # asked for by name: say so plainly
                    raise FileNotFoundError(f"--games {g}: {why}")
                notes.append(f"{g} left out: {why}")
                continue
        cells += _game_cells(budget, plan, g)
    return cells, notes


def _game_cells(budget: Budget, plan: SweepPlan, g: str) -> list[Cell]:
    """One game's cells: per network, declared delay, seed and interaction (and scheduler × N_I)."""
    game = GAMES[g]
    # a game the budget does not name (asked for with --games) gets the budget's first game's length
    default_episodes, default_seeds = budget.games.get(g, next(iter(budget.games.values())))
    n_episodes = plan.episodes or default_episodes
    extra = _game_train_args(budget, plan, g)
    learn_every = plan.atari_learn_every if game.learn_every == 4 else None
    cells: list[Cell] = []
    for arch in plan.archs:
        for k, delay in _arch_delays(budget, plan, game, arch).items():
            for seed in range(plan.seeds or default_seeds):
                for interaction in plan.interactions:
                    start = plan.delay_start if interaction == "staggered" else "beta"
                    cell = Cell(g, k, delay, interaction, seed, n_episodes, extra, arch, learn_every, start)
                    cells += _scheduled(cell, plan, game)
    return cells


def _game_train_args(budget: Budget, plan: SweepPlan, g: str) -> tuple[str, ...]:
    """The `nonstop train` flags every cell of game ``g`` adds: replay size, the budget's, ``--game-arg``'s."""
    game, game_args = GAMES[g], plan.game_args.get(g, [])
    extra = (
        (game.small_args if plan.small_replay else ())
        + budget.train_args.get(g, ())
        + tuple(a for kv in game_args for a in ("--env-arg", kv))
    )
    if game.game_boy and plan.gb_actions == 6 and not any(kv.startswith("action_set=") for kv in game_args):
        extra += ("--env-arg", "action_set=paper")  # Appendix A: "six discrete actions"
    return extra


def _arch_delays(budget: Budget, plan: SweepPlan, game: Game, arch: str) -> dict[float, str]:
    """Each width k of network ``arch`` and the inference time it declares."""
    if arch == "impala":
        sizes = plan.sizes or budget.sizes
    else:
        sizes = plan.deep_sizes or [k for k, v in DEEP_SIZES.items() if v != "70k"]
    overrides = plan.latency_overrides if arch == "impala" else {}
    return declared_delays(sizes, plan.latency_source, game_boy=game.game_boy, overrides=overrides, arch=arch)


def _scheduled(cell: Cell, plan: SweepPlan, game: Game) -> list[Cell]:
    """``cell`` as it runs: one per scheduler and N_I when it is staggered and schedulers are asked for."""
    if cell.interaction != "staggered" or not plan.schedulers:
        return [dataclasses.replace(cell, sigma=plan.sigma)]
    bound = math.ceil(delay_ticks(cell.delay, game_boy=game.game_boy) - 1e-9)
    multiples = [_workers_multiple(token) for token in plan.workers]
    return [
        dataclasses.replace(cell, scheduler=s, workers=w(bound), sigma=plan.sigma)
        for w in multiples
        for s in plan.schedulers
    ]


def _is_fraction(text: str) -> bool:
    try:
        return 0 < float(text) < 1
    except ValueError:
        return False


def _workers_multiple(token: str) -> Any:
    """``bound`` → N_I = the bound, ``2x`` → twice it, ``7`` → 7 (a function of the bound).

    >>> [_workers_multiple(t)(5) for t in ("bound", "2x", "1.5x", "7")]
    [5, 10, 8, 7]
    """
    try:
        if token == "bound":
            return lambda bound: bound
        if token.endswith("x") and float(token[:-1]) > 0:
            return lambda bound: max(1, math.ceil(float(token[:-1]) * bound - 1e-9))
        if int(token) >= 1:
            return lambda bound: int(token)
    except ValueError:
        pass
    raise ValueError(f"--workers takes bound, a multiple of it (2x) or a number of workers, got {token!r}")


def env_available(game: str, game_args: Sequence[str]) -> tuple[bool, str]:
    """Whether a ROM-backed game can run here: its ROM found (and, for Pokémon, a start state given)."""
    from nonstop.envs.gameboy import RomError, find_rom, pyboy_problem

    env_id = GAMES[game].env
    rom = next((a.partition("=")[2] for a in game_args if a.startswith("rom=")), None)
    try:
        find_rom(env_id.removeprefix("GameBoy/"), rom)
    except RomError as error:
        return False, f"{error} (in a sweep: --game-arg {game}:rom=PATH, or NONSTOP_ROMS=DIR)"
    if pyboy_problem():
        return False, pyboy_problem()
    if game.startswith("Pokemon") and not any(a.startswith("state=") for a in game_args):
        return False, (
            f"{env_id} starts from a save state of yours: pass --game-arg {game}:state=PATH "
            "(see `nonstop gameboy record-state`)"
        )
    return True, ""


def cell_result(cell: Cell, run_dir: Path) -> dict[str, Any] | None:
    """One finished (or partly run) cell's figures: the mean return over its first ``episodes``
    episodes (the paper's "average episodic return over the training period"), inaction and delay."""
    episodes_csv = run_dir / "episodes.csv"
    if not episodes_csv.exists():
        return None
    with episodes_csv.open(newline="") as f:
        returns = [float(row["return"]) for row in csv.DictReader(f) if row.get("return") not in (None, "")]
    returns = returns[: cell.episodes]
    summary: dict[str, Any] = {}
    if (run_dir / "summary.json").exists():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except json.JSONDecodeError:
            summary = {}
    return {
        "cell": cell.name,
        "game": cell.game,
        "arch": cell.arch,
        "k": cell.k,
        "params": _params(cell.k, cell.arch),
        "delay": cell.delay,
        "interaction": cell.interaction,
        "scheduler": cell.scheduler or None,
        "workers": cell.workers,
        "sigma": cell.sigma,
        "seed": cell.seed,
        "episodes": len(returns),
        "episodes_target": cell.episodes,
        "mean_return": sum(returns) / len(returns) if returns else None,
        "inaction_fraction": summary.get("inaction_fraction"),
        "delay_mean_ticks": summary.get("delay_mean_ticks"),
        "n_inference": summary.get("n_inference"),
        "updates": summary.get("updates"),
        "wall_s": summary.get("wall_s"),
        "complete": bool(summary.get("complete")) and len(returns) >= cell.episodes,
    }


def _params(k: float, arch: str = "impala") -> str:
    if arch == "2xdeep":
        return DEEP_SIZES.get(k, f"k={fmt_k(k)}")
    return PAPER_SIZES[k][0] if k in PAPER_SIZES else f"k={fmt_k(k)}"


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (game, k, interaction): mean of the seeds' mean returns, its 95 % t interval, and the
    seeds' mean inaction and delay. Cells that finished no episode are left out of the mean.

    >>> rows = [{"game": "g", "k": 1, "params": "1M", "delay": "5t", "interaction": "staggered", "mean_return": r,
    ...          "inaction_fraction": 0.0, "delay_mean_ticks": 5.0, "complete": True} for r in (1.0, 3.0)]
    >>> agg = aggregate(rows)[0]
    >>> agg["mean_return"], round(agg["ci95"], 3), agg["seeds"]
    (2.0, 12.706, 2)
    """
    groups: dict[tuple[str, str, float, str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["game"], row.get("arch", "impala"), row["k"], row["interaction"])
        groups.setdefault((*key, row.get("scheduler") or "", row.get("workers") or 0), []).append(row)
    out = []
    for (game, arch, k, interaction, scheduler, workers), members in sorted(
        groups.items(),
        key=lambda kv: (kv[0][0], ARCHS.index(kv[0][1]), kv[0][2], INTERACTIONS.index(kv[0][3]), kv[0][5], kv[0][4]),
    ):
        done = [m for m in members if m.get("mean_return") is not None]
        values = [float(m["mean_return"]) for m in done]
        n = len(values)
        mean = sum(values) / n if n else None
        ci = None
        if n >= 2 and mean is not None:
            sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
            ci = t_quantile_95(n - 1) * sd / math.sqrt(n)

        def avg(key: str, done: list[dict[str, Any]] = done) -> float | None:
            xs = [float(m[key]) for m in done if m.get(key) is not None]
            return sum(xs) / len(xs) if xs else None

        out.append(
            {
                "game": game,
                "arch": arch,
                "k": k,
                "params": members[0]["params"],
                "delay": members[0]["delay"],
                "interaction": interaction,
                "scheduler": scheduler or None,
                "workers": workers or None,
                "sigma": members[0].get("sigma") or 0.0,
                "mean_return": mean,
                "ci95": ci,
                "seeds": n,
                "cells": len(members),
                "complete": sum(bool(m.get("complete")) for m in members),
                "inaction_fraction": avg("inaction_fraction"),
                "delay_mean_ticks": avg("delay_mean_ticks"),
            }
        )
    return out


def plot(
    results: Sequence[dict[str, Any]], path: Path, *, title: str, lines: dict[str, dict[str, float]] | None = None
) -> Path | None:
    """Return vs model size, a panel per game, a line and its 95 % band per interaction and network
    (Figure 6's layout); ``lines`` (game → label → return) are drawn across, e.g. β's noop and random, and
    ``human``: the published human score the paper draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = sorted({r["game"] for r in results})
    if not games:
        return None
    fig, axes = plt.subplots(1, len(games), figsize=(4.2 * len(games), 3.6), squeeze=False)
    for ax, game in zip(axes[0], games):
        for arch, interaction in ((a, i) for a in ARCHS for i in INTERACTIONS):
            pts = sorted(
                (r["k"], r)
                for r in results
                if r["game"] == game
                and r["interaction"] == interaction
                and r.get("arch", "impala") == arch
                and r["mean_return"] is not None
            )
            if not pts:
                continue
            xs = [_PARAMS.get(r["params"], r["k"] * 1e6) for _, r in pts]
            ys = [r["mean_return"] for _, r in pts]
            lo = [r["mean_return"] - (r["ci95"] or 0.0) for _, r in pts]
            hi = [r["mean_return"] + (r["ci95"] or 0.0) for _, r in pts]
            label = interaction.replace("_", "-") + ("" if arch == "impala" else " (2xDeep)")
            (line,) = ax.plot(xs, ys, marker="o", linestyle="-" if arch == "impala" else "--", label=label)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        for name, value in (lines or {}).get(game, {}).items():
            if name == "human":  # a reference score, not a policy of nonstop's
                ax.axhline(value, color="black", linestyle="--", linewidth=1, label="human (Mnih et al. 2015)")
            else:
                ax.axhline(
                    value, color="grey", linestyle=":" if name == "noop" else "-.", linewidth=1, label=f"{name} (β)"
                )
        ax.set_xscale("log")
        ax.set_xlabel("model size |θ| (declared inference time)")
        ax.set_ylabel("mean episodic return")
        ax.set_title(game)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


BUDGET_HELP: Final = """budgets (--games, --sizes, --seeds, --episodes override them):
  tiny    the delay world, k = 1 and 29, 1 seed, 2 episodes: a smoke test (~20 s)
  small   the delay world at k = 1, 7, 29, 98 x 3 seeds x 6 episodes, and Boxing x 1 seed x 1 episode
          (39 min on a busy 2-core machine, 23 CPU-min; Boxing at eps ~0.9 measures acting, not learning)
  medium  the delay world (5 seeds, 40 episodes); Boxing, Krull, NameThisGame (3 seeds, 20 episodes): days
  paper   Boxing, Krull, NameThisGame, Tetris and Pokemon where found; 3 seeds (the paper's 0, 1, 2),
          2,000 episodes: a cluster's work
  learned the learned-policy table (with --schedulers): the delay world x 5 seeds x 5 episodes and
          Boxing x 5 seeds x 1 episode (a k = 0.25 network), at k = 1's 5 ticks
the paper's settings, each a flag: --seeds (3), --gb-actions (6), --atari-learn-every (4 transitions),
--arch impala,2xdeep (Figure 6's 2xDeep curve)"""


def write_tables(out: Path, rows: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]]) -> None:
    for name, data in (("cells.csv", rows), ("results.csv", results)):
        if not data:
            continue
        columns = list(data[0])
        tmp = out / f".{name}.tmp"
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            for row in data:
                writer.writerow({c: ("" if row.get(c) is None else row[c]) for c in columns})
        os.replace(tmp, out / name)
