"""Team self-play: a learning team against snapshots of itself in a many-seat world (issue 32, item 4).

``nonstop train --self-play`` on a world of more than two seats in teams (``multi/battle``: ``red_*``
against ``blue_*``; a seat's team is `nonstop.envs.seats.team_of`) runs here, on the virtual clock:

* **One θ per team, one forward pass per tick for the team.** The learning team (the first team) is
  acted for by one `TeamActor`: at every tick it reads every living seat's newest observation,
  computes all their actions in one batched forward pass of the team's Q-network, and submits each
  seat's action to be applied ``latency`` ticks later (the declared τ_θ). One pass a tick whose
  actions land τ_θ later is N_I = ⌈τ_θ/τ_M⌉ staggered lanes per seat (the paper's N_I*): no seat
  is idle, every action is τ_θ late. The tick log records it seat by seat.
* **Every agent's transitions in one replay.** Each seat's experience is its own induced delayed
  semi-MDP (Definition 1 at one-tick decisions): the decision computed on the observation of tick
  k is applied at tick k + d, so its transition is ``(o_k, a_k, r_{k+d}, o_{k+1})``, done when the
  agent died at tick k + d; a seat's pending decisions are dropped when its agent leaves the
  world or the episode ends. All seats of the team write into one replay (each agent's returns over
  ``n_step`` ticks) and one DQN learns from it (`nonstop.experiment.teamlearn`: by default GridConv
  over the agent's whole view; Huber loss, target network, Adam; updates inline on the virtual
  clock, which times inference only).
* **Snapshots.** Every ``snapshot_every`` world seconds the team's parameters join a pool of the
  newest ``pool_size`` (snapshot 0: the untrained network); each episode the other team is played
  by one snapshot, drawn ``uniform`` or ``latest`` (`nonstop.experiment.selfplay.SnapshotPool`),
  acting ε-greedily (the learner's final ε) with the same latency.
* **Tried, then judged against a random team.** After ``seconds`` of self-play, learning stops: the
  run plays ``trial_episodes`` trial episodes against a uniformly random team, one a candidate θ
  (snapshots spread over the run and the last θ, `nonstop.experiment.teamtrials`), and then
  `nonstop.experiment.teamstats.RECENT_MATCHES` more, the judged ones, with the candidate that did
  best in its trial (greedy but for ε_end; nothing either kind of episode sees reaches the replay or
  an update). The judged episodes are never the trials, so the report's last figures are the bar.
* **The batch grows with the team** (`nonstop.experiment.teamtrials.team_batch_size`): at least a
  fixed share of the transitions a tick of many agents makes is sampled.

``RUN/teams.csv`` (`nonstop.experiment.teamstats`) gets a row per team and episode: kills, deaths,
survivors, return, won; ``RUN/ticklog/`` the tick log (every seat's inaction and delay);
``RUN/config.json`` and ``RUN/summary.json``. ``nonstop report RUN`` draws each team's rates over time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.envs.seats import team_seats
from nonstop.experiment.seating import agent_ids, is_team_world
from nonstop.experiment.selfplay import Snapshot, SnapshotPool
from nonstop.experiment.teamlearn import TeamLearner, TeamReplay, build_qnet, check_team_replay_fits
from nonstop.experiment.teamtrials import best_trial, team_batch_size, trial_picks
from nonstop.experiment.teamstats import (
    RECENT_MATCHES,
    TEAMS_FILE,
    EpisodeEnd,
    TeamTally,
    team_row,
    write_team_rows,
)

__all__ = [
    "TeamPlayConfig",
    "TeamReplay",
    "TeamActor",
    "TeamSelfPlaySeating",
    "team_seats",
    "train_teams",
    "is_team_world",
]

#: after the host's tick (priority 1): the actor reads what that tick published
READ_PRIORITY: Final = 2
#: before the host's tick: a submission due at a tick is applied at it
SUBMIT_PRIORITY: Final = 0


@dataclass
class TeamPlayConfig:
    """What a team self-play run needs (``nonstop train`` builds it from its flags: `from_train_config`)."""

    env: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 300.0  #: world seconds of self-play (then the judged episodes against random)
    latency_ticks: int = 1  #: τ_θ of the team's forward pass, in ticks (>= 1)
    opponents: str = "uniform"
    pool_size: int = 8
    snapshot_every: float = 30.0  #: world seconds between snapshots
    seed: int = 0
    gamma: float = 0.99
    lr: float = 1e-3
    batch_size: int = 64
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_ticks: int = 20_000
    target_update: int = 500
    learning_starts: int = 1_000
    update_every: int = 4  #: ticks between DQN updates (one batch each)
    replay_capacity: int = 50_000
    hidden: int = 128
    arch: str = (
        "gridconv"  #: the Q-network (`nonstop.experiment.teamlearn.build_qnet`): ``mlp``, ``conv``, ``gridconv``
    )
    n_step: int = 3  #: each agent's returns over n ticks (`nonstop.experiment.teamlearn.NStepReturns`)
    double: bool = False  #: double DQN targets
    judge_episodes: int = RECENT_MATCHES
    #: trial episodes before the judged ones, one a candidate θ (`nonstop.experiment.teamtrials`); 0: judge the last θ
    trial_episodes: int = RECENT_MATCHES
    agent_id: str = "none"  #: ``--agent-id``: each seat's identity beside its observation (none, index, onehot)

    @classmethod
    def from_train_config(cls, cfg: Any, tick_hz: float) -> "TeamPlayConfig":
        """From a `nonstop.experiment.config.TrainConfig` (its DQN settings, self-play flags, latency); the
        registry's ``team_self_play`` seating refuses a config it cannot run (the wall clock, another --algo)."""
        from nonstop.policies.latency import parse_latency

        latency = parse_latency(cfg.latency, tick_hz=tick_hz)
        ticks = max(1, math.ceil(float(latency.mean) * tick_hz - 1e-9))
        dqn = cfg.algo_settings.for_run(round(float(cfg.seconds) * tick_hz))  # a DQNConfig; unset ε: a share of the run
        return cls(
            env=cfg.env,
            env_kwargs=dict(cfg.env_kwargs),
            seconds=float(cfg.seconds),
            latency_ticks=ticks,
            opponents=cfg.opponents,
            pool_size=cfg.pool_size,
            trial_episodes=RECENT_MATCHES if cfg.trials is None else cfg.trials,
            snapshot_every=cfg.snapshot_every,
            seed=int(cfg.seed),
            gamma=dqn.gamma,
            lr=dqn.lr,
            batch_size=dqn.batch_size,
            epsilon_start=dqn.epsilon_start,
            epsilon_end=dqn.epsilon_end,
            epsilon_ticks=dqn.epsilon_ticks,
            target_update=dqn.target_update,
            learning_starts=dqn.learning_starts,
            replay_capacity=_team_replay_capacity(dqn, cls.replay_capacity),
            hidden=int(dqn.hidden[0]) if dqn.hidden else 128,
            double=bool(dqn.double),
            agent_id=cfg.agent_id,
        )


