"""Every seat of a world acted for through one batching server (docs/design.md §4b and §7).

At scale a seat is not a pool: it is a **lane** of one `BatchingServer`. `SeatLanes` gives each
seat of a `Session` ``n_inference`` request lanes (N_I staggered lanes per seat: lane ``k`` of every
seat starts at tick ``k``), and drives them from one timed process per ``k`` (a thread on the wall
clock, a process of the simulator on the virtual one), never a thread per seat: at each tick it
reads every present seat's newest observation straight into its team's block (one array a team,
a row a seat: no copy per seat beyond the slot's own), submits **one block request a team** (at
most the server's ``max_batch`` rows; `nonstop.inference.batching.Request`'s ``lanes``), and hands
each row's answer to its seat's action queue (``worker`` ``k``, τ_θ its request's whole time). The
server batches those blocks, EDF and sized by its latency curve (a block whole), so the seats of a
world ride one forward pass a team where the curve allows: at a thousand seats the driver makes
two requests a tick, not a thousand, and draws each team's exploration at once. Where the server
takes every block in one batch (its ``max_batch``), the blocks are queued together; where it takes
fewer, each block is submitted as soon as it is read, so one team's pass runs while the next team's
windows are read, and its actions reach their seats while the next pass runs. Each lane index acts again at the first tick after
its answers came, so more lanes a seat pay only where a round outlasts a tick (they pipeline over
it); where a round fits in a tick, a second lane index doubles the requests and each seat's newest
action wins (the others are counted superseded). A seat whose agent has left the world (its slot
reads terminated mid-episode) gets no request.

**One θ per team.** `TeamForward` is the server's forward over one model per team: each lane
belongs to its seat's team, a batch's rows are grouped by team and each team's model answers its
rows, one pass per team present in the batch (one pass when a single team is served). Where the
team's model is told which seat it acts for (``agent_id``, `nonstop.policies.agentid.AgentId`), each
row gets its lane's agent index (the seat's place in its team) added before the pass.

>>> from nonstop.inference.batching import BatchingServer
>>> from nonstop.inference.batchsize import LatencyCurve
>>> from nonstop.realtime.host import Session
>>> from nonstop.envs.duel import QuickDrawDuel
>>> world = Session(QuickDrawDuel, clock="virtual", tick_hz=60, seed=0).start()
>>> forward = TeamForward({"first": lambda x: np.ones(len(x), int), "second": lambda x: np.zeros(len(x), int)})
>>> server = BatchingServer(forward, LatencyCurve.linear(0.004, 0.001), clock=world.clock)
>>> lanes = SeatLanes(world, server, forward=forward).start()
>>> world.run_for(1.0); lanes.stop(); server.close(); _ = world.stop()
>>> s = world.tick_log.summary()["seats"]
>>> s["first_0"]["inaction_ticks"], s["first_0"]["delay_histogram"], server.report()["batch_sizes"]
(0, {1: 60}, {2: 60})
"""

from __future__ import annotations

import math
import threading
import traceback
from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from typing import Any, Final

import gymnasium
import numpy as np

from nonstop.envs.seats import team_of
from nonstop.inference.batching import BatchedPolicy, BatchingServer, Request
from nonstop.realtime.clock import Wake
from nonstop.realtime.deaths import Death, in_this_process, tell

__all__ = ["SeatLanes", "TeamForward"]

_AFTER_TICK: Final = 2  # virtual priority: wake after the host's tick at the same instant
_NEXT_OBSERVATION: Final = 2e-4  # on the wall clock, how long after a deadline its observation is surely out


