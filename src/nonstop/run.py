"""One training run: a realtime world, inference, learning (DESIGN §2-3).

Three ways to interact and learn, on the same clock and env so comparisons are
fair (the paper's Figure 4):

* ``staggered`` — N_I inference workers under a scheduler (Algorithm 1 or 2)
  act while N_L learners update asynchronously; nothing learning does ever
  delays an action.
* ``infer_then_learn`` — one loop: read the newest observation, infer (τ_θ),
  act, then learn from one batch (τ_L), repeat: acts every τ_θ + τ_L.
* ``learn_then_infer`` — one loop: read, learn (τ_L), infer on the observation
  read before learning, act: the action is τ_L + τ_θ stale (Travnik et al.).

With ``self_play`` (a two-seat world) the learner plays the first seat against a pool of its own
past snapshots on the second, each side with its own inference pool and latency (`nonstop.selfplay`).

Model latency is declared with a `LatencyPolicy` (``latency="5t"``: five ticks),
so a small network can stand in for a large one honestly: its actions arrive as
late as the large model's would. On the virtual clock an update *takes*
``tau_l`` seconds (default τ_M); on the wall clock it takes what it takes.

>>> from nonstop.learning.dqn import DQNConfig
>>> cfg = TrainConfig(env="CartPole", seconds=4.0, dqn=DQNConfig.for_family("classic", learning_starts=50))
>>> result = train(cfg)
>>> result["ticks"], result["updates"] > 100, result["summary"]["inaction_ticks"] < 5
(200, True, True)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import gymnasium as gym
import numpy as np

from nonstop.envs.registry import parse_env_args
from nonstop.learning.dqn import (
    DQNConfig,
    build_q_network,
    epsilon_at,
    init_training,
    make_dqn_policy,
)
from nonstop.learning.learners import LEARNER_MODES, Learner, LearnerProcesses, VirtualLearners, apply
from nonstop.learning.replay import ReplayBuffer, ReplayRecorder
from nonstop.learning.weights import SharedWeights, TrainingState
from nonstop.policies.memory import DEFAULT_MIN_FREE, check_min_free
from nonstop.realtime.clock import TimedProcess, Wake
from nonstop.realtime.lifeline import RestartBudget

__all__ = ["INTERACTIONS", "TrainConfig", "train", "TrainingRun", "ProgressRows", "default_env_kwargs", "parse_env_args"]

INTERACTIONS: Final = ("staggered", "infer_then_learn", "learn_then_infer")
_AFTER_TICK: Final = 2  # virtual priority: wake after the host's tick at the same instant
#: TrainConfig's self-play settings (left out of a config without self-play)
SELF_PLAY_KEYS: Final = ("self_play", "opponents", "snapshot_every", "pool_size", "opponent_latency")


@dataclass
class TrainConfig:
    """Everything that defines a run (saved as the run's config.json)."""

    env: str = field(default="CartPole", metadata={"help": "env id (see `nonstop envs`)"})
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata={"help": "keyword arguments for the env"})
    clock: str = field(default="virtual", metadata={"help": "virtual (simulated time) or wall (real time)"})
    seconds: float = field(default=60.0, metadata={"help": "world seconds to run"})
    interaction: str = field(default="staggered", metadata={"help": "staggered | infer_then_learn | learn_then_infer"})
    scheduler: str = field(default="exp_time", metadata={"help": "inference scheduler when staggered"})
    n_inference: int | str | None = field(default=None, metadata={"help": "N_I (default ⌈τ̄_θ/τ_M⌉), or 'auto': grown online"})
    latency: str = field(default="0", metadata={"help": "declared model latency, e.g. 5t, 80ms, lognormal:6t,0.5"})
    n_learners: int = field(default=1, metadata={"help": "N_L learners"})
    learner_mode: str = field(default="round_robin", metadata={"help": "round_robin | hogwild | parallel"})
    tau_l: float | None = field(default=None, metadata={"help": "virtual seconds per update (default τ_M)"})
    learner_backend: str = field(default="process", metadata={"help": "wall-clock learners: process (this host) | ray "
                                                                       "(Ray actors on any node; the replay stays here)"})
    backend: str = field(default="thread", metadata={"help": "inference workers on the wall clock: thread | process | ray"})
    ray_address: str | None = field(default=None, metadata={"help": "Ray cluster HOST:PORT for backend ray (None: a local Ray)"})
    trim_above: int | None = field(default=DEFAULT_MIN_FREE, metadata={"help": "process and Ray workers: after each "
                                   "forward pass, hand its working set back to the OS when the heap holds more than this "
                                   "many bytes free (None: never; see nonstop.policies.memory)"})  # fmt: skip
    default: str | None = field(default=None, metadata={"help": "β, the action of a tick without an agent action: noop | "
                                                          "repeat | random (None: the env's own choice)"})
    seed: int = field(default=0, metadata={"help": "seed for env, model, exploration and replay sampling"})
    max_restarts: int = field(default=5, metadata={"help": "restarts of dead learners (and, apart, of dead inference "
                                                           "workers) allowed within restart_window; past it the run ends"})
    restart_window: float = field(default=60.0, metadata={"help": "the window of max_restarts, in clock seconds"})
    dqn: DQNConfig | None = field(default=None, metadata={"help": "DQN settings (default: the env family's)"})
    self_play: bool = field(default=False, metadata={"help": "a two-seat world: the learner plays the first seat against a "
                                                            "pool of its own past snapshots on the second"})
    opponents: str = field(default="uniform", metadata={"help": "self-play: how a match's snapshot is drawn: uniform | "
                                                              "latest (weight ∝ rank, newest heaviest)"})
    snapshot_every: float = field(default=30.0, metadata={"help": "self-play: world seconds between snapshots"})
    pool_size: int = field(default=8, metadata={"help": "self-play: snapshots kept (the newest)"})
    opponent_latency: str | None = field(default=None, metadata={"help": "self-play: the pool side's declared latency "
                                                                        "(None: the learner's --latency)"})

    def __post_init__(self) -> None:
        if self.clock not in ("virtual", "wall"):
            raise ValueError(f"clock must be 'virtual' or 'wall', got {self.clock!r}")
        if self.interaction not in INTERACTIONS:
            raise ValueError(f"interaction must be one of {', '.join(INTERACTIONS)}, got {self.interaction!r}")
        if self.learner_mode not in LEARNER_MODES:
            raise ValueError(f"learner_mode must be one of {', '.join(LEARNER_MODES)}, got {self.learner_mode!r}")
        from nonstop.distributed.backends import check_backend, check_learner_backend

        # unknown backend, Ray missing, a cluster that does not answer: one line, before anything starts
        ray_learners = self.learner_backend == "ray"
        check_backend(self.backend, ray_address=None if ray_learners and self.backend != "ray" else self.ray_address,
                      clock=self.clock)  # fmt: skip
        check_learner_backend(self.learner_backend, ray_address=self.ray_address, clock=self.clock,
                              interaction=self.interaction)  # fmt: skip
        if not (isinstance(self.seconds, (int, float)) and self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"seconds must be a positive number, got {self.seconds!r}")
        if self.n_inference == "auto":
            self.scheduler = "auto"  # only the auto scheduler sizes the pool online
        if self.scheduler == "sequential" and self.n_inference not in (None, 1):
            raise ValueError(f"the sequential scheduler runs exactly 1 inference worker, got n_inference={self.n_inference!r}")
        for name in ("n_inference", "n_learners"):
            v = getattr(self, name)
            if name == "n_inference" and v == "auto":
                continue
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        from nonstop.realtime.defaults import DEFAULT_NAMES

        if self.default is not None and self.default not in DEFAULT_NAMES:
            raise ValueError(f"default must be one of {', '.join(DEFAULT_NAMES)}, got {self.default!r}")
        RestartBudget(self.max_restarts, self.restart_window)  # a clear error for a bad budget, before anything starts
        check_min_free(self.trim_above, "trim_above")
        if self.tau_l is not None and not (self.tau_l >= 0 and math.isfinite(self.tau_l)):
            raise ValueError(f"tau_l must be a finite number of seconds >= 0, got {self.tau_l!r}")
        if isinstance(self.dqn, dict):
            self.dqn = DQNConfig.from_dict(self.dqn)
        from nonstop.selfplay import OPPONENT_WEIGHTINGS

        if not isinstance(self.self_play, bool):
            raise TypeError(f"self_play must be True or False, got {self.self_play!r}")
        if self.opponents not in OPPONENT_WEIGHTINGS:
            raise ValueError(f"opponents must be one of {', '.join(OPPONENT_WEIGHTINGS)}, got {self.opponents!r}")
        if not (isinstance(self.snapshot_every, (int, float)) and self.snapshot_every > 0 and math.isfinite(self.snapshot_every)):
            raise ValueError(f"snapshot_every must be a positive number of world seconds, got {self.snapshot_every!r}")
        if not isinstance(self.pool_size, int) or isinstance(self.pool_size, bool) or self.pool_size < 1:
            raise ValueError(f"pool_size must be an integer >= 1, got {self.pool_size!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dqn"] = self.dqn.to_dict() if self.dqn is not None else None
        if not self.self_play:  # a run without self-play keeps the config (and resumes) of runs before it existed
            for name in SELF_PLAY_KEYS:
                del d[name]
        if self.learner_backend == "process":  # likewise a run with learners on this host
            del d["learner_backend"]
        return d


