"""A run on a world of many seats in teams, without self-play (docs/multi-agent.md, issue 32 item 3).

``nonstop train --env multi/battle`` (any seat world of more than two seats) seats every team:

* **The learning team** is the first (a seat's team is its name up to the last ``_``,
  `nonstop.envs.seats.team_of`). One θ for the whole team: the run's parameters, learned by the
  run's own learners from every seat's transitions in one replay, each seat its own induced delayed
  semi-MDP (`nonstop.learning.seatreplay.SeatsRecorder`).
* **The other teams** each play a θ of their own that does not learn: the learner's initial
  parameters (what self-play's pool starts from, snapshot 0), ε-greedy at the learner's final ε
  (as the self-play opponent acts), with the same latency. ``--self-play`` makes them snapshots of
  the learner instead (`nonstop.experiment.teamplay`).
* **Who acts.** Where the policy backend serves seats (``--backend batched``: ``serves_seats`` in
  the registry) one batching server acts for every seat of every team: each seat ``n_inference``
  request lanes (`nonstop.inference.seatlanes.SeatLanes`, lane k of every seat starting at tick k),
  one forward pass a team in each batch (`TeamForward`), the learner's model taking each published θ
  once. Otherwise (``thread``, ``process``) each seat gets an `InferencePool` of its own, the
  baseline of one pool per seat.

* **Who is acting** (``--agent-id index|onehot``): each team's network sees each seat's place in its
  team beside its observation (`nonstop.policies.agentid.AgentId`): `TeamForward` adds it to each
  lane's row, a pool's workers act through `IdentifiedPolicy`, and the replay adds it to the frames it
  samples from each transition's seat index (`SeatsRecorder`).

Everything else is the solo run's: the learners, checkpoints (the other teams' θ saved with them),
the tick log (every seat's inaction and delay), ``summary.json`` (each team's figures under
``teams``, every seat's inaction and mean delay under ``seats``).
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from nonstop.envs.seats import team_of
from nonstop.experiment.drivers import InferencePart, LearnersPart
from nonstop.experiment.run import Part
from nonstop.experiment.registry import check, constraint, lookup

if TYPE_CHECKING:
    from nonstop.experiment.run import Run
    from nonstop.experiment.seating import WorldSpec

__all__ = ["TeamSeats", "FrozenTeams", "SeatLanesPart", "seat_pools"]


class TeamSeats:
    """Who sits where in a world of many seats: the layout of its teams, the recorder of the learning
    team's seats, and the parts that act for every seat (see the module docstring). Built by the solo
    seating once its probe finds more than two seats (registry seating ``teams``)."""

    def __init__(self, cfg: Any, spec: "WorldSpec") -> None:
        check("seating", "teams", cfg.facts())  # what a world of many seats is trained with, one line each
        assert spec.seats is not None
        self.cfg, self.seats = cfg, list(spec.seats)
        self.teams: dict[str, list[str]] = {}
        for seat in self.seats:
            self.teams.setdefault(team_of(seat), []).append(seat)
        self.learner_team = next(iter(self.teams))
        #: the learning team's seats and their indices among the world's seats
        self.learner_seats = self.teams[self.learner_team]
        self.learner_indices = [self.seats.index(s) for s in self.learner_seats]
        self.other_seats = [s for s in self.seats if team_of(s) != self.learner_team]
        #: ``--agent-id``: each seat's identity its team's network sees (None: off)
        self.agent_id = spec.agent_id
        self.serves_seats = constraint("policy_backend", cfg.inference_backend).serves_seats
        if self.serves_seats and not isinstance(spec.n_inference, int):
            raise ValueError("--n-inference auto grows a pool; every seat's lanes of one server take a number")

    def agent_index(self, seat: str) -> int:
        """``seat``'s place in its team: the agent index its team's network is shown under ``--agent-id``."""
        return self.teams[team_of(seat)].index(seat)

    def recorder(self, run: "Run") -> Any:
        """The host's recorder: every seat of the learning team into the run's one replay."""
        from nonstop.learning.seatreplay import SeatsRecorder

        history = max(64, 4 * math.ceil(run.latency.max_hint / run.tau_m) + 64)  # ticks of observations per seat
        recorder = SeatsRecorder(
            run.replay,
            self.learner_indices,
            gamma=run.settings.gamma,
            history=history,
            action_start=run.algorithm.action_start,
        )
        run.learning.recorder = recorder  # what the run reports as its recorder
        return recorder

    def parts(self, run: "Run") -> list[Part]:
        frozen = FrozenTeams(run, [t for t in self.teams if t != self.learner_team])
        actors: list[Part] = [SeatLanesPart(self, frozen)] if self.serves_seats else seat_pools(run, self, frozen)
        return [frozen, *actors, LearnersPart(), TeamFigures(self)]

    def announce(self, run: "Run") -> str:
        others = [t for t in self.teams if t != self.learner_team]
        how = (
            f"one batching server acts for every seat ({run.n_inference} lane(s) a seat)"
            if self.serves_seats
            else f"an inference pool a seat ({run.n_inference} worker(s) each)"
        )
        against = f"; {', '.join(others)} play(s) a fixed θ (the learner's initial one)" if others else ""
        return (
            f"{len(self.seats)} seats in {len(self.teams)} team(s): {self.learner_team} learns one θ from its "
            f"{len(self.learner_seats)} seats' transitions{against}; {how}"
        )


class FrozenTeams(Part):
    """The θ of every team that does not learn: the learner's parameters as the run starts (saved in
    the run's checkpoints, so a resumed run plays the same teams), ε-greedy at the learner's final ε."""

    name = "frozen_teams"

    def __init__(self, run: "Run", teams: list[str]) -> None:
        self.teams = teams
        self.params: np.ndarray | None = None
        self.epsilon = run.algorithm.opponent_exploration()  # what a frozen copy of the learner explores with
        self._run = run

    def parameters(self) -> np.ndarray:
        """The fixed θ (taken from the learner the first time it is asked, unless a checkpoint gave it)."""
        if self.params is None:
            self.params = self._run.learning.current_params()
        return self.params

    def state_dict(self, *, include_replay: bool) -> dict[str, Any]:
        import torch

        if not self.teams:
            return {}
        return {"frozen_team_params": torch.from_numpy(np.array(self.parameters(), copy=True))}

    def load_state_dict(self, snap: dict[str, Any]) -> None:
        if "frozen_team_params" in snap:
            self.params = snap["frozen_team_params"].numpy().astype(np.float32)


class SeatLanesPart(Part):
    """Every seat of the world a lane (``n_inference`` lanes a seat) of the run's one batching server:
    the learner's model for the learning team, a fixed model for each other team (`TeamForward`)."""

    name = "seat_lanes"

    def __init__(self, seating: TeamSeats, frozen: FrozenTeams) -> None:
        self.seating, self.frozen = seating, frozen
        self.lanes: Any = None
        self.n_inference = 1

    def start(self, run: "Run") -> None:
        from nonstop.experiment.batchedbackend import served_forward, team_server
        from nonstop.inference.seatlanes import SeatLanes, TeamForward

        seating = self.seating
        forwards = {seating.learner_team: served_forward(run)[0]}
        for k, team in enumerate(self.frozen.teams):
            forwards[team] = served_forward(run, self.frozen.parameters(), seed=990 - k)[0]
        forwarder = TeamForward(forwards, agent_id=run.spec.agent_id)  # each seat's id, where --agent-id asks
        part = team_server(run, forwarder)
        epsilon: dict[str, Any] = {team: self.frozen.epsilon for team in self.frozen.teams}
        epsilon[seating.learner_team] = run.algorithm.lane_epsilon(run.weights)  # the learner's annealed ε
        self.n_inference = int(run.n_inference)
        self.lanes = SeatLanes(
            run.world,
            part.server,
            n_inference=self.n_inference,
            forward=forwarder,
            epsilon=epsilon,
            seed=run.cfg.seed,
        ).start()
        run.world.annotate("agents_started_at_tick", int(run.world.slot.read().tick))

    @property
    def failure(self) -> BaseException | None:  # type: ignore[override]  # the lanes', read when asked
        return None if self.lanes is None else self.lanes.failure

    def deaths(self) -> list[Any]:
        return list(getattr(self.lanes, "deaths", []))

    def stop(self) -> None:
        if self.lanes is not None:
            self.lanes.stop()

    close = stop

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        if self.lanes is None:
            return {}
        forward = self.lanes.server.forward  # the `TeamForward`: its passes and batches
        return {"seat_lanes": {**self.lanes.report(), "team_passes": forward.passes, "batches": forward.batches}}


