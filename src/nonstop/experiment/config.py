"""What defines a training run: `TrainConfig`, plain data saved as the run's ``config.json``.

A config imports nothing heavy and opens nothing: building one checks its own values (names,
ranges), and asks each part it chose whether it works with the rest (`nonstop.experiment.registry`:
a part's rules are declared beside its name, none here). What needs the machine or the network —
is Ray installed, does the cluster answer — is the cluster part's check, before anything starts.

The fields' defaults are the command line's defaults: ``nonstop train`` builds its flags from
these fields (`nonstop.commands.train`), so the two cannot disagree.

>>> cfg = TrainConfig(env="CartPole", seconds=4.0)
>>> cfg.inference_backend, cfg.learner_placement, cfg.seating, cfg.cluster
('thread', 'virtual', 'solo', 'none')
>>> TrainConfig(clock="wall", backend="ray").cluster
'ray'
>>> TrainConfig(interaction="sideways")
Traceback (most recent call last):
...
ValueError: interaction must be one of staggered, infer_then_learn, learn_then_infer, stand_in, got 'sideways'
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from nonstop.experiment import registry
from nonstop.experiment.registry import lookup, names
from nonstop.policies.agentid import AGENT_ID_MODES

__all__ = [
    "TrainConfig",
    "INTERACTIONS",
    "SELF_PLAY_KEYS",
    "OPPONENT_WEIGHTINGS",
    "default_env_kwargs",
    "current_form",
    "parse_n_workers",
]

INTERACTIONS: Final = ("staggered", "infer_then_learn", "learn_then_infer")
#: how a self-play match's snapshot is drawn from the pool (`nonstop.experiment.selfplay.SnapshotPool`)
OPPONENT_WEIGHTINGS: Final = ("uniform", "latest")
#: TrainConfig's self-play settings (left out of a saved config without self-play)
SELF_PLAY_KEYS: Final = ("self_play", "opponents", "snapshot_every", "pool_size", "opponent_latency", "trials")
_CLOCKS: Final = ("virtual", "wall")
#: settings some part alone reads (left out of a saved config whose parts do not: `registry.Constraint.settings`)
_PART_SETTINGS: Final = ("batch_curve", "max_batch")
#: where models run (left out of a saved config at their defaults, so runs saved before they existed resume)
_PLACEMENT_DEFAULTS: Final = {"device": "cpu", "dtype": None}
_LEARNER_MODES: Final = ("round_robin", "hogwild", "parallel")
#: the learner backend a saved config leaves out (runs saved before the flag existed learned here)
_LEARNERS_HERE: Final = "process"
#: the default of ``trim_above`` (`nonstop.policies.memory.DEFAULT_MIN_FREE`, kept equal by a test)
_DEFAULT_TRIM: Final = 4 * 2**20


def parse_n_workers(text: str | int) -> int | str:
    """A worker count from the command line: a positive int or ``auto``.

    >>> parse_n_workers("auto"), parse_n_workers("3")
    ('auto', 3)
    """
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"must be a positive integer or 'auto', got {text!r}") from None
    if n < 1:
        raise ValueError(f"must be >= 1 (or 'auto'), got {n}")
    return n


def _help(text: str, **more: Any) -> dict[str, Any]:
    return {"help": text, **more}


@dataclass
class TrainConfig:
    """Everything that defines a run (saved as the run's config.json). Each field's help is its flag's."""

    env: str = field(
        default="CartPole",
        metadata=_help(
            "env id (see `nonstop envs`), or MODULE:ID for a world your own module registers (saved so, resume finds it)"
        ),
    )
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_help("keyword arguments for the env"))
    clock: str = field(
        default="virtual", metadata=_help("virtual: simulated time (fast, exact); wall: real time", choices=_CLOCKS)
    )
    seconds: float = field(default=600.0, metadata=_help("world seconds to run"))
    interaction: str = field(
        default="staggered", metadata=_help("staggered, or a sequential baseline", choices=INTERACTIONS)
    )
    scheduler: str = field(default="exp_time", metadata=_help("inference scheduler (staggered)"))
    scheduler_args: dict[str, Any] = field(
        default_factory=dict,
        metadata=_help(
            "the scheduler's own settings (fill: p_minimax from `nonstop tolerance`, cap, plan; quantile_hold: quantile)"
        ),
    )
    n_inference: int | str | None = field(
        default=None, metadata=_help("N_I (None: ⌈τ̄_θ/τ_M⌉), or 'auto': grown and shrunk online")
    )
    latency: str = field(default="0", metadata=_help("declared model latency: 5t, 80ms, lognormal:6t,0.5"))
    n_learners: int = field(default=1, metadata=_help("N_L learners"))
    learner_mode: str = field(
        default="round_robin", metadata=_help("how learners' gradients are applied", choices=_LEARNER_MODES)
    )
    tau_l: float | None = field(default=None, metadata=_help("virtual seconds per update (None: τ_M)"))
    learner_backend: str = field(
        default=_LEARNERS_HERE,
        metadata=_help(
            "wall-clock learners: processes on this host, or Ray actors on any node; the replay and the master "
            "parameters stay here, batches go out and gradients come back. device (either clock): one learner whose "
            "parameters, Adam moments and target live on --device, its weights to --backend batched's server by a "
            "device copy",
            metavar="process|ray|device",
        ),
    )
    backend: str = field(
        default="thread",
        metadata=_help(
            "wall-clock inference workers: threads, processes, or Ray actors on any node (pip install -e '.[ray]'); "
            "batched: request lanes of one batching inference server that owns the model (either clock); batched_process: "
            "its lanes in worker processes, frames to the server through shared memory (wall clock)",
            metavar="thread|process|ray|batched|batched_process",
        ),
    )
    ray_address: str | None = field(
        default=None,
        metadata=_help("Ray cluster HOST:PORT for --backend ray (None: start a local Ray)", metavar="HOST:PORT"),
    )
    trim_above: int | None = field(
        default=_DEFAULT_TRIM,
        metadata=_help(
            "process and Ray workers: after each forward pass, hand its working set back to the OS when the heap "
            "holds more than this many bytes free (None: never; see nonstop.policies.memory)"
        ),
    )
    default: str | None = field(
        default=None,
        metadata=_help(
            "β, applied on every tick without an agent action: noop, repeat the last action, or a uniformly random "
            "action (None: the env's own, noop for Atari)"
        ),
    )
    seed: int = field(default=0, metadata=_help("seed for env, model, exploration and replay sampling"))
    max_restarts: int = field(
        default=5,
        metadata=_help(
            "restarts of dead learners, and apart of dead inference workers, allowed within --restart-window; one more "
            "death ends the run (summary incomplete, exit 1)"
        ),
    )
    restart_window: float = field(
        default=60.0, metadata=_help("the window of --max-restarts, in the run's clock seconds", metavar="SECONDS")
    )
    algo: str = field(
        default=names("algo")[0],  # the registry's first
        metadata=_help("the learning algorithm, an `nonstop.learning.algos.Algorithm` registered by name"),
    )
    algo_settings: Any = field(
        default=None,
        metadata=_help("the algorithm's settings (its config dataclass, or its dict; None: the env family's)"),
    )
    delay_aware: bool = field(
        default=False,
        metadata=_help(
            "the learner's actor and critic see, beside the observation, the actions in flight (the K = ⌈max latency in "
            "ticks⌉ newest decisions, each with its ticks to apply and its age; nonstop.inference.inflight), exactly as "
            "the inference pool knows them; any --algo, vector observations"
        ),
    )
    agent_id: str = field(
        default="none",
        metadata=_help(
            "a world of many seats whose team shares one θ: each seat's identity added to what the network sees "
            "(index: one feature or channel, k/(n-1); onehot: n of them), when acting and when learning; none: "
            "agents are interchangeable",
            choices=AGENT_ID_MODES,
        ),
    )
    self_play: bool = field(
        default=False,
        metadata=_help(
            "a two-seat world: the learner plays the first seat, a snapshot of its past self the second; RUN/matches.csv "
            "records every match"
        ),
    )
    opponents: str = field(
        default="uniform",
        metadata=_help(
            "self-play: how each match's snapshot is drawn: uniform over the pool, or latest (weight ∝ rank: the newest "
            "most often)",
            choices=OPPONENT_WEIGHTINGS,
        ),
    )
    snapshot_every: float = field(
        default=30.0, metadata=_help("self-play: world seconds between snapshots of the learner", metavar="SECONDS")
    )
    pool_size: int = field(default=8, metadata=_help("self-play: snapshots kept, the newest"))
    trials: int | None = field(
        default=None,
        metadata=_help(
            "team self-play: trial episodes against a random team after learning, one a candidate θ (snapshots over "
            "the run and the last θ); the best plays the judged episodes. 0 judges the last θ (default 20)",
            metavar="N",
        ),
    )
    device: str = field(
        default="cpu",
        metadata=_help(
            "where every model of the run runs: the thread or process workers' (on a GPU each its own copy), the batching "
            "server's (--backend batched), the learners' and self-play's opponents': cpu, cuda, cuda:N or auto (CUDA when "
            "present)",
            metavar="cpu|cuda|cuda:N|auto",
        ),
    )
    dtype: str | None = field(
        default=None,
        metadata=_help(
            "the inference precision: fp32, bf16 or fp16 (None/auto: bf16 on CUDA, fp32 on the CPU); learners update "
            "in fp32",
            metavar="fp32|bf16|fp16|auto",
        ),
    )
    batch_curve: str | None = field(
        default=None,
        metadata=_help(
            "--backend batched: the batch latency curve L(b), linear:A,C (A + C·b) or table:b=T,... with units "
            "(linear:5t,0.25t); None: the --latency mean for any batch size"
        ),
    )
    max_batch: int = field(default=64, metadata=_help("--backend batched: the largest batch the server forms"))
    opponent_latency: str | None = field(
        default=None, metadata=_help("self-play: the pool side's declared latency (None: --latency)")
    )

    def __post_init__(self) -> None:
        self._check_parts_named()
        self._check_run_numbers()
        self._check_algorithm()
        self._check_seats()
        _check_placement(self)
        if not isinstance(self.scheduler_args, dict) or not all(isinstance(k, str) for k in self.scheduler_args):
            raise ValueError(f"scheduler_args must be a dict of setting names, got {self.scheduler_args!r}")
        if not isinstance(self.max_batch, int) or isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {self.max_batch!r}")
        for kind, name in self._parts():  # what goes with what is each chosen part's to say
            registry.check(kind, name, self.facts())

    def _check_parts_named(self) -> None:
        """Each part is one its registry offers."""
        _one_of("clock", self.clock, _CLOCKS)
        _one_of("interaction", self.interaction, tuple(names("driver")))
        _one_of("learner_mode", self.learner_mode, _LEARNER_MODES)
        _one_of(
            "backend",
            self.backend,
            tuple(names("policy_backend")),
            what="unknown backend {value!r}: use one of {names}",
        )
        _one_of(
            "learner_backend",
            self.learner_backend,
            tuple(names("learners")),
            what="unknown learner backend {value!r}: use one of {names}",
        )

    def _check_run_numbers(self) -> None:
        """The run's length, worker counts, restart budget, trim threshold and τ_L are in range."""
        if not (isinstance(self.seconds, (int, float)) and self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"seconds must be a positive number, got {self.seconds!r}")
        if self.n_inference == "auto":
            self.scheduler = "auto"  # only the auto scheduler sizes the pool online
        if self.scheduler == "sequential" and self.n_inference not in (None, 1):
            raise ValueError(
                f"the sequential scheduler runs exactly 1 inference worker, got n_inference={self.n_inference!r}"
            )
        for name, v in (("n_inference", self.n_inference), ("n_learners", self.n_learners)):
            if v is None or (name == "n_inference" and v == "auto"):
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.default is not None and self.default not in ("noop", "repeat", "random"):
            raise ValueError(f"default must be one of noop, repeat, random, got {self.default!r}")
        if not isinstance(self.max_restarts, int) or isinstance(self.max_restarts, bool) or self.max_restarts < 0:
            raise ValueError(f"max_restarts must be an integer >= 0, got {self.max_restarts!r}")
        if not (
            isinstance(self.restart_window, (int, float))
            and self.restart_window > 0
            and math.isfinite(self.restart_window)
        ):
            raise ValueError(f"restart_window must be a positive number of seconds, got {self.restart_window!r}")
        if self.trim_above is not None and (
            not isinstance(self.trim_above, int) or isinstance(self.trim_above, bool) or self.trim_above < 0
        ):
            raise ValueError(
                f"trim_above must be a whole number of bytes >= 0 or None (never), got {self.trim_above!r}"
            )
        if self.tau_l is not None and not (self.tau_l >= 0 and math.isfinite(self.tau_l)):
            raise ValueError(f"tau_l must be a finite number of seconds >= 0, got {self.tau_l!r}")

    def _check_algorithm(self) -> None:
        """``algo`` is registered, and its settings (a dict read from config.json) are its own config's."""
        _one_of("algo", self.algo, tuple(names("algo")), what="unknown --algo {value!r}: use one of {names}")
        if isinstance(self.algo_settings, dict):  # read from config.json: the algorithm's own config checks it
            self.algo_settings = lookup("algo", self.algo).config_class.from_dict(self.algo_settings)
        if not isinstance(self.delay_aware, bool):
            raise TypeError(f"delay_aware must be True or False, got {self.delay_aware!r}")

    def _check_seats(self) -> None:
        """Self-play's settings and the seats' identities are well formed and go together."""
        if not isinstance(self.self_play, bool):
            raise TypeError(f"self_play must be True or False, got {self.self_play!r}")
        _one_of("opponents", self.opponents, OPPONENT_WEIGHTINGS)
        _one_of("agent_id", self.agent_id, AGENT_ID_MODES, what="--agent-id must be one of {names}, got {value!r}")
        if self.agent_id != "none" and self.facts()["delay_aware"]:
            raise ValueError(
                f"--agent-id {self.agent_id} does not combine with an actor that sees the actions in flight"
            )
        if not (
            isinstance(self.snapshot_every, (int, float))
            and self.snapshot_every > 0
            and math.isfinite(self.snapshot_every)
        ):
            raise ValueError(f"snapshot_every must be a positive number of world seconds, got {self.snapshot_every!r}")
        if not isinstance(self.pool_size, int) or isinstance(self.pool_size, bool) or self.pool_size < 1:
            raise ValueError(f"pool_size must be an integer >= 1, got {self.pool_size!r}")
        if self.trials is not None and (
            not isinstance(self.trials, int) or isinstance(self.trials, bool) or self.trials < 0
        ):
            raise ValueError(f"trials must be an integer >= 0, got {self.trials!r}")

    # ------------------------------------------------------------------ the keys the parts are chosen by
    def _parts(self) -> list[tuple[str, str]]:
        """The parts this config chose, by kind, as named (before any stands in for another)."""
        return [
            ("seating", self.seating),
            ("driver", self.interaction),
            ("policy_backend", self.backend),
            ("learners", self.learner_backend),
            ("cluster", self.cluster),
        ]

    def facts(self) -> dict[str, Any]:
        """What the chosen parts may ask of the run (`registry.Rule`): its plain values, and what its other
        parts are."""
        return {
            "clock": self.clock,
            "algo": self.algo,
            "device": self.device.strip().lower(),
            "interaction": self.interaction,
            "backend": self.backend,
            "inference_backend": self.inference_backend,
            "learner_backend": self.learner_backend,
            "n_learners": self.n_learners,
            "ray_address": self.ray_address,
            "seating": self.seating,
            "scheduler": self.scheduler,
            # the actor sees the actions in flight: --delay-aware, or an algorithm that always does (RTAC, DCAC)
            "delay_aware": self.delay_aware or lookup("algo", self.algo).needs_action_buffer,
        }

    @property
    def inference_backend(self) -> str:
        """Where inference workers run: ``backend``, or the part that stands in for it on this clock (on the
        virtual clock, process workers are threads of the one simulating process)."""
        return registry.runs_as("policy_backend", self.backend, {"clock": self.clock})

    @property
    def learner_placement(self) -> str:
        """Where learners run: ``learner_backend``, or the part that stands in for it on this clock
        (simulated in this process on the virtual clock)."""
        return registry.runs_as("learners", self.learner_backend, {"clock": self.clock})

    @property
    def seating(self) -> str:
        """Who sits where: ``solo`` (the learner alone), or ``self_play`` (against its own snapshots)."""
        return "self_play" if self.self_play else "solo"

    @property
    def cluster(self) -> str:
        """The cluster a run connects to before it starts: the one a chosen part needs (Ray's), else ``none``."""
        return registry.required(
            "cluster", [("policy_backend", self.backend), ("learners", self.learner_backend)], "none"
        )

    @property
    def learning(self) -> str:
        """What learns: ``core`` (the parameters, replay and recorder), or ``none`` where the driver learns nothing."""
        return registry.required("learning", [("driver", self.interaction)], "core")

    # ------------------------------------------------------------------ plain data
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """A config from its saved form (a run's config.json). A run saved before algorithms were parts names
        no ``algo`` and keeps its settings under its algorithm's old key (`Algorithm.legacy_settings_key`):
        read as ``algo`` and ``algo_settings``. An unknown key is one line naming it."""
        return cls(**current_form(d))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.algo_settings is not None and not isinstance(self.algo_settings, dict):
            d["algo_settings"] = self.algo_settings.to_dict()
        if not self.self_play:  # a run without self-play keeps the config (and resumes) of runs before it existed
            for name in SELF_PLAY_KEYS:
                del d[name]
        if self.learner_backend == _LEARNERS_HERE:  # likewise a run with learners on this host
            del d["learner_backend"]
        if not self.scheduler_args:  # and a run whose scheduler has its defaults
            del d["scheduler_args"]
        if not self.delay_aware:  # and a run whose actor sees only the observation
            del d["delay_aware"]
        if self.agent_id == "none":  # and a run whose seats do not say who they are
            del d["agent_id"]
        used = {s for kind, name in self._parts() for s in registry.constraint(kind, name).settings}
        for name in _PART_SETTINGS:  # and a run without the part that reads them (the batching server)
            if name not in used:
                del d[name]
        for name, default in _PLACEMENT_DEFAULTS.items():  # and a run on the CPU in fp32
            if d[name] == default and name not in used:
                del d[name]
        return d