def _team_replay_capacity(dqn: Any, team_default: int) -> int:
    """The team replay's capacity: the one chosen (``--replay-capacity``, a hyperparameter file, a preset),
    else the team's own default (float16 windows: 50,000 of 13×13×5 are 162 MiB, where DQN's default of 1M
    would be 3.2 GiB); the door checks that it fits (`check_team_replay_fits`). DQN's default itself,
    1,000,000, reads as unset (the settings do not say who chose it): the run's first line shows the size."""
    import dataclasses

    default = {f.name: f.default for f in dataclasses.fields(dqn)}["replay_capacity"]
    return int(dqn.replay_capacity) if dqn.replay_capacity != default else int(team_default)


class TeamActor:
    """Acts for every living seat of one team, one batched forward pass a tick (see the module docstring).

    ``choose(obs_batch, episode) -> actions`` picks the team's actions. With ``on_transition``, every
    seat's one-tick transitions go to it as ``(seat, obs, action, reward, next_obs, died)``, each seat's
    in order, and ``on_seat_end(seat, died)`` follows a seat's last one of an episode (its agent left
    the world, or the episode ended). ``agent_id`` (an `AgentId`): the batch ``choose`` gets carries each
    seat's identity (its place in ``seats``); the transitions keep the world's observations. A timed
    process on the world's clock.
    """

    def __init__(
        self,
        world: Any,
        seats: list[int],
        choose: Callable[[np.ndarray, int], np.ndarray],
        latency_ticks: int,
        *,
        on_transition: Callable[[int, np.ndarray, int, float, np.ndarray, bool], None] | None = None,
        on_seat_end: Callable[[int, bool], None] | None = None,
        on_tick: Callable[[int], None] | None = None,
        agent_id: Any = None,
    ) -> None:
        if latency_ticks < 1:
            raise ValueError(f"latency_ticks must be >= 1, got {latency_ticks}")
        self.world, self.seats, self.choose, self.d = world, seats, choose, latency_ticks
        self.on_transition, self.on_seat_end, self.on_tick = on_transition, on_seat_end, on_tick
        self.agent_id = agent_id if agent_id is not None and agent_id.active else None
        # per seat: decisions awaiting their reward, (obs tick, obs, action), oldest first
        self.pending: list[deque[tuple[int, np.ndarray, int]]] = [deque() for _ in seats]
        self.totals = [0.0] * len(seats)
        self.episode = -1
        self.forwards = 0

    def process(self) -> Generator[Any, float, None]:
        """Each tick: read every seat, settle the decisions that landed, one forward pass for the living seats,
        and one clock event that submits all their actions when they are due (the seats in order)."""
        world, tau_m = self.world, self.world.tau_m
        slots = [world.slots[i] for i in self.seats]
        queues = [world.queues[i] for i in self.seats]
        clock = world.clock
        keep = self.on_transition is not None  # a team that records nothing keeps no pending decisions
        wake = clock.now()
        last_tick = -1
        while True:
            woke = yield (wake, READ_PRIORITY)
            wake = woke + tau_m
            first = slots[0].read()
            if first.tick == last_tick:  # no tick since the last read (the world has not started)
                continue
            # this tick's windows in one fresh array: the batch, and the rows the pending decisions keep
            frame = np.empty((len(slots), *first.obs.shape), first.obs.dtype)
            frame[0] = first.obs
            reads = [first] + [slot.read(frame[j]) for j, slot in enumerate(slots[1:], 1)]
            reads[0] = first._replace(obs=frame[0])
            last_tick = now_tick = first.tick
            episode = first.episode
            if episode != self.episode:  # a new world: whatever was pending belonged to the last one
                self.episode = episode
                for j, p in enumerate(self.pending):
                    p.clear()
                    if self.on_seat_end is not None:
                        self.on_seat_end(j, False)
                self.totals = [r.total_reward for r in reads]
            live = []
            totals = self.totals
            for j, r in enumerate(reads):
                gone = r.terminated or r.truncated
                if keep:
                    self._settle(j, r, r.total_reward - totals[j], gone)
                totals[j] = r.total_reward
                if not gone:
                    live.append(j)
            if live:
                rows = np.array(live)
                batch = frame if len(live) == len(reads) else frame[rows]
                if self.agent_id is not None:  # the team's one network told which seat each row is
                    batch = self.agent_id(batch, rows)
                actions = [int(a) for a in self.choose(batch, episode)]
                self.forwards += 1
                if keep:
                    for j, a in zip(live, actions):
                        self.pending[j].append((now_tick, frame[j], a))
                # tick j is stepped at origin + j·τ_M, after submissions due then: applied at tick now_tick + d
                due = max(clock.now(), world.origin + (now_tick + self.d) * tau_m)
                submit = _submitter([queues[j] for j in live], actions, now_tick, episode, self.d * tau_m)
                clock.call_at(due, submit, priority=SUBMIT_PRIORITY)
            if self.on_tick is not None:
                self.on_tick(now_tick)

    def _settle(self, j: int, read: Any, reward: float, gone: bool) -> None:
        """Seat ``j``'s decision whose action was applied at this tick gets this tick's reward."""
        pending = self.pending[j]
        while pending and pending[0][0] + self.d < read.tick:
            pending.popleft()  # applied before this tick without a read between (cannot happen at one read a tick)
        if pending and pending[0][0] + self.d == read.tick:
            _, obs, action = pending.popleft()
            next_obs = pending[0][1] if pending else read.obs
            self.on_transition(j, obs, action, reward, next_obs, bool(read.terminated))  # type: ignore[misc]
        if gone:
            pending.clear()
            if self.on_seat_end is not None:
                self.on_seat_end(j, bool(read.terminated))