def seat_pools(run: "Run", seating: TeamSeats, frozen: FrozenTeams) -> list[Part]:
    """An `InferencePool` a seat: the learning team's workers from the run's policy backend (each seat's
    workers their own seeds), each other team's on its fixed θ (`FrozenTeams`)."""
    policy = lookup("policy_backend", run.cfg.inference_backend)
    per_seat = run.n_inference if isinstance(run.n_inference, int) else 64
    parts: list[Part] = []
    for j, seat in enumerate(seating.learner_seats):
        parts.append(
            InferencePart(
                "pool" if j == 0 else f"pool {seat}",
                partial(_learner_policy, policy, run, j * per_seat, j),
                run.n_inference,
                seat=seat,
                mark_start=j == 0,
            )
        )
    for j, seat in enumerate(seating.other_seats):
        parts.append(
            InferencePart(
                f"pool {seat}",
                partial(_frozen_policy, run, frozen, seat, j * per_seat, seating.agent_index(seat)),
                run.n_inference,
                seat=seat,
            )
        )
    return parts


def _identified(run: "Run", policy: Any, agent: int) -> Any:
    """``policy`` acting for agent ``agent`` of its team: under ``--agent-id`` it sees the agent's identity."""
    from nonstop.policies.agentid import IdentifiedPolicy

    ids = run.spec.agent_id
    return policy if ids is None or not ids.active else IdentifiedPolicy(policy, ids, agent)


