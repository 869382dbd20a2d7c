"""What a user asked of ``nonstop train`` (`TrainRequest`), and the run it comes to (`resolve`, `train`).

The command reads its flags once into a `TrainRequest`: typed values named as the config's fields, and
the texts that another part defines (the world's id and its module, KEY=VALUE items, trackers, a size) as
typed. Everything else is decided here, in one place and from the top down: the algorithm (a resumed run
keeps its own) and the settings and preset it takes; then the texts, each read by its part (the world's
entry in the hyperparameter file among them); then the config: the world's family, the settings in their
order (the algorithm's defaults, its world family's, the world's entry, ``--preset``, the settings typed:
`nonstop.learning.hyperparams`), a resumed run's saved config with only what was typed now put over it
(`resume_config`), and the lines the run says first. Each refusal is the flag's own line, made before
anything is written; a command with several mistakes hears first of the one highest in that order.

>>> plan = resolve(TrainRequest(env="CartPole", run={"seconds": 3.0}))
>>> plan.cfg.env, plan.cfg.seconds, plan.cfg.algo_settings.batch_size, plan.rec.resume
('CartPole', 3.0, 64, False)
>>> plan.intro[0].startswith("settings for CartPole from nonstop/learning/hyperparams/dqn.yml")
True

A resumed run (``nonstop train --resume RUN``) keeps RUN's saved config (read in today's keys:
`nonstop.experiment.config.current_form`) and its algorithm; a setting typed now overrides the saved one
and is said at the start. Whether an override is allowed at all is the run log's check
(`nonstop.learning.checkpoint.check_compatible`), made when the run directory opens.

>>> saved = TrainConfig(env="CartPole", seconds=4.0).to_dict()
>>> fresh = TrainConfig(env="CartPole", seconds=10.0, seed=3)
>>> cfg, lines = resume_config(saved, fresh, Typed(run={"seconds"}), where="runs/cartpole")
>>> cfg.seconds, cfg.seed, lines
(10.0, 0, ['seconds: 4.0 → 10.0'])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nonstop.experiment.config import TrainConfig, current_form
from nonstop.experiment.record import RecordConfig

if TYPE_CHECKING:
    from nonstop.learning.hyperparams import WorldEntry

__all__ = ["TrainRequest", "Resolved", "resolve", "train", "Typed", "resume_config", "saved_algorithm"]


@dataclass(frozen=True)
class TrainRequest:
    """One ``nonstop train``, its flags read: each value typed, named as the config's field, and present
    only where a flag gave it (an empty dict or tuple, or None: the config's own default stands). The texts
    that another part defines (the world's id and its module, KEY=VALUE items, trackers, a size) are kept as
    typed: `resolve` has each read by its part."""

    algo: str = TrainConfig.algo
    env: str = TrainConfig.env  # --env as typed: an id, or MODULE:ID
    env_module: str | None = None  # --env-module: the module registering the world (and a resumed run's saved one)
    env_args: tuple[str, ...] = ()  # --env-arg's KEY=VALUE texts, values read as JSON
    pixels: bool = False  # --pixels: the world's frames (env_kwargs pixels=True)
    scheduler_args: tuple[str, ...] = ()  # --scheduler-arg's KEY=VALUE texts
    trim_above: str | None = None  # --trim-above's size (4MiB, 512KiB, never)
    #: TrainConfig's other fields given (seconds, seed, clock, backend, self_play and its settings…)
    run: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # every algorithm setting given
    preset: str | None = None
    hyperparams: str | None = None  # --hyperparams FILE: the user's known settings per world
    record: dict[str, Any] = field(default_factory=dict)  # RecordConfig's fields given (out, tensorboard…)
    track: tuple[str, ...] = ()  # --track's texts, each a tracker or a comma list
    resume: bool = False
    trust_module: bool = False  # a resumed config's module:Id may be imported
    #: under resume: what was typed now, by the config's names (env_kwargs for --env-arg and --pixels,
    #: scheduler_args for --scheduler-arg, each algorithm setting's; also algo, preset, env_module)
    typed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Resolved:
    """The run a request comes to: its config, how it is recorded, and what it says first."""

    cfg: TrainConfig
    rec: RecordConfig
    overrides: list[str] = field(default_factory=list)  # resumed: a line per saved setting typed over
    intro: tuple[str, ...] = ()  # new: where the settings came from, and what was sized to the run


def train(request: TrainRequest, *, console: Any) -> tuple[dict[str, Any], Any, Path]:
    """Resolve ``request`` and run it in its directory (`nonstop.experiment.record.train_in_directory`):
    the summary, how the run ended, and the directory."""
    from nonstop.experiment.record import train_in_directory

    plan = resolve(request)
    if plan.rec.resume:  # the run goes on as it was: only the flags typed now change it, each said
        console.print(
            f"resuming {plan.rec.out} with its saved config"
            + (f"; overriding {', '.join(plan.overrides)}" if plan.overrides else ""),
            markup=False,
        )
    return train_in_directory(plan.cfg, plan.rec, console=console, intro=plan.intro)


def resolve(request: TrainRequest) -> Resolved:
    """The run ``request`` describes, decided from the top down: the algorithm and what the request asks of it,
    then the request's texts (`_read`), then the config. A new run: the world's known settings under the
    preset and the flags. A resumed run (``request.resume``): its saved config and algorithm, with what
    ``request.typed`` names taken from the flags, and a line per change (``seconds: 4 → 10``; whether a change
    is allowed is the run log's check, `check_compatible`). Every refusal comes before anything is written."""
    from nonstop.learning.runlog import read_config

    rec = RecordConfig(**request.record, resume=request.resume)
    saved = read_config(rec.out) if rec.resume and rec.out is not None else None  # RecordConfig asks for RUN
    if saved is None:
        algo = _algorithm(request, request.algo)
    elif request.hyperparams is not None:
        raise ValueError(
            f"--hyperparams {request.hyperparams} sets a new run's settings: {rec.out} resumes with its saved ones"
        )
    else:  # a resumed run goes on with its own algorithm
        algo = _algorithm(
            request, saved_algorithm(saved, request.algo if "algo" in request.typed else None, str(rec.out))
        )
    read = _read(request, algo, saved, where=str(rec.out))
    rec = dataclasses.replace(rec, track=read.track)
    cfg, intro = _config(request, algo, read, known=saved is None)
    if saved is None:
        return Resolved(cfg, rec, intro=intro)
    if read.world is not None:  # the saved world, named with the module typed now
        cfg = dataclasses.replace(cfg, env=read.world)
    typed = Typed(
        run={name for name in request.typed if name in _RUN_KEYS} | ({"env"} if read.world is not None else set()),
        settings={
            x.name
            for x in dataclasses.fields(cfg.algo_settings)
            if x.name in request.typed or "preset" in request.typed
        },
    )
    cfg, lines = resume_config(saved, cfg, typed, where=str(rec.out))
    return Resolved(cfg, rec, overrides=lines)


#: the config's names a flag typed under --resume may override (the algorithm's settings aside)
_RUN_KEYS = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"algo", "algo_settings"}


def _algorithm(request: TrainRequest, name: str) -> Any:
    """The registry's algorithm ``name`` (`nonstop.experiment.registry`), the request's settings and preset
    checked against it: one it does not have is one line naming the flag."""
    from nonstop.experiment.registry import lookup

    algo = lookup("algo", name)
    cls = algo.config_class
    foreign = [n for n in request.settings if n not in {x.name for x in dataclasses.fields(cls)}]
    if foreign:
        flags = ", ".join("--" + n.replace("_", "-") for n in foreign)
        raise ValueError(f"{flags}: not a setting of --algo {algo.name} (its settings: {cls.__name__})")
    preset = request.preset
    if preset and preset not in algo.presets:
        raise ValueError(
            f"--preset {preset} is not one of --algo {algo.name}'s (its presets: {', '.join(algo.presets) or 'none'})"
        )
    return algo


@dataclass(frozen=True)
class _Read:
    """A request's texts, read: the trackers, a new run's world's entry in the hyperparameter file, the world
    (MODULE:ID) and its arguments, and TrainConfig's fields given (the scheduler's settings and a size among
    them); ``world``: a resumed run's saved world named with the module typed now (None: the saved one stands)."""

    track: tuple[str, ...]
    entry: WorldEntry | None
    env: str
    world: str | None
    env_kwargs: dict[str, Any]
    run: dict[str, Any]


def _read(request: TrainRequest, algo: Any, saved: dict[str, Any] | None, *, where: str) -> _Read:
    """``request``'s texts, each read by the part that defines it, the parts above first (the trackers, the
    world's entry for ``algo`` in the hyperparameter file, then the world's id and arguments, then a size,
    which `_config` checks against the workers).
    ``saved``: a resumed run's config.json, in ``where``, whose world is imported only if trusted (None: a new
    run, which takes the world's entry)."""
    from nonstop.envs.registry import import_file_module, parse_env_args, qualify_env_id, split_env_id
    from nonstop.learning.hyperparams import world_entry
    from nonstop.learning.tracking import parse_track
    from nonstop.policies.memory import parse_min_free

    track = parse_track(request.track)
    entry = None
    if saved is None:  # keyed as the run names its world: MODULE:ID with --env-module
        entry = world_entry(
            algo.name, request.env, request.hyperparams, algo.config_class, env_module=request.env_module
        )
    env = qualify_env_id(request.env, request.env_module)  # MODULE:ID: the module travels with the id everywhere
    world = None
    if saved is not None and "env" not in request.typed:  # the saved id: with --env-module typed now, its module
        saved_env = str(saved.get("env", request.env))
        if "env_module" in request.typed:
            world = qualify_env_id(saved_env, request.env_module)
        else:  # else the module it names is imported only if trusted
            import_file_module(
                saved_env,
                f"{where}/config.json",
                trust=request.trust_module,
                instead=f", or name it yourself: --env-module {split_env_id(saved_env)[0]}",
            )
    env_kwargs = parse_env_args(list(request.env_args))  # KEY=VALUE, values read as JSON
    try:
        scheduler_args = parse_env_args(list(request.scheduler_args))
    except ValueError as exc:
        raise ValueError(str(exc).replace("--env-arg", "--scheduler-arg")) from None
    run = {**request.run, "scheduler_args": scheduler_args}
    if request.trim_above is not None:
        run["trim_above"] = parse_min_free(request.trim_above)
    return _Read(track, entry, env, world, env_kwargs, run)


def _config(request: TrainRequest, algo: Any, read: _Read, *, known: bool) -> tuple[TrainConfig, tuple[str, ...]]:
    """The `TrainConfig` the request describes for ``algo``, its texts ``read``, under the world's entry in the
    hyperparameter file where it has one (`nonstop.learning.hyperparams`) and, ``known`` (a new run), with
    the lines that say where its settings came from and what was sized to the run."""
    from nonstop.envs import env_info
    from nonstop.experiment.config import default_env_kwargs
    from nonstop.experiment.registry import constraint
    from nonstop.learning.hyperparams import sized_line

    if request.trim_above is not None:  # a heap is trimmed in a worker that is a process of its own
        clock, backend = read.run.get("clock", TrainConfig.clock), read.run.get("backend", TrainConfig.backend)
        if clock != "wall" or not constraint("policy_host", backend).processes_per_worker:
            raise ValueError(
                f"--trim-above {request.trim_above} trims worker processes: it needs --clock wall and --backend "
                "process or ray (these workers are threads of this process, which keeps its heap)"
            )
    cls = algo.config_class
    given_env = {**read.env_kwargs, **({"pixels": True} if request.pixels else {})}
    try:  # the world built with its arguments (a Game Boy world finds its ROM by rom=PATH)
        world = env_info(read.env, **given_env)
    except TypeError as exc:  # an argument the world does not take: said as the flag
        if request.pixels and "'pixels'" in str(exc):
            raise ValueError(
                f"--pixels: {read.env} does not offer its frames (the continuous family does: `nonstop envs`)"
            ) from None
        raise ValueError(f"--env-arg: {exc}") from None
    entry = read.entry
    settings = cls.for_family(
        world.family,
        **{**(entry.settings if entry else {}), **algo.presets.get(request.preset or "", {}), **request.settings},
    )
    cfg = TrainConfig(
        **read.run,
        env=read.env,
        env_kwargs={**default_env_kwargs(str(world.family)), **given_env},
        algo=algo.name,
        algo_settings=settings,
    )
    if not known:  # a resumed run says what was typed over its saved config instead
        return cfg, ()
    said = () if entry is None else (entry.line() + " (a flag typed wins over it)",)
    sized = sized_line(settings, round(cfg.seconds * env_info(cfg.env, **cfg.env_kwargs).tick_hz))
    return cfg, said + (() if sized is None else (sized,))


@dataclass(frozen=True)
class Typed:
    """What the user typed now, by the config's names: ``run``, `TrainConfig` fields (``env_kwargs`` for
    ``--env-arg``/``--pixels``, ``scheduler_args`` for ``--scheduler-arg``); ``settings``, the algorithm's
    settings (all of them under ``--preset``)."""

    run: set[str] = field(default_factory=set)
    settings: set[str] = field(default_factory=set)


def saved_algorithm(saved: dict[str, Any], typed_algo: str | None, where: str) -> str:
    """The algorithm a resumed run goes on with: its own (an older run's, read in today's keys); another typed
    now is one line saying so."""
    algo = str(current_form(saved).get("algo", TrainConfig.algo))
    if typed_algo is not None and typed_algo != algo:
        raise ValueError(f"{where} is a --algo {algo} run: it resumes as one (start a new run for --algo {typed_algo})")
    return algo


def resume_config(
    saved: dict[str, Any], fresh: TrainConfig, typed: Typed, *, where: str
) -> tuple[TrainConfig, list[str]]:
    """The config ``saved`` (a run's config.json) with what ``typed`` names taken from ``fresh`` (the config
    the flags describe), and a line per setting that changed. ``where``: the run, for messages."""
    saved = current_form(saved)
    now = fresh.to_dict()
    if "agent_id" in typed.run and now.get("agent_id", "none") != saved.get("agent_id", "none"):
        raise ValueError(
            f"--agent-id {now.get('agent_id', 'none')}: the run was trained with --agent-id "
            f"{saved.get('agent_id', 'none')}, which its network's input depends on"
        )
    keys = {k for k in typed.run if k in now and k != "agent_id"}
    merged = {**saved, **{k: now[k] for k in keys}}
    saved_settings = saved.get("algo_settings") or {}
    fresh_settings = now["algo_settings"] or {}
    merged["algo_settings"] = {**saved_settings, **{k: fresh_settings[k] for k in typed.settings}}
    resumed = TrainConfig.from_dict(merged)
    after = resumed.to_dict()
    lines = [f"{k}: {saved.get(k)!r} → {after.get(k)!r}" for k in sorted(keys) if saved.get(k) != after.get(k)]
    lines += [
        f"{resumed.algo}.{k}: {saved_settings.get(k)!r} → {after['algo_settings'][k]!r}"
        for k in sorted(typed.settings)
        if saved_settings.get(k) != after["algo_settings"][k]
    ]
    return resumed, lines