def _submitter(
    queues: list[Any], actions: list[int], obs_tick: int, episode: int, tau_theta: float
) -> Callable[[], None]:
    """One clock event for a team's tick: each living seat's action into its queue, the seats in order."""

    def submit() -> None:
        for queue, action in zip(queues, actions):
            queue.submit(action, obs_tick=obs_tick, episode=episode, tau_theta=tau_theta)

    return submit


# ----------------------------------------------------------------------------- the run


def train_teams(cfg: TeamPlayConfig, out: str | Path, *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Team self-play for ``cfg.seconds`` world seconds, then ``cfg.judge_episodes`` episodes against
    a uniformly random team; writes the run directory ``out`` and returns its summary."""
    import torch

    torch.set_num_threads(1)
    _replay_fits(cfg)  # a replay too large is refused before anything is written
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"team_self_play": True, **cfg.__dict__}, indent=2, default=str))
    if (out / TEAMS_FILE).exists():
        (out / TEAMS_FILE).unlink()
    world, tallies, tick_hz = _team_world(cfg, out)
    started = time.perf_counter()
    with world:
        match = _TeamMatch(cfg, world, tallies, tick_hz, out / TEAMS_FILE, echo)
        match.play()
    summary = match.summary(len(world.tick_log), time.perf_counter() - started)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    ids = match.ids
    torch.save(
        {
            "q": match.judged_net().state_dict(),  # the θ the judged episodes played
            "last_q": match.learner.q.state_dict(),
            "pool": match.pool.state(),
            "agent_id": None if ids is None else ids.to_dict(),
        },
        out / "team_q.pt",
    )
    return summary


def _replay_fits(cfg: TeamPlayConfig) -> None:
    """`nonstop.experiment.teamlearn.check_team_replay_fits` on the learning team's windows, read off the world
    built once (not reset) before the run's directory is made."""
    from nonstop.envs import make_env

    env: Any = make_env(cfg.env, **{k: v for k, v in cfg.env_kwargs.items() if k != "tick_hz"})  # a seat world
    try:
        shape = tuple(env.observation_space(env.possible_agents[0]).shape or ())
    finally:
        env.close()
    check_team_replay_fits(cfg.replay_capacity, shape)


def _team_world(cfg: TeamPlayConfig, out: Path) -> tuple[Any, list[TeamTally], float]:
    """The world on the virtual clock, each episode's env wrapped in a `TeamTally` (the list grows as the
    session builds them), and its tick rate."""
    from nonstop.envs import env_info, make_env
    from nonstop.realtime.host import Session

    tallies: list[TeamTally] = []

    def build(**kwargs: Any) -> Any:  # a seat world (Session's EnvSource names gymnasium's Env)
        tally = TeamTally(make_env(cfg.env, **kwargs))
        tallies.append(tally)
        return tally

    build.__name__ = cfg.env  # the tick log's env id
    kwargs = dict(cfg.env_kwargs)
    tick_hz = float(kwargs.pop("tick_hz", None) or env_info(cfg.env, **cfg.env_kwargs).tick_hz)
    world = Session(build, clock="virtual", seed=cfg.seed, env_kwargs=kwargs, tick_hz=tick_hz, log_dir=out / "ticklog")
    return world, tallies, tick_hz


class _TeamMatch:
    """One team self-play run inside its world: the learning team against the pool's snapshots, then, once
    ``judge_from`` is set, against a random team with learning frozen (see the module docstring)."""

    def __init__(
        self, cfg: TeamPlayConfig, world: Any, tallies: list[TeamTally], tick_hz: float, teams_file: Path, echo: Any
    ) -> None:
        self.cfg, self.world, self.tallies, self.teams_file, self.echo = cfg, world, tallies, teams_file, echo
        self.tick_hz = tick_hz
        seats = list(world.seats or [])
        self.teams = team_seats(seats)
        if len(self.teams) < 2:
            raise ValueError(f"--self-play on a team world needs two teams; {cfg.env}'s seats are all {seats[0]}'s")
        self.names = list(self.teams)
        self.mine, self.theirs = self.names[0], self.names[1]
        first = seats[self.teams[self.mine][0]]
        n_actions = int(world.action_spaces[first].n)
        obs_shape = tuple(world.observation_spaces[first].shape or ())
        self.ids = agent_ids(cfg.agent_id, seats, cfg.env)  # each seat's place in its team, where --agent-id asks
        agents = len(self.teams[self.mine])
        #: the learner's batch: ``batch_size``, larger for a team whose ticks make many transitions
        self.batch_size = team_batch_size(cfg.batch_size, cfg.update_every, agents)
        learner_cfg = dataclasses.replace(cfg, batch_size=self.batch_size)
        self.learner = TeamLearner(learner_cfg, obs_shape, n_actions, agent_id=self.ids)  # refuses a replay too large
        replay = self.learner.replay
        echo(
            f"{len(seats)} agents, {self.mine} learning ({agents} agents); its replay: {replay.capacity:,} transitions "
            f"of {obs_shape} float16 windows, {replay.nbytes / 2**20:,.0f} MiB (about {replay.capacity / agents:,.0f} "
            f"ticks of its agents' experience); batches of {self.batch_size:,} every {cfg.update_every} ticks"
        )
        self.opponent_net = build_qnet(self.learner.net_shape, n_actions, cfg.hidden, cfg.arch)
        self.pool = SnapshotPool(cfg.pool_size, cfg.opponents, seed=cfg.seed)
        #: every snapshot taken, the pool's and those it let go: the trials' candidates
        self.archive = [self.pool.add(self.learner.flat(), env_tick=0, updates=0)]
        #: the net the learning team plays a trial or the judged episodes with, and which θ it holds
        self.player_net = build_qnet(self.learner.net_shape, n_actions, cfg.hidden, cfg.arch)
        self.player_holds: int | None = None
        #: the first world episode played against a random team, and the first judged one (set when self-play ends)
        self.trial_from: int | None = None
        self.judge_from: int | None = None
        self.trials: list[Snapshot] = []  # each trial episode's candidate, in order
        self.trial_results: dict[int, tuple[int, int]] = {}  # trial episode -> (kills, deaths)
        self.judged_theta: Snapshot | None = None  # the candidate the judged episodes play (None: the last θ)
        self.tick = 0
        self.loaded, self.episode, self.self_play_episodes = -1, 0, 0
        self.players: dict[int, str] = {}  # world episode -> who played the other team
        self.snapshot_ticks = max(1, round(cfg.snapshot_every * tick_hz))
        self.rows: list[dict[str, Any]] = []
        self.started = time.perf_counter()

    def play(self) -> None:
        """Self-play for ``seconds``, then the judged episodes (a world that never ends one still stops)."""
        cfg, world = self.cfg, self.world
        actors = [
            TeamActor(
                world,
                self.teams[self.mine],
                self.choose_mine,
                cfg.latency_ticks,
                on_transition=self.record,
                on_seat_end=self.seat_end,
                on_tick=self.on_tick,
                agent_id=self.ids,
            ),
            TeamActor(world, self.teams[self.theirs], self.choose_theirs, cfg.latency_ticks, agent_id=self.ids),
        ]
        for actor, name in zip(actors, (self.mine, self.theirs)):
            world.clock.spawn(actor.process(), name=f"team {name}", priority=READ_PRIORITY)
        world.run_for(cfg.seconds)
        self.self_play_episodes = self.episode
        self.trial_from = world.slots[0].read().episode + 1  # the episode under way ends as it began
        self.trials = self._candidates()
        self.judge_from = self.trial_from + len(self.trials)
        budget = world.now() + 3600.0 + 60.0 * len(self.trials)
        while self.episode < self.judge_from + cfg.judge_episodes and world.now() < budget:
            world.run_for(10.0)

    def _candidates(self) -> list[Snapshot]:
        """The trial episodes' θs: up to ``trial_episodes`` of the snapshots that learned something and the
        last θ, spread over the run (`nonstop.experiment.teamtrials.trial_picks`)."""
        if self.cfg.trial_episodes < 1:
            return []
        learner = self.learner
        learned = [s for s in self.archive if s.updates > 0]
        if not learned or learned[-1].updates != learner.updates:  # the last θ, unless the newest snapshot is it
            learned.append(Snapshot(self.pool.next_id, self.tick, learner.updates, learner.flat()))
        return [learned[i] for i in trial_picks(len(learned), self.cfg.trial_episodes)]

    def judged(self, episode: int) -> bool:
        return self.judge_from is not None and episode >= self.judge_from

    def against_random(self, episode: int) -> bool:  # a trial or a judged episode
        return self.trial_from is not None and episode >= self.trial_from

    def learning(self) -> bool:  # self-play only: the trials and judged episodes measure what it learned, frozen
        return self.trial_from is None

    def choose_mine(self, obs: np.ndarray, episode: int) -> np.ndarray:
        learner = self.learner
        if not self.against_random(episode):
            return learner.act(obs, learner.epsilon())
        net = self._net_for(self._theta_for(episode))
        actions = learner.greedy(net, obs)
        explore = learner.rng.random(len(actions)) < self.cfg.epsilon_end
        actions[explore] = learner.rng.integers(0, learner.n_actions, int(explore.sum()))
        return actions

    def judged_net(self) -> Any:
        """The Q-network holding the judged θ (the learner's own where that is the last θ)."""
        return self._net_for(self.judged_theta)

    def _net_for(self, theta: Snapshot | None) -> Any:
        """The learner's Q-network for the last θ (None), else the player's net holding ``theta``."""
        if theta is None or theta.updates == self.learner.updates:
            return self.learner.q
        if self.player_holds != theta.id:
            import torch
            from torch.nn.utils import vector_to_parameters

            vector_to_parameters(torch.as_tensor(theta.params), self.player_net.parameters())
            self.player_holds = theta.id
        return self.player_net

    def _theta_for(self, episode: int) -> Snapshot | None:
        """The θ the learning team plays ``episode`` (a trial or judged one) with; None: the last θ."""
        assert self.trial_from is not None and self.judge_from is not None
        if episode < self.judge_from:
            return self.trials[episode - self.trial_from]
        if self.trials and self.judged_theta is None:
            self._take_finished()  # the last trial ended as this episode began: its row first
            results = [self.trial_results.get(self.trial_from + i, (0, 1 << 30)) for i in range(len(self.trials))]
            best = best_trial(results)
            self.judged_theta, (kills, deaths) = self.trials[best], results[best]
            self.echo(
                f"judged θ: {_theta_name(self.judged_theta, self.learner.updates)} ({self.judged_theta.updates:,} "
                f"updates), the best of {len(self.trials)} trials against a random team ({kills} kills, {deaths} deaths)"
            )
        return self.judged_theta

    def choose_theirs(self, obs: np.ndarray, episode: int) -> np.ndarray:
        import torch
        from torch.nn.utils import vector_to_parameters

        learner = self.learner
        if self.against_random(episode):
            self.players[episode] = "random"
            return learner.rng.integers(0, learner.n_actions, len(obs))
        snap = self.pool.opponent_for(episode)
        if self.loaded != snap.id:
            vector_to_parameters(torch.as_tensor(snap.params), self.opponent_net.parameters())
            self.loaded = snap.id
        self.players[episode] = f"snapshot {snap.id}"
        actions = learner.greedy(self.opponent_net, obs)
        explore = learner.rng.random(len(actions)) < self.cfg.epsilon_end
        actions[explore] = learner.rng.integers(0, learner.n_actions, int(explore.sum()))
        return actions

    def record(self, seat: int, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, died: bool) -> None:
        if self.learning():
            self.learner.add(seat, obs, action, reward, next_obs, died)

    def seat_end(self, seat: int, died: bool) -> None:
        if self.learning():
            self.learner.end(seat, died)

    def on_tick(self, tick: int) -> None:
        """Learn (every ``update_every`` ticks), snapshot, and write each finished episode's rows."""
        learner = self.learner
        self.tick = tick
        if self.learning():
            learner.ticks = tick
            if tick % self.cfg.update_every == 0:
                learner.update()
            if tick and tick % self.snapshot_ticks == 0:
                self.archive.append(self.pool.add(learner.flat(), env_tick=tick, updates=learner.updates))
        self._take_finished()

    def _take_finished(self) -> None:
        for deaths, returns in self.tallies[-1].take_finished():
            self._episode_ended(self.tick, deaths, returns)

    def _episode_ended(self, tick: int, deaths: dict[str, int], returns: dict[str, float]) -> None:
        kills = self.tallies[-1].kills(deaths)
        mine = "learner"
        if self.against_random(self.episode) and not self.judged(self.episode):  # a trial: its θ and result
            self.trial_results[self.episode] = (kills[self.mine], deaths[self.mine])
            theta = self.trials[self.episode - (self.trial_from or 0)]
            mine = f"trial {_theta_name(theta, self.learner.updates)}"
        who = {self.mine: mine, self.theirs: self.players.pop(self.episode, "β")}
        end = EpisodeEnd(self.episode, tick, time.perf_counter() - self.started)
        new = [
            team_row(
                end,
                team,
                who.get(team, "β"),
                seats=len(self.teams[team]),
                deaths=deaths[team],
                kills=kills[team],
                score=returns[team],
            )
            for team in self.names
        ]
        write_team_rows(self.teams_file, new)
        self.rows.extend(new)
        self.episode += 1
        me, learner = new[0], self.learner
        self.echo(
            f"episode {me['episode']}: {self.mine} ({mine}) {me['kills']} kills, {me['deaths']} deaths against "
            f"{who[self.theirs]}; ε {learner.epsilon():.2f}, {learner.updates:,} updates, {end.wall_s:.0f} s"
        )

    def summary(self, ticks: int, wall: float) -> dict[str, Any]:
        """``summary.json``: the run's counts and the judged episodes' win rate, kills and deaths."""
        rows, mine, theirs = self.rows, self.mine, self.theirs
        random_episodes = {r["episode"] for r in rows if r["team"] == theirs and r["player"] == "random"}
        judged = [r for r in rows if r["team"] == mine and r["player"] == "learner" and r["episode"] in random_episodes]
        judged = judged[-self.cfg.judge_episodes :]
        theta = self.judged_theta

        def mean(key: str) -> float | None:
            return float(np.mean([r[key] for r in judged])) if judged else None

        return {
            "finished": True,
            "wall_s": round(wall, 1),
            "world_s": round(ticks / self.tick_hz, 1),
            "env_ticks_total": ticks,
            "episodes": self.episode,
            "self_play_episodes": self.self_play_episodes,
            "updates": self.learner.updates,
            "transitions": self.learner.replay.written,
            "snapshots": self.pool.next_id,
            "learning_team": mine,
            "judged_episodes": len(judged),
            "judged_win_rate": mean("won"),
            "judged_kills_mean": mean("kills"),
            "judged_deaths_mean": mean("deaths"),
            "batch_size": self.batch_size,
            "trial_episodes": len(self.trial_results),
            "judged_theta": {
                "snapshot": None if theta is None or theta.updates == self.learner.updates else theta.id,
                "updates": self.learner.updates if theta is None else theta.updates,
                "env_tick": self.tick if theta is None else theta.env_tick,
            },
        }


def _theta_name(theta: Snapshot, last_updates: int) -> str:
    return "the last θ" if theta.updates == last_updates else f"snapshot {theta.id}"


class TeamSelfPlaySeating:
    """Team self-play as the registry's ``team_self_play`` seating: what ``--self-play`` runs in a world of
    teams (`nonstop.experiment.registry.stand_in`). It runs alone (`train`), not as a
    `nonstop.experiment.run.Run`: its own loop on the virtual clock and its own run directory."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def train(self, rec: Any, console: Any) -> tuple[dict[str, Any], Any, Path]:
        """Run ``train_teams`` into ``rec.out``; ``(summary, end, out)`` as
        `nonstop.experiment.record.train_in_directory` returns them."""
        from nonstop.envs import env_info
        from nonstop.experiment.ending import RunEnd

        if rec.resume:
            raise ValueError("team self-play does not resume (it keeps no checkpoints): start a new --out")
        if rec.out is None:
            raise ValueError("--self-play on a team world writes a run directory: add --out RUN")
        out = Path(rec.out)
        if (out / "ticklog").exists():
            raise ValueError(f"{out} already holds a run: choose a new --out")
        team_cfg = TeamPlayConfig.from_train_config(self.cfg, env_info(self.cfg.env, **self.cfg.env_kwargs).tick_hz)
        summary = train_teams(team_cfg, out, echo=lambda line: console.print(line, markup=False, highlight=False))
        won = summary["judged_win_rate"]
        console.print(
            f"done: {summary['env_ticks_total']:,} env ticks, {summary['episodes']} episodes, {summary['updates']:,} "
            f"updates, {summary['wall_s']} s; against a random team in the last {summary['judged_episodes']}: won "
            f"{'—' if won is None else f'{won:.0%}'}; `nonstop report {out}` draws the plots",
            markup=False,
        )
        return summary, RunEnd(), out