class TeamForward:
    """A batching server's forward pass over one model per team (``forwards``: team → ``forward(batch)``),
    each row answered by its lane's team's model (`assign`). Called ``forward(batch, lanes)`` by the
    server (``takes_lanes``); ``passes`` counts the model calls, ``batches`` the server's calls. ``agent_id``:
    each row's agent identity added before its team's model sees it (see the module docstring)."""

    takes_lanes: Final = True

    def __init__(self, forwards: Mapping[str, Callable[[np.ndarray], Any]], *, agent_id: Any = None) -> None:
        if not forwards:
            raise ValueError("TeamForward needs at least one team's forward")
        for team, forward in forwards.items():
            if not callable(forward):
                raise TypeError(f"team {team!r}: forward must be callable, got {type(forward).__name__}")
        self.forwards: Final = dict(forwards)
        self._teams: Final = list(self.forwards)
        #: by lane: its team's index in `_teams` (-1: no team assigned) and its agent's place in that team
        self._team = np.full(0, -1, np.int64)
        self._agent = np.zeros(0, np.int64)
        self.agent_id: Final = agent_id if agent_id is not None and agent_id.active else None
        self.passes = 0
        self.batches = 0

    def assign(self, lane: int, team: str, agent: int = 0) -> None:
        """Lane ``lane`` is answered by ``team``'s model, for the team's agent ``agent``."""
        if team not in self.forwards:
            raise ValueError(f"no model for team {team!r}; the teams are {sorted(self.forwards)}")
        if lane >= len(self._team):  # grown by doubling: a lane's entries are array reads in __call__
            grow = max(lane + 1, 2 * len(self._team)) - len(self._team)
            self._team = np.concatenate([self._team, np.full(grow, -1, np.int64)])
            self._agent = np.concatenate([self._agent, np.zeros(grow, np.int64)])
        self._team[lane] = self._teams.index(team)
        self._agent[lane] = int(agent)

    def __call__(self, batch: np.ndarray, lanes: Sequence[int]) -> np.ndarray:
        self.batches += 1
        rows_lanes = np.asarray(lanes, np.int64)
        if rows_lanes.size and (rows_lanes.max() >= len(self._team) or (self._team[rows_lanes] < 0).any()):
            unknown = sorted({int(lane) for lane in rows_lanes if lane >= len(self._team) or self._team[lane] < 0})
            raise KeyError(f"lanes {unknown} have no team: TeamForward.assign each lane first")
        if self.agent_id is not None:
            batch = self.agent_id(batch, self._agent[rows_lanes])
        teams = self._team[rows_lanes]
        if (teams == teams[0]).all():
            self.passes += 1
            return self._actions(self.forwards[self._teams[teams[0]]](batch))
        out = np.zeros(len(rows_lanes), np.int64)
        for index in dict.fromkeys(teams.tolist()):  # the teams in the order the batch first names them
            rows = np.flatnonzero(teams == index)
            self.passes += 1
            out[rows] = self._actions(self.forwards[self._teams[index]](batch[rows]))
        return out

    @staticmethod
    def _actions(out: Any) -> np.ndarray:
        out = np.asarray(out)
        return out.argmax(axis=1) if out.ndim == 2 else out