def current_form(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved config's keys as `TrainConfig` names them now (`TrainConfig.from_dict`): an older run's
    algorithm settings, under its algorithm's old key (`Algorithm.legacy_settings_key`) and with no
    ``algo``, become ``algo_settings``; a key `TrainConfig` lacks is one line naming it."""
    d = dict(saved)
    algo = d.get("algo", TrainConfig.algo)
    old = lookup("algo", algo).legacy_settings_key
    if old is not None and old in d:
        settings = d.pop(old)
        if d.get("algo_settings") is None:
            d["algo"], d["algo_settings"] = algo, settings
    unknown = sorted(set(d) - {f.name for f in fields(TrainConfig)})
    if unknown:
        raise ValueError(f"unknown config keys {unknown}: not settings of `nonstop train` (TrainConfig)")
    if isinstance(d.get("algo_settings"), dict):  # a setting added since the run was written: its default
        d["algo_settings"] = {**_setting_defaults(lookup("algo", algo).config_class), **d["algo_settings"]}
    return d


def _setting_defaults(config_class: Any) -> dict[str, Any]:
    """The settings of ``config_class`` that have a plain default, as its ``to_dict`` writes them."""
    import dataclasses

    plain = {f.name: f.default for f in fields(config_class) if f.default is not dataclasses.MISSING}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in plain.items()}


def _check_placement(cfg: TrainConfig) -> None:
    """``device`` and ``dtype`` are well formed (whether this machine has the device is the run's check,
    `nonstop.inference.device.resolve_device`; which parts run on which device is theirs to say)."""
    import re

    if not isinstance(cfg.device, str) or not re.fullmatch(r"cpu|auto|cuda(:\d+)?", cfg.device.strip().lower()):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {cfg.device!r}")
    if cfg.dtype is not None:
        from nonstop.inference.device import parse_dtype

        cfg.dtype = parse_dtype(cfg.dtype)


def _one_of(
    name: str, value: Any, allowed: tuple[str, ...], what: str = "{name} must be one of {names}, got {value!r}"
) -> None:
    if value not in allowed:
        raise ValueError(what.format(name=name, names=", ".join(allowed), value=value))


def default_env_kwargs(family: str) -> dict[str, Any]:
    """What learning needs from a world family by default: the paper's 84×84 grayscale frames
    for Atari (Game Boy envs observe 84×84 already)."""
    return {"preprocess": True} if family == "atari" else {}
