"""Realtime self-play: the learner against a pool of its own past snapshots (issue 11, part 5).

``nonstop train --self-play`` on a two-seat world (``multi/duel``, ``multi/Boxing``, …): the learner's
current policy plays the first seat, a snapshot of its own past parameters plays the second, each
side in realtime with its own latency and its own `InferencePool`. The world never waits for either.

* Every ``snapshot_every`` world seconds the learner's current parameters join the pool (the
  initial, untrained ones are snapshot 0); the pool keeps the newest ``pool_size``.
* Each episode (a match) is played against one snapshot, drawn when the opponent first acts in it:
  ``uniform`` over the pool, or ``latest``: weight ∝ rank, 1 for the oldest … n for the newest.
  The draw depends only on the seed, the episode and the pool as it stands, so a run repeats.
* The opponent is the learner's own actor (`nonstop.learning.algos.Algorithm.policy`) reading its
  snapshot's parameters (`SnapshotWeights`): DQN's acts greedily on the snapshot's Q-network, with
  probability ε (the learner's final ε) a random action; SAC's samples from the snapshot's squashed
  Gaussian. Either way no two matches against one snapshot are forced to be the same.
* The learner's transitions are its own seat's induced delayed semi-MDP: the host's recorder
  (`nonstop.learning.replay.ReplayRecorder`) sees the first seat only; the opponent's ticks,
  actions and delays never reach the replay.
* Two-player Atari frames (RGB, 210×160×3) reach both sides as 84×84 grayscale, like single-player
  Atari with ``preprocess=True`` (`SeatFrames`), so the paper's IMPALA network takes them.
* Each finished match is a row of ``RUN/matches.csv`` (`MATCH_COLUMNS`): the learner's score (its
  seat's episode return) and whether it won (score > 0); ``nonstop report`` plots the win rate.

The pool logic is pure (`SnapshotPool`: numbers and arrays in, choices out); `SnapshotWeights` is
what the opponent's actor reads; `SelfPlay` keeps them between slices of a run; `SelfPlayPart` is self-play's part of a run
(`nonstop.experiment.run.Run`), and `SelfPlaySeating` the seating that puts it on the second seat.

>>> pool = SnapshotPool(max_size=2, weighting="latest", seed=0)
>>> [pool.add(np.full(3, float(i), np.float32), env_tick=60 * i, updates=10 * i).id for i in range(3)]
[0, 1, 2]
>>> pool.ids, pool.probabilities().tolist()     # snapshot 0 left; the newest weighs twice the oldest
([1, 2], [0.3333333333333333, 0.6666666666666666])
>>> pool.opponent_for(0).id in (1, 2), pool.opponent_for(0) is pool.opponent_for(0)
(True, True)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from nonstop.experiment.config import OPPONENT_WEIGHTINGS
from nonstop.experiment.run import Part
from nonstop.experiment.registry import lookup
from nonstop.learning.runlog import MATCH_COLUMNS

if TYPE_CHECKING:
    from nonstop.experiment.run import Run
    from nonstop.experiment.seating import WorldSpec

__all__ = [
    "SelfPlaySeating",
    "SelfPlayPart",
    "OPPONENT_WEIGHTINGS",
    "MATCH_COLUMNS",
    "Snapshot",
    "SnapshotPool",
    "SnapshotWeights",
    "SelfPlay",
    "SeatFrames",
    "check_two_seats",
    "match_figures",
    "plot_matches",
    "needs_seat_frames",
    "seat_frames",
]

#: matches in the rolling win rate of the report
WIN_WINDOW: Final = 20


@dataclass(frozen=True)
class Snapshot:
    """The learner's parameters at one moment: ``id`` (0, 1, … in order taken), the run's env tick
    and update count then, and the flat parameter vector (`nonstop.learning.weights.load_flat`)."""

    id: int
    env_tick: int
    updates: int
    params: np.ndarray


def _positive_int(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


class SnapshotPool:
    """The newest ``max_size`` snapshots and which one plays each episode. Pure: no clock, no torch.

    ``opponent_for(episode)`` draws the episode's snapshot once (later calls return the same one,
    even after it left the pool); ``settle(episode)`` hands the draw over to the match log and
    forgets it. The draw is a function of ``seed``, the episode and the pool's ids at that moment.
    """

    def __init__(self, max_size: int, weighting: str = "uniform", seed: int = 0) -> None:
        self.max_size = _positive_int("pool size", max_size)
        if weighting not in OPPONENT_WEIGHTINGS:
            raise ValueError(f"opponent weighting must be one of {', '.join(OPPONENT_WEIGHTINGS)}, got {weighting!r}")
        self.weighting = weighting
        self.seed = int(seed)
        self.snapshots: list[Snapshot] = []
        self.next_id = 0
        self._drawn: dict[int, tuple[Snapshot, int]] = {}  # episode -> (its snapshot, the pool's size then)
        self._lock = threading.Lock()  # wall-clock opponent workers draw from threads of their own

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self.snapshots]

    def __len__(self) -> int:
        return len(self.snapshots)

    def add(self, params: np.ndarray, *, env_tick: int, updates: int, id: int | None = None) -> Snapshot:
        """Add a copy of ``params`` as the newest snapshot; the oldest leaves past ``max_size``."""
        params = np.array(params, np.float32, copy=True).reshape(-1)
        if self.snapshots and params.shape != self.snapshots[0].params.shape:
            raise ValueError(
                f"a snapshot of {params.size} parameters does not fit a pool of "
                f"{self.snapshots[0].params.size}-parameter snapshots"
            )
        sid = self.next_id if id is None else int(id)
        if sid < self.next_id:
            raise ValueError(f"snapshot id {sid} is not newer than the pool's ({self.next_id - 1})")
        snap = Snapshot(sid, int(env_tick), int(updates), params)
        self.snapshots.append(snap)
        self.next_id = sid + 1
        del self.snapshots[: max(0, len(self.snapshots) - self.max_size)]
        return snap

    def probabilities(self) -> np.ndarray:
        """The chance of each snapshot (oldest first) being drawn now."""
        n = len(self.snapshots)
        if n == 0:
            raise RuntimeError("the snapshot pool is empty: add the learner's parameters first")
        w = np.ones(n) if self.weighting == "uniform" else np.arange(1, n + 1, dtype=np.float64)
        return w / w.sum()

    def opponent_for(self, episode: int) -> Snapshot:
        """The snapshot playing ``episode`` (drawn on the first call for it)."""
        return self._draw(episode)[0]

    def _draw(self, episode: int) -> tuple[Snapshot, int]:
        with self._lock:
            drawn = self._drawn.get(episode)
            if drawn is None:
                rng = np.random.default_rng([self.seed & 0xFFFFFFFF, int(episode), self.next_id])  # any int seed
                snap = self.snapshots[int(rng.choice(len(self.snapshots), p=self.probabilities()))]
                drawn = self._drawn[episode] = (snap, len(self.snapshots))
            return drawn

    def settle(self, episode: int) -> tuple[Snapshot, int]:
        """The snapshot that played the finished ``episode`` and the pool's size when it was drawn,
        forgetting the draw (drawn now if the opponent never acted in it: β played that whole match
        for the opponent's seat)."""
        drawn = self._draw(episode)
        with self._lock:  # episodes end in order: a draw for an earlier one (a late, stale act) goes too
            self._drawn = {e: d for e, d in self._drawn.items() if e > episode}
        return drawn

    def forget_draws(self) -> None:
        """Drop every pending draw (a resumed run's episodes count from 0 again)."""
        with self._lock:
            self._drawn = {}

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        """Plain arrays and numbers (a checkpoint's ``self_play`` entry turns them into tensors)."""
        n_params = self.snapshots[0].params.size if self.snapshots else 0
        return {
            "ids": np.array(self.ids, np.int64),
            "env_ticks": np.array([s.env_tick for s in self.snapshots], np.int64),
            "updates": np.array([s.updates for s in self.snapshots], np.int64),
            "params": np.stack([s.params for s in self.snapshots])
            if self.snapshots
            else np.zeros((0, n_params), np.float32),
            "next_id": self.next_id,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Replace the pool with a `state` (newest ``max_size`` kept if this pool is smaller)."""
        ids, ticks, updates = (np.asarray(state[k]).tolist() for k in ("ids", "env_ticks", "updates"))
        params = np.asarray(state["params"], np.float32)
        if not (len(ids) == len(ticks) == len(updates) == params.shape[0]):
            raise ValueError("a self-play pool state whose columns differ in length")
        self.snapshots, self.next_id = [], 0
        self.forget_draws()
        for sid, tick, upd, p in zip(ids, ticks, updates, params):
            self.add(p, env_tick=tick, updates=upd, id=sid)
        self.next_id = max(self.next_id, int(state["next_id"]))


def check_two_seats(env_id: str, seats: list[str] | None) -> list[str]:
    """The seats of a world self-play can run on (exactly two), else a ValueError naming the env and its seats.

    >>> check_two_seats("multi/duel", ["first_0", "second_0"])
    ['first_0', 'second_0']
    >>> check_two_seats("CartPole", None)
    Traceback (most recent call last):
    ...
    ValueError: --self-play needs a world with two seats; CartPole has one seat (agent_0): choose a two-player world such as multi/duel or multi/Boxing (`nonstop envs`)
    """
    if seats is None or len(seats) == 1:
        names = "agent_0" if seats is None else seats[0]
        raise ValueError(
            f"--self-play needs a world with two seats; {env_id} has one seat ({names}): choose a "
            "two-player world such as multi/duel or multi/Boxing (`nonstop envs`)"
        )
    if len(seats) != 2:
        raise ValueError(f"--self-play needs a world with two seats; {env_id} has {len(seats)}: {', '.join(seats)}")
    return list(seats)


def needs_seat_frames(obs_space: Any) -> bool:
    """Whether a seat's observations are RGB frames (``H×W×3`` uint8) that `SeatFrames` shrinks."""
    shape = getattr(obs_space, "shape", None)
    return shape is not None and len(shape) == 3 and shape[-1] == 3 and np.dtype(obs_space.dtype) == np.uint8


class SeatFrames:
    """A seat world whose every seat observes 84×84 grayscale ``uint8`` frames instead of RGB screens.

    Luminance with ITU-R 601 weights (integer arithmetic, so every machine computes the same
    frame), then `nonstop.envs.atari.AreaResize`'s exact area average: the input of the paper's
    IMPALA ResNet, as single-player Atari's ``preprocess=True`` gives. Speaks PettingZoo's parallel
    API like the env it wraps (a seat world for `nonstop.Session`).
    """

    metadata = {"name": "nonstop_seat_frames_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, env: Any, shape: tuple[int, int] = (84, 84)) -> None:
        import gymnasium
        from gymnasium import spaces

        from nonstop.envs.atari import AreaResize

        self.env = env
        self.possible_agents = list(env.possible_agents)
        spaces_in = {a: env.observation_space(a) for a in self.possible_agents}
        bad = {a: s for a, s in spaces_in.items() if not needs_seat_frames(s)}
        if bad:
            raise TypeError(f"SeatFrames needs RGB uint8 frames (H×W×3) on every seat, got {bad}")
        height, width, _ = next(iter(spaces_in.values())).shape

        class _Frames(gymnasium.Env):  # only AreaResize's view of the frame size: it never steps
            observation_space = spaces.Box(0, 255, (height, width), np.uint8)
            action_space = spaces.Discrete(1)

        self._resize = AreaResize(_Frames(), shape)
        self._space = spaces.Box(0, 255, shape, np.uint8)
        self._luma = np.array([299, 587, 114], np.uint32)

    @property
    def agents(self) -> list[str]:
        return self.env.agents

    def observation_space(self, agent: str) -> Any:
        return self._space

    def action_space(self, agent: str) -> Any:
        return self.env.action_space(agent)

    def _frames(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        done: dict[int, np.ndarray] = {}  # seats sharing one screen (two-player Atari) shrink it once
        for seat, frame in obs.items():
            key = id(frame)
            if key not in done:
                gray = ((frame @ self._luma + 500) // 1000).astype(np.uint8)
                done[key] = self._resize.observation(gray)
            out[seat] = done[key]
        return out

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._frames(obs), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        return self._frames(obs), rewards, terminated, truncated, infos

    def close(self) -> None:
        self.env.close()


def seat_frames(env_id: str, **env_kwargs: Any) -> SeatFrames:
    """``env_id`` built from the registry and wrapped in `SeatFrames` (module-level: a wall-clock
    host process rebuilds it from a pickled ``functools.partial``)."""
    from nonstop.envs import make_env

    return SeatFrames(make_env(env_id, **env_kwargs))


class SnapshotWeights:
    """The weights an opponent's actor reads: the parameters of the snapshot that plays the current episode.

    It speaks `SharedWeights`' reading side (``n_params``, ``version``, ``read_into``, ``exploration``), so
    the opponent is the learner's own actor class (`nonstop.learning.algos.Algorithm.policy`: DQN's
    ε-greedy, SAC's sampled tanh-Gaussian) over a snapshot instead of the learner's newest θ. The version is
    the snapshot's id + 1 (0 is "nothing loaded"): the actor reloads only when the snapshot changes.
    ``episode_of()`` says which episode the observation being acted on belongs to (the opponent seat's slot).
    ``exploration``: the figure a frozen opponent acts with (`Algorithm.opponent_exploration`: DQN's final ε).

    >>> pool = SnapshotPool(max_size=2, seed=0)
    >>> _ = pool.add(np.zeros(3, np.float32), env_tick=0, updates=0)
    >>> weights = SnapshotWeights(pool, lambda: 0, exploration=0.05)
    >>> out = np.empty(3, np.float32)
    >>> weights.version, weights.read_into(out), weights.epsilon
    (1, 1, 0.05)
    """

    def __init__(self, pool: SnapshotPool, episode_of: Callable[[], int], *, exploration: float) -> None:
        if not (isinstance(exploration, (int, float)) and 0.0 <= exploration <= 1.0):
            raise ValueError(f"an opponent's exploration must be in [0, 1], got {exploration!r}")
        self.pool, self.episode_of = pool, episode_of
        self.exploration = float(exploration)

    @property
    def n_params(self) -> int:
        return self.pool.snapshots[0].params.size if self.pool.snapshots else 0

    @property
    def epsilon(self) -> float:
        """DQN's name for `exploration` (what `nonstop.learning.dqn.DQNPolicy` reads)."""
        return self.exploration

    def current(self) -> Snapshot:
        """The snapshot playing the episode now acted in (drawn on the first call for it)."""
        return self.pool.opponent_for(self.episode_of())

    @property
    def version(self) -> int:
        return self.current().id + 1

    def read_into(self, out: np.ndarray) -> int:
        """Copy the current snapshot's parameters into ``out``; return its version (id + 1)."""
        snap = self.current()
        out[...] = snap.params
        return snap.id + 1


class SelfPlay:
    """Self-play's bookkeeping between slices of a run: the pool, its snapshots and the match rows.

    ``snapshot_ticks``: ticks between snapshots. `due` / `take` are called by the run between
    slices of world time; `match_rows` turns the run's finished-episode rows into match rows.
    """

    def __init__(self, pool: SnapshotPool, *, snapshot_ticks: int, seats: list[str]) -> None:
        self.pool = pool
        self.snapshot_ticks = _positive_int("snapshot interval in ticks", snapshot_ticks)
        self.learner_seat, self.opponent_seat = seats
        #: the run's env tick at which the next snapshot is due
        self.next_tick = 0

    def ticks_to_next(self, env_tick: int) -> int:
        return max(0, self.next_tick - env_tick)

    def take(self, params: np.ndarray, *, env_tick: int, updates: int) -> Snapshot | None:
        """Add the learner's ``params`` if a snapshot is due at ``env_tick`` (else None)."""
        if env_tick < self.next_tick:
            return None
        snap = self.pool.add(params, env_tick=env_tick, updates=updates)
        # on a grid of the run's ticks: a snapshot taken a tick late does not shift the ones after it
        self.next_tick = (env_tick // self.snapshot_ticks + 1) * self.snapshot_ticks
        return snap

    def match_rows(self, episode_rows: Iterable[dict[str, Any]], episode_offset: int) -> list[dict[str, Any]]:
        """One match row per finished episode row (`nonstop.experiment.loop.ProgressRows.episodes`)."""
        out = []
        for ep in episode_rows:
            snap, pool_size = self.pool.settle(int(ep["episode"]) - episode_offset)  # the host counts this segment's
            score = float(ep["return"])
            out.append(
                {
                    "episode": ep["episode"],
                    "end_tick": ep["end_tick"],
                    "wall_s": ep["wall_s"],
                    "opponent": snap.id,
                    "opponent_tick": snap.env_tick,
                    "pool_size": pool_size,
                    "score": score,
                    "won": int(score > 0),
                }
            )
        return out

    def state(self) -> dict[str, Any]:
        return {**self.pool.state(), "next_tick": self.next_tick}

    def load_state(self, state: dict[str, Any]) -> None:
        self.pool.load_state(state)
        self.next_tick = int(state["next_tick"])


class SelfPlayPart(Part):
    """Self-play in a run: snapshots of the learner join the pool on their grid of ticks (snapshot 0,
    the untrained parameters, at the start unless a resumed pool has its own), and the opponent's
    `InferencePool` plays the second seat from the snapshot drawn for each match."""

    name = "self_play"

    def __init__(self, run: "Run", seats: list[str], latency: Any) -> None:
        cfg = run.cfg
        pool = SnapshotPool(cfg.pool_size, cfg.opponents, seed=cfg.seed)
        self.self_play = SelfPlay(pool, snapshot_ticks=max(1, round(cfg.snapshot_every / run.tau_m)), seats=seats)
        self.latency = latency
        self.n_inference = opponent_workers(cfg.scheduler, cfg.n_inference, self.latency.mean, run.tau_m)
        self.inference: Any = None

    def start(self, run: "Run") -> None:
        from nonstop.experiment.drivers import InferencePart

        self.before_slice(run)
        self.inference = InferencePart(
            "opponent_pool", lambda i: self._policy(run, i), self.n_inference, seat=self.self_play.opponent_seat
        )
        self.inference.start(run)

    def _policy(self, run: "Run", i: int) -> Any:
        """An opponent worker: the learner's actor class over the snapshot playing the current match (always
        in this process: snapshots live here), with the pool side's declared latency."""
        from nonstop.policies.latency import LatencyPolicy

        seat = self.self_play.opponent_seat
        slot = run.world.slots[run.world.seat_index(seat)]
        algo = run.algorithm
        algo.check_spaces(run.world.observation_spaces[seat], run.world.action_spaces[seat], run.cfg.env)
        weights = SnapshotWeights(
            self.self_play.pool, lambda: int(slot.read().episode), exploration=algo.opponent_exploration()
        )
        seed = run.cfg.seed * 1000 + 500 + i
        policy: Any = algo.policy(
            algo.build_model(), weights, seed=seed, num_threads=None, device=run.cfg.device, dtype=run.cfg.dtype
        )
        if self.latency.max_hint > 0:
            policy = LatencyPolicy(policy, self.latency, seed=seed)
        return policy

    @property
    def failure(self) -> BaseException | None:  # type: ignore[override]  # the opponent pool's, read when asked
        return None if self.inference is None else self.inference.failure

    def deaths(self) -> list[Any]:
        return [] if self.inference is None else self.inference.deaths()

    def stop(self) -> None:
        if self.inference is not None:
            self.inference.stop()

    close = stop

    def before_slice(self, run: "Run") -> None:
        """Add the learner's current parameters to the pool if a snapshot is due."""
        if run.env_ticks >= self.self_play.next_tick:
            self.self_play.take(run.learning.current_params(), env_tick=run.env_ticks, updates=run.state.updates)

    def ticks_to_next(self, env_ticks: int) -> int | None:
        return self.self_play.ticks_to_next(env_ticks)  # the run stops there, so snapshots keep their interval

    def state_dict(self, *, include_replay: bool) -> dict[str, Any]:
        import torch

        return {
            "self_play": {
                k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in self.self_play.state().items()
            }
        }

    def load_state_dict(self, snap: dict[str, Any]) -> None:
        pool = snap.get("self_play")
        if pool is None:
            raise ValueError("the checkpoint holds no self-play pool: it was not written by a --self-play run")
        self.self_play.load_state({k: v.numpy() if hasattr(v, "numpy") else v for k, v in pool.items()})

    def records(self, episodes: list[dict[str, Any]], run: "Run") -> dict[str, list[dict[str, Any]]]:
        return {"matches": self.self_play.match_rows(episodes, run.episode_offset)}

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        sp = self.self_play
        theirs = tick_log.seat(sp.opponent_seat).summary()
        return {
            "self_play": {
                "learner_seat": sp.learner_seat,
                "opponent_seat": sp.opponent_seat,
                "snapshots": sp.pool.ids,
                "snapshots_taken": sp.pool.next_id,
                **{
                    f"opponent_{k}": theirs[k]
                    for k in ("agent_ticks", "inaction_fraction", "tau_i_mean_ticks", "delay_mean_ticks")
                },
            }
        }

    def processes(self) -> int:
        return self.n_inference if isinstance(self.n_inference, int) else 1


def opponent_workers(scheduler: str, n_inference: int | str | None, latency_mean: float, tau_m: float) -> int | str:
    """The pool side's N_I: as the learner's is chosen, from the opponent's own latency.

    >>> opponent_workers("exp_time", None, 0.1, 1 / 60), opponent_workers("sequential", None, 0.1, 1 / 60)
    (6, 1)
    """
    if scheduler == "sequential":
        return 1
    if n_inference == "auto":
        return "auto"
    return max(1, math.ceil(latency_mean / tau_m - 1e-9))


class SelfPlaySeating:
    """The learner on the first seat of a two-seat world, a pool of its past snapshots on the second."""

    def __init__(self, cfg: Any) -> None:
        if cfg.trials is not None:
            raise ValueError("--trials chooses the judged θ of team self-play: a two-seat world judges its last θ")
        self.cfg = cfg
        self.learner_seat: str | None = None

    def describe(self) -> "WorldSpec":
        from functools import partial

        from nonstop.experiment.seating import probe_world

        cfg = self.cfg

        def adapt(probe: Any) -> tuple[Any, Any]:
            if not needs_seat_frames(probe.observation_space(probe.possible_agents[0])):
                return probe, cfg.env
            # two-player Atari: 84×84 grayscale, as preprocess=True gives one player
            source = partial(seat_frames, cfg.env, **cfg.env_kwargs)
            source.__name__ = cfg.env  # type: ignore[attr-defined]  # the tick log's env id
            return SeatFrames(probe), source

        from nonstop.policies.latency import parse_latency

        spec = probe_world(cfg, adapt)
        spec.seats = check_two_seats(cfg.env, spec.seats)
        self.learner_seat = spec.seats[0]
        #: the pool side's declared latency (a bad one is refused here, before anything is built)
        self.opponent_latency = parse_latency(cfg.opponent_latency or cfg.latency, tick_hz=spec.tick_hz)
        return spec

    def world(self, run: "Run", log_dir: Any) -> Any:
        from nonstop.experiment.seating import build_world

        return build_world(run, log_dir)  # the recorder sees the first seat, the learner's

    def parts(self, run: "Run") -> list[Part]:
        assert run.spec.seats is not None  # describe() checked the two seats
        return [
            SelfPlayPart(run, run.spec.seats, self.opponent_latency),
            *lookup("driver", self.cfg.interaction)(run, seat=self.learner_seat),
        ]

    def announce(self, run: "Run") -> str | None:
        cfg, seats = self.cfg, run.spec.seats or []
        part = next(p for p in run.parts if isinstance(p, SelfPlayPart))
        return (
            f"self-play: the learner on {seats[0]}, a snapshot of it on {seats[1]} (N_I={part.n_inference}, latency "
            f"{cfg.opponent_latency or cfg.latency}); a snapshot every {cfg.snapshot_every:g} world s, the newest "
            f"{cfg.pool_size} kept, drawn {cfg.opponents}"
        )


# ----------------------------------------------------------------------------- the report's figures


def match_figures(matches: dict[str, np.ndarray], window: int = WIN_WINDOW) -> dict[str, Any]:
    """Summary of matches.csv: matches, win rate and mean score overall and over the last ``window``,
    and the snapshots faced.

    >>> m = {"won": np.array([0, 1, 1, 1.0]), "score": np.array([-2, 1, 3, 2.0]), "opponent": np.array([0, 0, 1, 2.0])}
    >>> f = match_figures(m, window=2); (f["matches"], f["win_rate"], f[f"win_rate_last{2}"], f["opponents_faced"])
    (4, 0.75, 1.0, 3)
    """
    won, score = matches["won"], matches["score"]
    n = len(won)
    nan = math.nan
    return {
        "matches": n,
        "win_rate": float(won.mean()) if n else nan,
        f"win_rate_last{window}": float(won[-window:].mean()) if n else nan,
        "score_mean": float(score.mean()) if n else nan,
        f"score_last{window}_mean": float(score[-window:].mean()) if n else nan,
        "opponents_faced": int(np.unique(matches["opponent"]).size),
    }


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of each value and the ``window − 1`` before it (fewer at the start).

    >>> rolling_mean(np.array([0, 1, 1, 0.0]), 2).tolist()
    [0.0, 0.5, 1.0, 0.5]
    """
    c = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    i = np.arange(1, len(values) + 1)
    lo = np.maximum(0, i - window)
    return (c[i] - c[lo]) / (i - lo)


def plot_matches(matches: dict[str, np.ndarray], path: Any, window: int = WIN_WINDOW) -> Any:
    """Win rate (rolling over ``window`` matches) and score against the pool over world time."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    order = np.argsort(matches["end_tick"], kind="stable")
    tick, won, score = (matches[k][order] for k in ("end_tick", "won", "score"))
    opponent = matches["opponent"][order]
    fig, (ax_win, ax_score) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax_win.plot(tick, rolling_mean(won, window), color="tab:blue")
    ax_win.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax_win.set_ylim(-0.02, 1.02)
    ax_win.set_ylabel(f"win rate (last {window})")
    ax_win.set_title("Self-play: the learner against its pool of past snapshots")
    points = ax_score.scatter(tick, score, c=opponent, s=12, cmap="viridis")
    ax_score.plot(tick, rolling_mean(score, window), color="black", lw=1)
    ax_score.set_ylabel("score (learner's return)")
    ax_score.set_xlabel("env tick at the match's end")
    fig.colorbar(points, ax=ax_score, label="opponent snapshot id")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