def _learner_policy(policy: Any, run: "Run", first: int, agent: int, i: int) -> Any:
    """Worker ``i`` of the learning team's agent ``agent``, whose workers are numbered from ``first`` (their
    seeds, their lanes)."""
    return _identified(run, policy(run, first + i), agent)


def _frozen_policy(run: "Run", frozen: FrozenTeams, seat: str, first: int, agent: int, i: int) -> Any:
    """Worker ``i`` of the other team's seat ``seat`` (its agent ``agent``): ε-greedy on the fixed θ, with the
    run's latency."""
    from nonstop.experiment.selfplay import SnapshotPool, SnapshotWeights
    from nonstop.policies.latency import LatencyPolicy

    pool = SnapshotPool(1, seed=run.cfg.seed)
    pool.add(frozen.parameters(), env_tick=0, updates=0)
    weights = SnapshotWeights(pool, lambda: 0, exploration=frozen.epsilon)  # one snapshot plays every episode
    seed = run.cfg.seed * 1000 + 500_000 + first + i
    policy: Any = run.algorithm.policy(
        run.algorithm.build_model(), weights, seed=seed, num_threads=None, device=run.cfg.device, dtype=run.cfg.dtype
    )
    if run.latency.max_hint > 0:
        policy = LatencyPolicy(policy, run.latency, seed=seed)
    return _identified(run, policy, agent)


class TeamFigures(Part):
    """Each team's figures (``teams``) and every seat's inaction and mean delay (``seats``) in ``summary.json``."""

    name = "team_figures"

    def __init__(self, seating: TeamSeats) -> None:
        self.seating = seating

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        if tick_log is None or not len(tick_log):
            return {}
        s = tick_log.summary(teams={seat: team_of(seat) for seat in self.seating.seats})
        seats = {
            name: {"inaction_fraction": f.get("inaction_fraction"), "delay_mean_ticks": f.get("delay_mean_ticks")}
            for name, f in s.get("seats", {}).items()
        }
        return {"learning_team": self.seating.learner_team, "teams": s.get("teams", {}), "seats": seats}