def default_env_kwargs(family: str) -> dict[str, Any]:
    """What learning needs from a world family by default: the paper's 84×84 grayscale frames
    for Atari (Game Boy envs observe 84×84 already)."""
    return {"preprocess": True} if family == "atari" else {}


class TrainingRun:
    """The parts of one run, built and torn down together (see `train`)."""

    def __init__(self, cfg: TrainConfig) -> None:
        from nonstop.envs import env_info, make_env
        from nonstop.policies.latency import parse_latency
        from nonstop.realtime.host import is_seat_world

        self.cfg = cfg
        info = env_info(cfg.env, **cfg.env_kwargs)
        self.tick_hz = info.tick_hz
        self.tau_m = 1.0 / info.tick_hz
        self.dqn = cfg.dqn if cfg.dqn is not None else DQNConfig.for_family(info.family)
        cfg.dqn = self.dqn
        self.latency = parse_latency(cfg.latency, tick_hz=info.tick_hz)
        probe: Any = make_env(cfg.env, **cfg.env_kwargs)  # a gymnasium.Env or a seat world
        #: a seat world's seats (self-play: the learner's, then the pool's), None for a one-seat world
        self.seats: list[str] | None = None
        #: what the host builds: the env id, or (self-play on RGB frames) a factory shrinking them
        self.env_source: Any = cfg.env
        if is_seat_world(probe) and cfg.self_play:
            from functools import partial

            from nonstop.selfplay import SeatFrames, needs_seat_frames, seat_frames

            if needs_seat_frames(probe.observation_space(probe.possible_agents[0])):
                probe = SeatFrames(probe)  # two-player Atari: 84×84 grayscale, as preprocess=True gives one player
                self.env_source = partial(seat_frames, cfg.env, **cfg.env_kwargs)
                self.env_source.__name__ = cfg.env  # the tick log's env id
        if is_seat_world(probe):
            self.seats = [str(a) for a in probe.possible_agents]
            obs_space, action_space = probe.observation_space(self.seats[0]), probe.action_space(self.seats[0])
        else:
            obs_space, action_space = probe.observation_space, probe.action_space
        probe.close()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"DQN needs a Discrete action space; {cfg.env} has {action_space}")
        if obs_space.shape is None:
            raise TypeError(f"DQN needs array observations; {cfg.env} has {obs_space}")
        self.obs_space, self.action_space = obs_space, action_space
        self.self_play: Any = None  # the SelfPlay of a --self-play run (built with the rest in `build`)
        if cfg.self_play:
            from nonstop.selfplay import check_two_seats

            self.seats = check_two_seats(cfg.env, self.seats)
            self.opponent_latency = parse_latency(cfg.opponent_latency or cfg.latency, tick_hz=info.tick_hz)
        elif self.seats is not None:
            raise ValueError(f"{cfg.env} is a world of {len(self.seats)} seats ({', '.join(self.seats)}): train on it "
                             "with --self-play (the learner against its own past snapshots)")  # fmt: skip
        self.obs_shape = tuple(obs_space.shape)
        if len(self.obs_shape) > 1:  # a ResNet that cannot fit fails here, before anything starts
            from nonstop.policies.models import ARCH_DEPTHS, ensure_fits

            ensure_fits(self.dqn.k, "cpu", n_actions=int(self.action_space.n), depth=ARCH_DEPTHS[self.dqn.arch])
        # Algorithm 2's N_I* = ⌈τ̄_θ/τ_M⌉ by default, so the staggered agent acts at every tick
        self.n_inference = cfg.n_inference or (1 if cfg.scheduler == "sequential" else max(1, math.ceil(self.latency.mean / self.tau_m - 1e-9)))
        self.final_updates = 0
        self.final_episodes = 0  # episodes_total when torn down (earlier segments included)
        self.tick_offset = 0  # env ticks of earlier segments of this run (after --resume)
        self.episode_offset = 0
        self._parts: list[Callable[[], object]] = []  # teardown, newest first
        self._cluster: Any = None  # the Ray connection (`connect_cluster`), an ExitStack

    # ------------------------------------------------------------------ building
    def build(self, log_dir: Any = None) -> "TrainingRun":
        """Create the shared memory, the model and the world; ``log_dir``: stream the tick log there
        (`Session`'s ``log_dir``)."""
        import torch

        from nonstop.realtime.host import Session

        cfg, dqn = self.cfg, self.dqn
        torch.manual_seed(cfg.seed)
        if cfg.clock == "virtual":
            # everything shares this process: one torch thread each avoids oversubscribing
            # the cores that small networks cannot use anyway
            torch.set_num_threads(1)
        model = build_q_network(self.obs_shape, int(self.action_space.n), dqn)
        n_params = sum(p.numel() for p in model.parameters())
        self.replay = ReplayBuffer.create(capacity=dqn.replay_capacity, obs_shape=self.obs_shape, dtype=self.obs_space.dtype)
        self._parts.append(self.replay.unlink)
        self.state = TrainingState.create(n_params)
        self._parts.append(self.state.unlink)
        self.weights = SharedWeights.create(n_params)
        self._parts.append(self.weights.unlink)
        init_training(model, self.state, self.weights)
        self.weights.epsilon = dqn.epsilon_start
        history = max(256, 4 * math.ceil(self._max_latency() / self.tau_m) + 64)
        self.recorder = ReplayRecorder(self.replay, gamma=dqn.gamma, history=history,
                                       action_start=int(getattr(self.action_space, "start", 0)))  # fmt: skip
        if isinstance(self.env_source, str):
            source: dict[str, Any] = {"env": cfg.env, "env_kwargs": cfg.env_kwargs}
        else:  # a factory: the registry's facts the Session would look up by id
            source = {"env": self.env_source, "tick_hz": self.tick_hz}
        self.world = Session(**source, clock=cfg.clock, seed=cfg.seed, recorder=self.recorder, log_dir=log_dir,
                             default=cfg.default)  # fmt: skip
        self.world.start()
        self._parts.append(self.world.stop)
        if cfg.self_play:
            from nonstop.selfplay import SelfPlay, SnapshotPool

            pool = SnapshotPool(cfg.pool_size, cfg.opponents, seed=cfg.seed)
            assert self.seats is not None  # check_two_seats set them
            self.self_play = SelfPlay(pool, snapshot_ticks=max(1, round(cfg.snapshot_every / self.tau_m)), seats=self.seats)
        return self

    def _max_latency(self) -> float:
        return float(self.latency.max_hint)

    def _policy(self, i: int) -> Any:
        from functools import partial

        from nonstop.inference.workers import ProcessPolicy

        seed = self.cfg.seed * 1000 + i
        latency = self.latency if self._has_latency() else None
        if self.cfg.backend == "ray":
            from nonstop.distributed.ray_backend import RayPolicy
            from nonstop.distributed.shared_params import make_object_store_dqn_policy

            # the model is built in the actor; it computes from views of the version in its node's object
            # store (one copy of θ per node, not per actor)
            factory = partial(make_object_store_dqn_policy, self.obs_shape, self.action_space, self.dqn.to_dict(),
                              seed=seed, latency=latency)  # fmt: skip
            # not waited for here: the pool starts every actor together, then waits for them all
            return RayPolicy(factory, broadcast=self._broadcast, num_cpus=0 if self._has_latency() else 1,
                             trim_above=self.cfg.trim_above, wait=False)  # fmt: skip
        if self.cfg.clock == "wall" and self.cfg.backend == "process":
            from nonstop.distributed.shared_params import make_shared_dqn_policy

            # the model in its own process, one torch thread, computing from the host's one shared copy of θ
            factory = partial(make_shared_dqn_policy, self.obs_shape, self.action_space, self.dqn.to_dict(), self.weights,
                              seed, latency)  # fmt: skip
            return ProcessPolicy(factory, trim_above=self.cfg.trim_above, wait=False)  # started together by the pool
        factory = partial(make_dqn_policy, self.obs_shape, self.action_space, self.dqn.to_dict(), self.weights, seed, latency)
        return factory()

    def _has_latency(self) -> bool:
        return self._max_latency() > 0

    def _learner(self, i: int) -> Learner:
        return Learner(i, self.obs_shape, int(self.action_space.n), self.dqn, self.state, self.weights, self.replay,
                       seed=self.cfg.seed * 7 + i)  # fmt: skip

    def connect_cluster(self) -> None:
        """Connect to Ray (a run with Ray workers or learners) and check that the cluster can place
        and hold this run's actors: CPUs for every actor that reserves one (`check_placement`), and
        memory for the ResNet each builds (`check_model_fits_nodes`). Each refusal is one line; `train`
        calls this before the run directory exists, so a refused run writes nothing. Idempotent; the
        connection is released by `teardown`. A run without Ray: nothing to do."""
        cfg = self.cfg
        if self._cluster is not None or "ray" not in (cfg.backend, cfg.learner_backend):
            return
        from contextlib import ExitStack

        from nonstop.distributed.ray_backend import check_model_fits_nodes, check_placement, ray_session

        stack = ExitStack()
        try:
            stack.enter_context(ray_session(cfg.ray_address))
            workers = self.n_inference if isinstance(self.n_inference, int) else 1
            inference_cpus = workers if cfg.backend == "ray" and not self._has_latency() else 0
            learner_cpus = cfg.n_learners if cfg.learner_backend == "ray" else 0
            check_placement(inference_cpus, 1, n_learners=learner_cpus)
            if len(self.obs_shape) > 1 and (inference_cpus or learner_cpus):  # a ResNet each actor builds
                from nonstop.policies.models import ARCH_DEPTHS

                check_model_fits_nodes(self.dqn.k, n_actions=int(self.action_space.n), depth=ARCH_DEPTHS[self.dqn.arch],
                                       learner_batch=self.dqn.batch_size if learner_cpus else None)
        except BaseException:
            stack.close()
            raise
        self._cluster = stack
        self._parts.append(stack.close)  # torn down after the pool and learners (newest first): actors, then Ray

    def start(self) -> "TrainingRun":
        from nonstop.inference.workers import InferencePool

        cfg, clock = self.cfg, self.world.clock
        tau_l = cfg.tau_l if cfg.tau_l is not None else self.tau_m
        # each part is registered for teardown before it starts, so a failed start leaves nothing behind
        if "ray" in (cfg.backend, cfg.learner_backend):
            from nonstop.distributed.ray_backend import WeightBroadcast

            self.connect_cluster()  # `train` did it before the run directory existed; an API caller here
            self._broadcast = WeightBroadcast(self.weights)  # one put per version, for inference actors and learners
        seat = None
        if self.self_play is not None:
            self._take_snapshot()  # snapshot 0 (the untrained parameters), unless a resumed pool has its own
            seat = self.self_play.learner_seat
            self.opponent_pool = InferencePool(self.world, self._opponent_policy, cfg.scheduler,
                                               n_inference=self.opponent_n_inference, restart_budget=self._budget(),
                                               seat=self.self_play.opponent_seat)  # fmt: skip
            self._parts.append(self.opponent_pool.stop)
            self.opponent_pool.start()
        if cfg.interaction == "staggered":
            self.pool = InferencePool(self.world, self._policy, cfg.scheduler, n_inference=self.n_inference,
                                      restart_budget=self._budget(), seat=seat)  # fmt: skip
            self._parts.append(self.pool.stop)
            self.pool.start()
            # the world ticked (β) while the workers' processes or actors started: the summary says how long
            self.world.annotate("agents_started_at_tick", int(self.world.slot.read().tick))
            if clock.is_virtual:
                learners = [self._learner(i) for i in range(cfg.n_learners)]
                self.learners: Any = VirtualLearners(clock, self.tau_m, n_learners=cfg.n_learners, mode=cfg.learner_mode,
                                                     tau_l=tau_l, learners=learners, state=self.state,
                                                     weights=self.weights, cfg=self.dqn,
                                                     restart_budget=self._budget())  # fmt: skip
            elif cfg.learner_backend == "ray":
                from nonstop.distributed.ray_learners import RayLearners

                self.learners = RayLearners(n_learners=cfg.n_learners, mode=cfg.learner_mode, obs_shape=self.obs_shape,
                                            n_actions=int(self.action_space.n), cfg=self.dqn, state=self.state,
                                            weights=self.weights, replay=self.replay, broadcast=self._broadcast,
                                            seed=cfg.seed, restart_budget=self._budget(), clock=clock, tau_m=self.tau_m)  # fmt: skip
            else:
                self.learners = LearnerProcesses(n_learners=cfg.n_learners, mode=cfg.learner_mode, obs_shape=self.obs_shape,
                                                 n_actions=int(self.action_space.n), cfg=self.dqn, state=self.state,
                                                 weights=self.weights, replay=self.replay, seed=cfg.seed,
                                                 restart_budget=self._budget(), clock=clock)  # fmt: skip
            self._parts.append(self.learners.stop)
            self.learners.start()
        else:
            self.agent = SequentialLearningAgent(self, order=cfg.interaction, tau_l=cfg.tau_l or 0.0)
            self._parts.append(self.agent.stop)
            self.agent.start()
        return self

    def _budget(self) -> RestartBudget:
        return RestartBudget(self.cfg.max_restarts, self.cfg.restart_window)

    # ------------------------------------------------------------------ self-play
    @property
    def opponent_n_inference(self) -> int | str:
        """The pool side's N_I: as the learner's is chosen, from the opponent's own latency."""
        cfg = self.cfg
        if cfg.scheduler == "sequential":
            return 1
        if cfg.n_inference == "auto":
            return "auto"
        return max(1, math.ceil(self.opponent_latency.mean / self.tau_m - 1e-9))

    def _opponent_policy(self, i: int) -> Any:
        """An opponent worker: ε-greedy on the snapshot playing the current match (always in this
        process: snapshots live here), with the pool side's declared latency."""
        from nonstop.policies.latency import LatencyPolicy
        from nonstop.selfplay import SnapshotPolicy

        seat = self.world.seat_index(self.self_play.opponent_seat)
        slot = self.world.slots[seat]
        space = self.world.action_spaces[self.self_play.opponent_seat]
        if not isinstance(space, gym.spaces.Discrete):  # check_two_seats: both seats as the learner's
            raise TypeError(f"the opponent seat needs a Discrete action space, got {space}")
        model = build_q_network(self.obs_shape, int(space.n), self.dqn)
        seed = self.cfg.seed * 1000 + 500 + i
        policy: Any = SnapshotPolicy(model, self.self_play.pool, lambda: int(slot.read().episode), space,
                                     epsilon=self.dqn.epsilon_end, seed=seed)  # fmt: skip
        if self.opponent_latency.max_hint > 0:
            policy = LatencyPolicy(policy, self.opponent_latency, seed=seed)
        return policy

    def _take_snapshot(self) -> None:
        """Add the learner's current parameters to the pool if a snapshot is due."""
        sp = self.self_play
        if sp is None or self.env_ticks < sp.next_tick:
            return
        params = np.empty(self.weights.n_params, np.float32)
        self.weights.read_into(params)  # one whole version, even while learners publish
        sp.take(params, env_tick=self.env_ticks, updates=self.state.updates)

    # ------------------------------------------------------------------ running
    def advance(self, seconds: float) -> None:
        """Let the world run ``seconds`` more, annealing ε as the ticks pass. Raises `PartFailed`
        once a learner or an inference worker has died more often than its restart budget allows."""
        end = self.world.now() + seconds
        step = min(seconds, 50 * self.tau_m)
        while self.world.now() < end - 1e-12:
            self.weights.epsilon = epsilon_at(self.tick_offset + self.world.slot.read().tick, self.dqn)
            until = min(end, self.world.now() + step)
            if self.self_play is not None:  # stop at the next snapshot's tick, so snapshots keep their interval
                self._take_snapshot()
                until = min(until, self.world.now() + max(1, self.self_play.ticks_to_next(self.env_ticks)) * self.tau_m)
            self.world.run_until(until)
            self.check_parts()
        self._take_snapshot()

    def check_parts(self) -> None:
        """Raise the `PartFailed` of a part that kept dying (learners first: the run cannot learn)."""
        for name in ("learners", "pool", "opponent_pool"):
            failure = getattr(getattr(self, name, None), "failure", None)
            if failure is not None:
                raise failure

    @property
    def updates(self) -> int:
        return self.state.updates

    @property
    def episodes_total(self) -> int:
        """Episodes finished in this run, earlier segments of a resumed run included."""
        return self.episode_offset + int(self.replay.episodes_finished)

    @property
    def env_ticks(self) -> int:
        return self.tick_offset + int(self.world.slot.read().tick)

    def quiesce(self) -> None:
        """Stop inference and learning (the world keeps its state) so a snapshot is exact."""
        for name in ("learners", "pool", "agent", "opponent_pool"):
            part = getattr(self, name, None)
            if part is not None:
                part.stop()

    def snapshot(self, *, include_replay: bool = True) -> dict[str, Any]:
        """Everything `restore` needs to continue: parameters, Adam moments, target network,
        counters, and (``include_replay``) the replay's contents. Tensors and plain values only."""
        import torch

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.array(a, copy=True))

        params = np.empty(self.weights.n_params, np.float32)
        self.weights.read_into(params)  # a complete version, even while learners run
        snap: dict[str, Any] = {
            "format": "nonstop.train/1",
            "config": self.cfg.to_dict(),
            "updates": self.state.updates,
            "env_ticks": self.env_ticks,
            "episodes": self.episode_offset + self.replay.episodes_finished,
            "target_version": self.state.target_version // 2 * 2,
            "params": t(params), "adam_m": t(self.state.adam_m), "adam_v": t(self.state.adam_v),
            "target": t(self.state.target),
        }  # fmt: skip
        if include_replay:  # taken while the host may write: see ReplayBuffer.snapshot
            snap["replay"] = {name: torch.from_numpy(a) for name, a in self.replay.snapshot().items()}
        if self.self_play is not None:  # the pool of snapshots: a resumed run plays the same opponents
            snap["self_play"] = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                                 for k, v in self.self_play.state().items()}  # fmt: skip
        return snap

    def restore(self, snap: dict[str, Any]) -> None:
        """Load a `snapshot` into a built (not yet started) run."""
        if snap.get("format") != "nonstop.train/1":
            raise ValueError(f"not a nonstop training checkpoint (format {snap.get('format')!r})")
        state = self.state
        for name in ("params", "adam_m", "adam_v", "target"):
            src = snap[name].numpy()
            if src.shape != state.params.shape:
                raise ValueError(f"checkpoint {name} has {src.shape[0]} numbers, this model {state.params.shape[0]}")
            getattr(state, name)[:] = src
        state.restore_counts(updates=int(snap["updates"]), target_version=int(snap["target_version"]))
        self.weights.publish(state.params)
        self.tick_offset = int(snap["env_ticks"])
        self.episode_offset = int(snap["episodes"])
        if self.self_play is not None:
            pool = snap.get("self_play")
            if pool is None:
                raise ValueError("the checkpoint holds no self-play pool: it was not written by a --self-play run")
            self.self_play.load_state({k: v.numpy() if hasattr(v, "numpy") else v for k, v in pool.items()})
        replay = snap.get("replay")
        if replay is not None and replay["frames"].shape == self.replay.frames.shape:
            self.replay.restore({name: tensor.numpy() for name, tensor in replay.items()})
            self.replay_restored = True
        else:
            # learners pace themselves by updates per transition: count only the updates made
            # on this (empty) replay, or they would wait for as many transitions as all earlier updates
            state.mark_update_base(int(snap["updates"]))
            self.replay_restored = False

    def teardown(self) -> None:
        if getattr(self, "state", None) is not None and not self.state.closed:
            self.final_updates = self.state.updates
        if getattr(self, "replay", None) is not None:
            self.final_episodes = self.episodes_total
        errors = []
        while self._parts:
            part = self._parts.pop()
            try:
                part()
            except Exception as exc:  # keep tearing down: nothing may be left behind
                errors.append(exc)
        if errors:
            raise errors[0]


