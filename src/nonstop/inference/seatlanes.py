"""Every seat of a world acted for through one batching server (docs/design.md §4b and §7).

At scale a seat is not a pool: it is a **lane** of one `BatchingServer`. `SeatLanes` gives each
seat of a `Session` ``n_inference`` request lanes (N_I staggered lanes per seat: lane ``k`` of every
seat starts at tick ``k``), and drives them from one timed process per ``k`` (a thread on the wall
clock, a process of the simulator on the virtual one), never a thread per seat: at each tick it
reads every present seat's newest observation, submits one request per seat, and hands each answer
to its seat's action queue as it comes (``worker`` ``k``, τ_θ its request's whole time). The
server batches those requests, EDF and sized by its latency curve, so the seats of a world ride one
forward pass per batch where the curve allows. Each lane index acts again at the first tick after
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

import numpy as np

from nonstop.envs.magent import team_of  # a seat's team: its name up to the last "_"
from nonstop.inference.batching import BatchedPolicy, BatchingServer
from nonstop.realtime.clock import Wake
from nonstop.realtime.deaths import Death, in_this_process, tell

__all__ = ["SeatLanes", "TeamForward", "team_of"]

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
        self._team: dict[int, str] = {}
        self._agent: dict[int, int] = {}
        self.agent_id: Final = agent_id if agent_id is not None and agent_id.active else None
        self.passes = 0
        self.batches = 0

    def assign(self, lane: int, team: str, agent: int = 0) -> None:
        """Lane ``lane`` is answered by ``team``'s model, for the team's agent ``agent``."""
        if team not in self.forwards:
            raise ValueError(f"no model for team {team!r}; the teams are {sorted(self.forwards)}")
        self._team[lane] = team
        self._agent[lane] = int(agent)

    def __call__(self, batch: np.ndarray, lanes: Sequence[int]) -> np.ndarray:
        self.batches += 1
        if self.agent_id is not None:
            batch = self.agent_id(batch, np.array([self._agent[lane] for lane in lanes]))
        teams = [self._team[lane] for lane in lanes]
        first = teams[0]
        if all(team == first for team in teams):
            self.passes += 1
            return self._actions(self.forwards[first](batch))
        out = np.zeros(len(lanes), np.int64)
        names = np.array(teams)
        for team in dict.fromkeys(teams):
            rows = np.flatnonzero(names == team)
            self.passes += 1
            out[rows] = self._actions(self.forwards[team](batch[rows]))
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
        """Lane ``k`` of every seat: from tick ``k`` on, at each tick whose observation is out, a request
        per present seat with something new; each answer to its seat's queue."""
        world, server, lanes = self.world, self.server, self.lanes[k]
        clock, tau_m, origin = world.clock, world.tau_m, world.origin
        grace, threaded = clock.tick_grace, server.threaded
        slots = [world.slots[i] for i in self.index]
        queues = [world.queues[i] for i in self.index]
        last_seq = [-1] * len(lanes)
        # each seat's frame is read into its own row (no allocation a tick); a request holds its row until
        # answered, and the row is read into again only after that (the next round)
        frames = [np.empty(slot.shape, slot.dtype) for slot in slots]
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
                fresh = []
                for j, slot in enumerate(slots):
                    latest = slot.read(frames[j])
                    if latest.seq == last_seq[j] or latest.terminated or latest.truncated:
                        continue  # nothing new, or its agent has left (or the episode is between its publishes)
                    last_seq[j] = latest.seq
                    fresh.append((j, latest, lanes[j].request(latest.obs, latest.tick)))
                with server.together():  # every seat's request queued before a batch is taken: one batch
                    waiting = [(j, latest, server.submit(request)) for j, latest, request in fresh]
                self.requests += len(waiting)
                for j, latest, ticket in waiting:
                    answer = server.wait(ticket) if threaded else (yield from server.wait_timed(ticket))
                    decision = lanes[j]._decide(answer, latency=0.0)
                    queues[j].submit(
                        decision.action,
                        obs_tick=latest.tick,
                        episode=latest.episode,
                        worker=k,
                        tau_theta=answer.tau_theta,
                        submit_time=clock.now(),
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
