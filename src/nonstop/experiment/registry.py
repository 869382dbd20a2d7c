"""The parts a run is composed of, chosen by name: one table, one line a part.

A run never asks "is this self-play?", "is this Ray?": it asks the table for the part its config
names (`nonstop.experiment.config.TrainConfig`'s ``seating``, ``interaction``, ``inference_backend``,
``learner_placement``, ``cluster`` and ``learning``) and builds what comes back. Entries are ``"module:attr"``
strings, imported only when asked for, so a backend's library (Ray) is never imported by a run
that does not use it. A new driver or backend is a new module and one `register` call (or one line
in `_BUILTIN`).

A part also says what it works with (`Constraint`): the clocks, devices, learners, drivers it runs
beside, each refusal one line of its own. A config asks the parts it chose (`check`), so a new part
adds its rules here, beside its name, and none to `nonstop.experiment.config`:

>>> check("policy_backend", "ray", {"clock": "virtual", "device": "cpu"})
Traceback (most recent call last):
...
ValueError: --backend ray runs real remote calls, which do not mix with the virtual clock: use --clock wall
>>> runs_as("policy_backend", "process", {"clock": "virtual"}), runs_as("policy_backend", "process", {"clock": "wall"})
('thread', 'process')

A rule names a fact, so any kind of part declares its needs the same way, whenever the fact becomes
known: an algorithm that acts in a discrete space says so, and the world's probe asks it (a fact not
yet known refuses nothing):

>>> discrete = needs("action_space", "Discrete", why="DQN needs a Discrete action space; {env} has {action_space}")
>>> discrete.refusal({"clock": "wall"}) is None, discrete.refusal({"env": "Pendulum", "action_space": "Box"})
(True, 'DQN needs a Discrete action space; Pendulum has Box')

>>> sorted(names("seating"))
['self_play', 'solo']
>>> lookup("seating", "solo").__name__
'SoloSeating'
>>> lookup("seating", "duet")
Traceback (most recent call last):
...
ValueError: unknown seating 'duet': use one of self_play, solo, team_self_play, teams
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "KINDS",
    "register",
    "lookup",
    "names",
    "Rule",
    "Constraint",
    "needs",
    "refuses",
    "constraint",
    "check",
    "required",
    "runs_as",
    "alone",
]

#: what each kind of part is chosen by (the config's field or property of that name)
KINDS: Final = ("seating", "driver", "policy_backend", "learners", "cluster", "learning", "policy_host", "algo")

_BUILTIN: dict[str, dict[str, Any]] = {
    # who sits where in the world, and which driver each seat gets
    "seating": {
        "solo": "nonstop.experiment.seating:SoloSeating",
        "self_play": "nonstop.experiment.selfplay:SelfPlaySeating",
        # what the solo seating becomes on a world of more than two seats: every team seated
        "teams": "nonstop.experiment.teamseats:TeamSeats",
        # self-play in a world of teams: a learning team against its snapshots, its own loop (virtual clock)
        "team_self_play": "nonstop.experiment.teamplay:TeamSelfPlaySeating",
    },
    # what drives the learner's seat: staggered workers beside asynchronous learners, or one loop that
    # infers and learns in turn (the paper's sequential baselines)
    "driver": {
        "staggered": "nonstop.experiment.drivers:StaggeredDriver",
        "infer_then_learn": "nonstop.experiment.drivers:SequentialDriver",
        "learn_then_infer": "nonstop.experiment.drivers:SequentialDriver",
        # staggered workers acting at random after the declared latency, nothing learning (`nonstop compare`)
        "stand_in": "nonstop.experiment.standins:StandInDriver",
    },
    # where one inference worker's policy runs
    "policy_backend": {
        "thread": "nonstop.experiment.backends:thread_policy",
        "process": "nonstop.experiment.backends:process_policy",
        "ray": "nonstop.experiment.raybackend:ray_policy",
        "batched": "nonstop.experiment.batchedbackend:batched_policy",  # request lanes of one batching server
        # the same server's lanes in worker processes, frames through a shared-memory lane ring
        "batched_process": "nonstop.experiment.batchedbackend:batched_process_policy",
    },
    # where the learners run
    "learners": {
        "virtual": "nonstop.experiment.backends:virtual_learners",
        "process": "nonstop.experiment.backends:process_learners",
        "ray": "nonstop.experiment.raybackend:ray_learners",
        # one learner whose parameters, Adam moments and target live on --device (either clock)
        "device": "nonstop.experiment.devicelearners:device_learners",
    },
    # what learns: an `nonstop.learning.algos.Algorithm` class (its config, model, update, actor, export);
    # the first is `TrainConfig.algo`'s default
    "algo": {
        "dqn": "nonstop.learning.dqn:DQN",
        "sac": "nonstop.learning.sac:SAC",
        "td3": "nonstop.learning.td3:TD3",
        # learning that pays for delay: the actions in flight in the state (nonstop.inference.inflight)
        "rtac": "nonstop.learning.rtac:RTAC",
        "dcac": "nonstop.learning.dcac:DCAC",
        "dcac-q": "nonstop.learning.dcacq:DCACQ",
        "bpql": "nonstop.learning.bpql:BPQL",
        "dmsac": "nonstop.learning.dmsac:DMSAC",
    },
    # what the run connects to before it starts anything
    "cluster": {
        "none": "nonstop.experiment.backends:NoCluster",
        "ray": "nonstop.experiment.raybackend:RayCluster",
    },
    # what learns: the Q-network's parameters, the replay and its recorder; or nothing (a run that only acts)
    "learning": {
        "core": "nonstop.experiment.learning:LearningCore",
        "none": "nonstop.experiment.standins:NoLearning",
    },
    # what a world is, asked of it (it is built once to ask) only where a chosen part has another stand in for
    # it on that fact (`Constraint.instead`, `stand_in`): each takes the run's config
    "world_fact": {
        "team_world": "nonstop.experiment.seating:team_world",
    },
    # where a policy built by any picklable factory runs (a driver's own policies: `nonstop compare`'s stand-ins)
    "policy_host": {
        "thread": "nonstop.experiment.backends:in_thread",
        "process": "nonstop.experiment.backends:in_process",
        "ray": "nonstop.experiment.raybackend:in_ray_actor",
    },
}


def register(kind: str, name: str, target: str | Callable[..., Any], constraint: "Constraint | None" = None) -> None:
    """Offer ``target`` (a callable, or ``"module:attr"`` imported when first asked for) as the part
    ``name`` of ``kind``; a config naming it then builds it. ``constraint``: what it works with (default:
    what was declared for ``name`` before, else anything)."""
    if kind not in _BUILTIN:
        raise ValueError(f"unknown kind of part {kind!r}: use one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a part's name must be a non-empty str, got {name!r}")
    if not (callable(target) or (isinstance(target, str) and ":" in target)):
        raise TypeError(f"a part is a callable or 'module:attr', got {target!r}")
    if constraint is not None and not isinstance(constraint, Constraint):
        raise TypeError(f"a part's constraint is a Constraint, got {constraint!r}")
    _BUILTIN[kind][name] = target
    if constraint is not None:
        _CONSTRAINTS.setdefault(kind, {})[name] = constraint


def names(kind: str) -> list[str]:
    """The names a config may choose for ``kind``."""
    return [name for name in _BUILTIN[kind] if constraint(kind, name).offered]


def lookup(kind: str, name: str) -> Any:
    """The part ``name`` of ``kind`` (imported now if it was registered by its path)."""
    table = _BUILTIN[kind]
    if name not in table:
        raise ValueError(f"unknown {kind.replace('_', ' ')} {name!r}: use one of {', '.join(sorted(table))}")
    target = table[name]
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
        table[name] = target
    return target


# ----------------------------------------------------------------------------- what each part works with


@dataclass(frozen=True)
class Rule:
    """One thing a part needs of the run it joins: ``fact`` (``clock``, ``device``, ``interaction``, an
    algorithm's ``action_space``…) must be one of ``values`` (or, with ``allow=False``, none of them);
    ``why`` is the one-line refusal, formatted with the run's facts (``{device}``)."""

    fact: str
    values: tuple[Any, ...]
    why: str
    allow: bool = True

    def refusal(self, facts: Mapping[str, Any]) -> str | None:
        """``why`` formatted, when ``facts`` break the rule; None when they keep it or do not name the fact
        (a fact known later, such as the world's action space, is checked when it is known)."""
        if self.fact not in facts or (facts[self.fact] in self.values) == self.allow:
            return None
        return self.why.format_map(_Facts(facts))


class _Facts(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def needs(fact: str, *values: Any, why: str) -> Rule:
    """The part works only where ``fact`` is one of ``values``."""
    return Rule(fact, values, why)


def refuses(fact: str, *values: Any, why: str) -> Rule:
    """The part works anywhere but where ``fact`` is one of ``values``."""
    return Rule(fact, values, why, allow=False)


@dataclass(frozen=True)
class Constraint:
    """What a part works with, declared where it is registered; the default works with anything."""

    rules: tuple[Rule, ...] = ()
    #: the part that runs in this one's place where a fact has a value: ``{"clock": {"virtual": "thread"}}``
    #: (on the virtual clock, one process simulates everything: process workers are its threads)
    instead: Mapping[str, Mapping[Any, str]] = field(default_factory=dict)
    #: the part of another kind it needs: ``{"cluster": "ray"}`` (connect before the run starts),
    #: ``{"learning": "none"}`` (a driver whose workers learn nothing)
    requires: Mapping[str, str] = field(default_factory=dict)
    #: the config's settings only this part reads: a saved config keeps them (even at their defaults)
    #: only when this part is chosen
    settings: tuple[str, ...] = ()
    #: whether a config may name it (False: it only ever stands in for another part)
    offered: bool = True
    #: processes of this machine each worker it hosts keeps busy beside the run's own (a thread: none)
    processes_per_worker: int = 0
    #: learners: θ lives on the device (its newest version is there before any copy reaches host memory)
    keeps_weights_on_device: bool = False
    #: a policy backend: its model takes such a learner's θ by a device copy (the learner then writes no
    #: host copy for it)
    takes_device_weights: bool = False
    #: a policy backend: on a world of many seats one part of it acts for every seat (each a lane of one
    #: batching server); otherwise each seat gets a pool of its workers
    serves_seats: bool = False
    #: a seating that runs the whole run itself, not as a `nonstop.experiment.run.Run`: its own loop and
    #: run directory (``seating(cfg).train(rec, console) -> (summary, end, out)``)
    runs_alone: bool = False


_RAY_ON_WALL = "runs real remote calls, which do not mix with the virtual clock: use --clock wall"
_RAY_ON_CPU = (
    "--device {device} with Ray: Ray's workers and learners run on their nodes' CPUs; use --backend thread, "
    "process or batched and --learner-backend process"
)
_BATCHED_SETTINGS: Final = ("batch_curve", "max_batch", "device")

#: --delay-aware: the pool's action buffer lives beside the host, read by the learner's own thread or process workers
_NO_DELAY_AWARE = refuses(
    "delay_aware",
    True,
    why="--delay-aware (and --algo rtac, dcac, dcac-q, bpql or dmsac, whose actors always see the actions in flight) "
    "runs the "
    "learner's own pool with thread or process workers (its action buffer is exact there, tested against the "
    "tick log): use --backend thread or process, and no --self-play",
)

_CONSTRAINTS: dict[str, dict[str, Constraint]] = {
    "seating": {
        # in a world of teams (a fact asked of the world only here: `registry.stand_in`), team self-play
        "self_play": Constraint((_NO_DELAY_AWARE,), instead={"team_world": {True: "team_self_play"}}),
        "team_self_play": Constraint(
            (
                needs(
                    "clock", "virtual", why="--self-play on a team world runs on the virtual clock: add --clock virtual"
                ),
                needs(
                    "algo", "dqn", why="--self-play on a team world learns with DQN: --algo {algo} is not offered there"
                ),
            ),
            offered=False,
            runs_alone=True,
        ),
        "teams": Constraint(
            (
                needs(
                    "interaction",
                    "staggered",
                    why="--interaction {interaction} drives one seat: a world of many seats is acted for by "
                    "staggered lanes or pools (leave out --interaction)",
                ),
                needs(
                    "inference_backend",
                    "batched",
                    "thread",
                    "process",
                    why="--backend {backend} on a world of many seats: use --backend batched (every seat a lane "
                    "of one batching server), thread or process (a pool a seat)",
                ),
                refuses(
                    "delay_aware",
                    True,
                    why="--delay-aware (and --algo rtac, dcac, dcac-q, bpql or dmsac) reads one seat's actions in flight: on a "
                    "world of many seats train without it",
                ),
            ),
            offered=False,
        ),
    },
    "policy_backend": {
        "process": Constraint(instead={"clock": {"virtual": "thread"}}),
        "ray": Constraint(
            (
                needs("clock", "wall", why=f"--backend ray {_RAY_ON_WALL}"),
                needs("device", "cpu", why=_RAY_ON_CPU),
                _NO_DELAY_AWARE,
            ),
            requires={"cluster": "ray"},
        ),
        "batched": Constraint(
            (_NO_DELAY_AWARE,), settings=_BATCHED_SETTINGS, takes_device_weights=True, serves_seats=True
        ),
        "batched_process": Constraint(
            (_NO_DELAY_AWARE,),
            instead={"clock": {"virtual": "batched"}},
            settings=_BATCHED_SETTINGS,
            takes_device_weights=True,
        ),
    },
    "learners": {
        "virtual": Constraint(offered=False),  # what process and Ray learners are on the virtual clock
        "process": Constraint(instead={"clock": {"virtual": "virtual"}}),
        "ray": Constraint(
            (
                needs("clock", "wall", why=f"--learner-backend ray {_RAY_ON_WALL}"),
                needs(
                    "interaction",
                    "staggered",
                    why="--learner-backend ray runs the learners of a staggered run; --interaction "
                    "{interaction} learns inside its own loop on this host: use --interaction staggered, or leave out "
                    "--learner-backend",
                ),
                needs("device", "cpu", why=_RAY_ON_CPU),
            ),
            instead={"clock": {"virtual": "virtual"}},
            requires={"cluster": "ray"},
        ),
        "device": Constraint(
            (
                needs(
                    "n_learners",
                    1,
                    why="--learner-backend device runs one learner a device (its parameters and Adam "
                    "moments are one writer's), got --n-learners {n_learners}: use --n-learners 1, or --learner-backend process",
                ),
                needs(
                    "interaction",
                    "staggered",
                    why="--learner-backend device runs the learner of a staggered run; "
                    "--interaction {interaction} learns inside its own loop: use --interaction staggered, or leave out "
                    "--learner-backend",
                ),
                refuses(
                    "backend",
                    "ray",
                    why="--learner-backend device with --backend ray: Ray's workers take the weights on "
                    "their own nodes; use --backend batched (the server takes them by a device copy), thread or process",
                ),
            ),
            keeps_weights_on_device=True,
        ),
    },
    "driver": {
        "stand_in": Constraint(
            (
                needs(
                    "inference_backend",
                    "thread",
                    "process",
                    "ray",
                    why="--interaction stand_in runs policies that need no "
                    "model (a random action after the declared latency): use --backend thread, process or ray",
                ),
            ),
            requires={"learning": "none"},
        ),
    },
    "policy_host": {
        "process": Constraint(processes_per_worker=1),
        "ray": Constraint(processes_per_worker=1),  # an actor (on this machine, with a local Ray)
    },
    "cluster": {
        "none": Constraint(
            (
                needs(
                    "ray_address",
                    None,
                    why="--ray-address {ray_address!r} needs --backend ray or "
                    "--learner-backend ray (got --backend {backend})",
                ),
            )
        ),
    },
}


def constraint(kind: str, name: str) -> Constraint:
    """What the part ``name`` of ``kind`` works with (without importing it)."""
    return _CONSTRAINTS.get(kind, {}).get(name) or Constraint()


def check(kind: str, name: str, facts: Mapping[str, Any]) -> None:
    """Raise the part's first refusal of ``facts`` (one line), if it has one."""
    for rule in constraint(kind, name).rules:
        why = rule.refusal(facts)
        if why is not None:
            raise ValueError(why)


def required(kind: str, chosen: list[tuple[str, str]], default: str) -> str:
    """The part of ``kind`` that one of the ``chosen`` ``(kind, name)`` parts requires, else ``default``."""
    return next((need for k, name in chosen if (need := constraint(k, name).requires.get(kind))), default)


def alone(kind: str, name: str) -> Any:
    """The part ``name`` of ``kind`` where it runs the whole run itself (`Constraint.runs_alone`), else None."""
    return lookup(kind, name) if constraint(kind, name).runs_alone else None


def runs_as(kind: str, name: str, facts: Mapping[str, Any]) -> str:
    """The part that runs in ``name``'s place under ``facts`` (``name`` itself, unless it names another)."""
    for fact, instead in constraint(kind, name).instead.items():
        if fact in facts and facts[fact] in instead:
            return instead[facts[fact]]
    return name


def stand_in(kind: str, name: str, cfg: Any) -> str:
    """The part of ``kind`` that runs ``cfg`` in place of the chosen ``name``: ``name`` itself, or the part it
    names under a fact of the world (a registered ``world_fact``, asked only then: self-play in a world of
    teams runs as ``team_self_play``), checked against the run's facts."""
    asks = [fact for fact in constraint(kind, name).instead if fact in _BUILTIN["world_fact"]]
    if not asks:
        return name
    part = runs_as(kind, name, {fact: lookup("world_fact", fact)(cfg) for fact in asks})
    check(kind, part, cfg.facts())
    return part