class SequentialLearningAgent:
    """The paper's two sequential baselines: one loop that infers and learns in turn."""

    def __init__(self, run: TrainingRun, *, order: str, tau_l: float) -> None:
        self.run, self.order, self.tau_l = run, order, tau_l
        self.policy = run._policy(0)
        self.learner = run._learner(0)
        self._stop = False
        self.handle: Any = None

    def start(self) -> "SequentialLearningAgent":
        from nonstop.realtime.clock import VirtualClock, WallClock

        clock = self.run.world.clock
        if isinstance(clock, VirtualClock):  # is_virtual
            self.handle = clock.spawn(self._loop(), name="sequential-agent")
        elif isinstance(clock, WallClock):
            self.handle = WallClock(origin=clock.origin, spin=0.0).spawn(self._loop(), name="sequential-agent")
        else:
            raise TypeError(f"the sequential agent runs on a VirtualClock or a WallClock, got {type(clock).__name__}")
        return self

    def stop(self) -> None:
        self._stop = True
        join = getattr(self.handle, "join", None)
        if join is not None:
            join(timeout=10)
        close = getattr(self.policy, "close", None)  # a process-backed policy: reap its process
        if close is not None:
            close()

    def _learn(self, t: float) -> Generator[Wake, float, float]:  # a timed process's part; returns its time
        learner, run = self.learner, self.run
        out = learner.gradient() if learner.ready else None
        if out is not None:
            apply(run.state, run.weights, out[0], out[1], run.dqn)
        clock = run.world.clock
        if clock.is_virtual:
            t += self.tau_l if self.tau_l > 0 else (run.tau_m if out is not None else 0.0)
            if t > clock.now():
                yield t
            return t
        if self.tau_l > 0:
            yield clock.now() + self.tau_l
        return clock.now()

    def _loop(self) -> TimedProcess:
        from nonstop.realtime.clock import stopwatch

        world = self.run.world
        clock, slot, queue, tau_m = world.clock, world.slot, world.queue, world.tau_m
        virtual = clock.is_virtual
        t, last_seq = clock.now(), -1
        origin, grace = world.origin, clock.tick_grace
        while not self._stop:
            if virtual:
                # on a tick's deadline: let the host process that tick first, then read what it
                # publishes, as a real loop finishing just then would (`t` itself stays put)
                k = round((t - origin) / tau_m)
                due = origin + k * tau_m + grace  # the host's own expression for this tick's time
                if abs(t - (due - grace)) <= grace and clock.now() < due:
                    yield (due, _AFTER_TICK)
            latest = slot.read()
            if latest.seq == last_seq:  # already acted on this one: wait for the next tick
                t = latest.time + tau_m
                yield (t + clock.tick_grace, _AFTER_TICK) if virtual else t + 2e-4
                t = t if virtual else clock.now()
                continue
            last_seq = latest.seq
            if self.order == "learn_then_infer":
                t = yield from self._learn(t)
            started = t
            t0 = stopwatch()
            decision = self.policy.act(latest.obs)
            if virtual:
                t = started + decision.latency
            else:
                t = started + (stopwatch() - t0) + decision.latency
            if t > clock.now():
                yield t
            if not virtual:
                t = clock.now()
            queue.submit(decision.action, obs_tick=latest.tick, episode=latest.episode, worker=0,
                         tau_theta=t - started, submit_time=t)  # fmt: skip
            if self.order == "infer_then_learn":
                t = yield from self._learn(t)