class SeatLanes:
    """``n_inference`` request lanes of ``server`` for each of ``seats`` (default: every seat) of
    ``world`` (a started seat-world `Session`), driven as the module docstring says. ``forward``: the
    server's `TeamForward`, told each lane's team (``teams``: seat → team; default `team_of`).
    ``epsilon``: each lane's exploration (a number or a callable read per answer), or ``{team: that}``
    (every team named). `start`, then `stop` (idempotent); `failure` holds a driver's error."""

    def __init__(
        self,
        world: Any,
        server: BatchingServer,
        *,
        seats: Sequence[str] | None = None,
        n_inference: int = 1,
        forward: TeamForward | None = None,
        teams: Mapping[str, str] | None = None,
        epsilon: float | Callable[[], float] | Mapping[str, float | Callable[[], float]] = 0.0,
        seed: int = 0,
    ) -> None:
        if world.seats is None:
            raise ValueError("SeatLanes drives the seats of a seat world; a one-seat world takes an InferencePool")
        if isinstance(n_inference, bool) or not isinstance(n_inference, int) or n_inference < 1:
            raise ValueError(f"n_inference must be an int >= 1, got {n_inference!r}")
        names = list(world.seats) if seats is None else list(seats)
        unknown = [s for s in names if s not in world.seats]
        if unknown or not names:
            raise ValueError(f"no seats {unknown or names} in {world.env_id!r}; its seats are {world.seats}")
        self.world, self.server, self.n_inference = world, server, n_inference
        self.seats: Final = names
        self.index: Final = [world.seat_index(s) for s in names]
        team = {name: (teams or {}).get(name, team_of(name)) for name in names}
        members: dict[str, list[str]] = {}
        for name in names:
            members.setdefault(team[name], []).append(name)
        agent = {name: members[team[name]].index(name) for name in names}  # its place in its team
        if isinstance(epsilon, Mapping):
            missing = sorted({t for t in team.values() if t not in epsilon})
            if missing:
                raise ValueError(f"epsilon names no value for team(s) {missing}; it names {sorted(epsilon)}")
        #: each team's seats (their places in ``seats``), cut to blocks of at most the server's max_batch rows
        self.blocks: Final = [
            [names.index(name) for name in team_seats[i : i + server.max_batch]]
            for team_seats in members.values()
            for i in range(0, len(team_seats), server.max_batch)
        ]
        #: each block's exploration: its team's ε (a number, or a callable read per answer)
        self._epsilon = [
            epsilon[team[names[block[0]]]] if isinstance(epsilon, Mapping) else epsilon for block in self.blocks
        ]
        self._seed = seed
        #: lanes[k][j]: lane k of seat j
        self.lanes: list[list[BatchedPolicy]] = []
        for k in range(n_inference):
            row = []
            for j, name in enumerate(names):
                lane = server.lane(
                    world.action_spaces[name],
                    tau_m=world.tau_m,
                    origin=world.origin,
                    epsilon=epsilon[team[name]] if isinstance(epsilon, Mapping) else epsilon,
                    seed=seed * 100_003 + k * 10_007 + j,
                )
                if forward is not None:
                    forward.assign(lane.lane, team[name], agent[name])
                row.append(lane)
            self.lanes.append(row)
        self.requests = 0
        self.failure: BaseException | None = None
        #: a driver's death (it ends the run), said at once on stderr
        self.deaths: list[Death] = []
        self._stop = threading.Event()
        self._handles: list[Any] = []

    def start(self) -> "SeatLanes":
        clock = self.world.clock.for_threads(self._stop)
        for k in range(self.n_inference):
            self._handles.append(clock.spawn(self._drive(k), name=f"seat-lanes-{k}", priority=0))
        return self

    def _drive(self, k: int) -> Generator[Wake, float, None]:
        """Lane ``k`` of every seat: from tick ``k`` on, at each tick whose observation is out, a block
        request a team of its present seats with something new; each row's answer to its seat's queue."""
        world, server, lanes = self.world, self.server, self.lanes[k]
        clock, tau_m, origin = world.clock, world.tau_m, world.origin
        grace, threaded = clock.tick_grace, server.threaded
        slots = [world.slots[i] for i in self.index]
        queues = [world.queues[i] for i in self.index]
        last_seq = [-1] * len(lanes)
        # each block's frames are read into its rows (no allocation a tick); a request holds its rows until
        # answered, and they are read into again only after that (the next round)
        first = slots[0]
        frames = [np.empty((len(block), *first.shape), first.dtype) for block in self.blocks]
        lane_ids = [np.array([lanes[j].lane for j in block], np.int64) for block in self.blocks]
        rngs = [np.random.default_rng([self._seed, k, b]) for b in range(len(self.blocks))]
        # where the server takes every block in one batch they are queued together; where it takes fewer
        # (its max_batch), each goes as soon as it is read
        one_batch = sum(len(block) for block in self.blocks) <= server.max_batch
        newest = world.slots[-1]  # the host publishes the seats in order: this one's publish ends a tick's
        seen = -1
        tick = k
        try:
            while not self._stop.is_set():
                due = origin + tick * tau_m + grace
                yield (due + clock.real(_NEXT_OBSERVATION), _AFTER_TICK)
                while threaded and newest.seq == seen and clock.now() < due + tau_m and not self._stop.is_set():
                    yield (clock.now() + _NEXT_OBSERVATION, _AFTER_TICK)  # the world's step outlasted the wait
                seen = newest.seq
                fresh = []  # (block, its rows' seats, (tick, episode) of each row, the request)
                waiting = []  # the same, with the request's ticket once submitted
                for b, block in enumerate(self.blocks):
                    rows: list[int] = []
                    read: list[tuple[int, int]] = []
                    for j in block:
                        latest = slots[j].read(frames[b][len(rows)])
                        if latest.seq == last_seq[j] or latest.terminated or latest.truncated:
                            continue  # nothing new, or its agent has left (or the episode is between its publishes)
                        last_seq[j] = latest.seq
                        rows.append(j)
                        read.append((latest.tick, latest.episode))
                    if rows:
                        n = len(rows)
                        lane = lanes[rows[0]].request(frames[b][:n], min(t for t, _ in read))
                        ids = lane_ids[b] if n == len(block) else np.array([lanes[j].lane for j in rows], np.int64)
                        request = Request(
                            lane.lane, lane.obs, lane.obs_tick, lane.due_tick, lane.due, lane.submitted, ids
                        )
                        if one_batch:
                            fresh.append((b, rows, read, request))
                        else:  # its pass runs while the next block's windows are read
                            waiting.append((b, rows, read, server.submit(request)))
                with server.together():  # every team's block queued before a batch is taken: one batch
                    waiting += [(b, rows, read, server.submit(request)) for b, rows, read, request in fresh]
                self.requests += sum(len(rows) for _, rows, _, _ in waiting)
                for b, rows, read, ticket in waiting:
                    answer = server.wait(ticket) if threaded else (yield from server.wait_timed(ticket))
                    actions = self._explore(b, np.asarray(answer.action), rngs[b], lanes[rows[0]])
                    handed = clock.now()
                    for j, action, (obs_tick, episode) in zip(rows, actions.tolist(), read):
                        queues[j].submit(
                            action,
                            obs_tick=obs_tick,
                            episode=episode,
                            worker=k,
                            tau_theta=answer.tau_theta,
                            submit_time=handed,
                        )
                # the next tick whose observation is not yet out
                tick = max(tick + 1, math.floor((clock.now() - origin - grace) / tau_m) + 1)
        except BaseException as exc:
            if not self._stop.is_set() and not server.closed:
                self.failure = exc
                cause = "".join(traceback.format_exception_only(exc)).strip()
                death = Death(
                    f"seat lane driver {k}", in_this_process(), cause, restarted=False, why_not="the run stops"
                )
                self.deaths.append(death)
                tell(death.line())
            raise

    def _explore(self, b: int, actions: np.ndarray, rng: np.random.Generator, lane: BatchedPolicy) -> np.ndarray:
        """Block ``b``'s actions with its team's ε: each row, with probability ε, a uniform action instead."""
        epsilon = self._epsilon[b]
        epsilon = epsilon() if callable(epsilon) else epsilon
        if epsilon <= 0:
            return actions
        space = lane.action_space
        assert isinstance(space, gymnasium.spaces.Discrete)  # the lane refused ε > 0 on any other space
        explore = rng.random(len(actions)) < epsilon
        actions = actions.copy()
        actions[explore] = space.start + rng.integers(space.n, size=int(explore.sum()))
        return actions

    def stop(self) -> None:
        """Stop every driver and close the lanes (a retired server closes with its last one)."""
        self._stop.set()
        for handle in self._handles:
            finish = getattr(handle, "finish", None)
            if finish is not None:
                finish(timeout=10)
        self._handles.clear()
        for row in self.lanes:
            for lane in row:
                lane.close()

    def report(self) -> dict[str, Hashable]:
        return {"seats": len(self.seats), "n_inference": self.n_inference, "requests": self.requests}