def train(
    cfg: TrainConfig,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    progress_every: float = 5.0,
) -> dict[str, Any]:
    """Run ``cfg`` to the end and return what happened (summary, returns, updates).

    ``on_progress(row)`` is called every ``progress_every`` world seconds.
    Everything started is stopped and every segment unlinked, even on Ctrl-C.
    """
    from nonstop.metrics.timing import episode_returns, summarize

    run = TrainingRun(cfg)
    started = time.monotonic()
    matches: list[dict[str, Any]] = []
    try:
        run.build().start()
        rows = ProgressRows(run, started)
        done = 0.0
        while done < cfg.seconds - 1e-12:
            chunk = min(progress_every, cfg.seconds - done)
            run.advance(chunk)
            done += chunk
            if on_progress is not None or run.self_play is not None:
                finished = rows.episodes()
                if run.self_play is not None:
                    matches += run.self_play.match_rows(finished, run.episode_offset)
                if on_progress is not None:
                    on_progress(rows.progress())
    finally:
        run.teardown()
    log = run.world.tick_log
    returns = episode_returns(log)
    summary = summarize(log)
    return {
        "config": cfg.to_dict(),
        "ticks": len(log),
        "updates": run.final_updates,
        "transitions": run.recorder.transitions if run.world.is_virtual else None,
        "episode_returns": returns,
        "summary": summary,
        "tick_log": log,
        "wall_s": time.monotonic() - started,
        "n_inference": run.n_inference,
        **({"matches": matches, "snapshots": run.self_play.pool.ids} if run.self_play is not None else {}),
    }


class ProgressRows:
    """Turns a run's shared counters into progress rows (differences over each interval) and
    finished-episode rows; the same on both clocks, since the host's recorder keeps the counts
    in the replay's shared header.

    ``wall_offset`` is the wall time the run had already spent before this segment (a resumed
    run's last ``wall_s`` on disk), so ``wall_s`` keeps counting across ``--resume`` the way
    ``env_ticks`` does and "return over wall time" draws one run, not two overlaid."""

    def __init__(self, run: TrainingRun, wall0: float, wall_offset: float = 0.0) -> None:
        if not (isinstance(wall_offset, (int, float)) and math.isfinite(wall_offset) and wall_offset >= 0):
            raise ValueError(f"wall_offset must be a finite number of seconds >= 0, got {wall_offset!r}")
        self.run, self.wall0 = run, wall0 - float(wall_offset)  # wall_s = now - wall0 = offset + segment time
        self.prev = (0, 0, 0, run.state.updates, wall0)
        self.returns: list[float] = []
        self.seen_episodes = 0

    def episodes(self) -> list[dict[str, Any]]:
        out = []
        run = self.run
        for i, end_tick, ret, length in run.replay.episodes_since(self.seen_episodes):
            out.append({"episode": run.episode_offset + i, "end_tick": run.tick_offset + end_tick,
                        "wall_s": round(time.monotonic() - self.wall0, 3), "return": ret, "length_ticks": length})  # fmt: skip
            self.returns.append(ret)
        self.seen_episodes = run.replay.episodes_finished
        return out

    def progress(self) -> dict[str, Any]:
        run = self.run
        ticks, agent, delay_sum = run.replay.tick_counters()
        updates, now = run.state.updates, time.monotonic()
        p_ticks, p_agent, p_delay, p_updates, p_wall = self.prev
        d_ticks, d_agent = ticks - p_ticks, agent - p_agent
        self.prev = (ticks, agent, delay_sum, updates, now)
        nan = float("nan")
        return {
            "wall_s": round(now - self.wall0, 3),
            "env_ticks": run.tick_offset + ticks,
            "episodes": run.episode_offset + run.replay.episodes_finished,
            "tau_i_mean_ticks": d_ticks / d_agent if d_agent else nan,
            "inaction_frac": (d_ticks - d_agent) / d_ticks if d_ticks else nan,
            "delay_mean_ticks": (delay_sum - p_delay) / d_agent if d_agent else nan,
            "updates": updates,
            "updates_per_s": (updates - p_updates) / (now - p_wall) if now > p_wall else nan,
            "transitions": run.replay.transitions_written,
            "recent_return": float(np.mean(self.returns[-20:])) if self.returns else nan,
            "epsilon": run.weights.epsilon,
            "loss": run.state.loss if updates else nan,
        }
