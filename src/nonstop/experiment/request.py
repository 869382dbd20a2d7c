"""What a user asked of ``nonstop train`` (`TrainRequest`), and the run it comes to (`resolve`, `train`).

The command reads its flags once into a `TrainRequest`: typed values (its texts read: the world's id with
its module, KEY=VALUE items, trackers, sizes), named as the config's fields. Everything else is decided
here, in one place: the algorithm (a resumed run keeps its own), the world's family, the settings in their
order (the algorithm's defaults, its world family's, the world's entry in the hyperparameter file,
``--preset``, the settings typed: `nonstop.learning.hyperparams`), a resumed run's saved config with only
what was typed now put over it (`resume_config`), and the lines the run says first.

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
from typing import Any

from nonstop.experiment.config import TrainConfig, current_form
from nonstop.experiment.record import RecordConfig

__all__ = ["TrainRequest", "Resolved", "resolve", "train", "Typed", "resume_config", "saved_algorithm"]


@dataclass(frozen=True)
class TrainRequest:
    """One ``nonstop train``, its flags read: each value typed, named as the config's field, and present
    only where a flag gave it (an empty dict or None: the config's own default stands)."""

    algo: str = TrainConfig.algo
    env: str = TrainConfig.env  # with --env-module's module: MODULE:ID
    env_module: str | None = None  # --env-module: a resumed run's saved world is named with it
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # --env-arg's, read as JSON
    pixels: bool = False  # --pixels: the world's frames (env_kwargs pixels=True)
    #: TrainConfig's other fields given (seconds, seed, scheduler_args, trim_above, self_play and its settings…)
    run: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # every algorithm setting given
    preset: str | None = None
    hyperparams: str | None = None  # --hyperparams FILE: the user's known settings per world
    record: dict[str, Any] = field(default_factory=dict)  # RecordConfig's fields given (out, track, tensorboard…)
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
    """The run ``request`` describes. A new run: the world's known settings under the preset and the flags.
    A resumed run (``request.resume``): its saved config and algorithm, with what ``request.typed`` names
    taken from the flags, and a line per change (``seconds: 4 → 10``; whether a change is allowed is the
    run log's check, `check_compatible`)."""
    from nonstop.envs.registry import import_file_module, qualify_env_id, split_env_id
    from nonstop.learning.runlog import read_config

    rec = RecordConfig(**request.record, resume=request.resume)
    if not rec.resume or rec.out is None:  # RecordConfig asks for RUN
        cfg, intro = _config(request, request.algo, known=True)
        return Resolved(cfg, rec, intro=intro)
    saved = read_config(rec.out)
    if request.hyperparams is not None:
        raise ValueError(
            f"--hyperparams {request.hyperparams} sets a new run's settings: {rec.out} resumes with its saved ones"
        )
    # its world: the saved id, with --env-module typed now its module, else imported only if trusted
    world = str(saved.get("env", request.env))
    renamed = "env" not in request.typed and "env_module" in request.typed
    if renamed:
        world = qualify_env_id(world, request.env_module)
    elif "env" not in request.typed:
        import_file_module(
            world,
            f"{rec.out}/config.json",
            trust=request.trust_module,
            instead=f", or name it yourself: --env-module {split_env_id(world)[0]}",
        )
    algo = saved_algorithm(saved, request.algo if "algo" in request.typed else None, str(rec.out))
    fresh, _ = _config(request, algo, known=False)
    if renamed:
        fresh = dataclasses.replace(fresh, env=world)
    typed = Typed(
        run={name for name in request.typed if name in _RUN_KEYS} | ({"env"} if renamed else set()),
        settings={
            x.name
            for x in dataclasses.fields(fresh.algo_settings)
            if x.name in request.typed or "preset" in request.typed
        },
    )
    cfg, lines = resume_config(saved, fresh, typed, where=str(rec.out))
    return Resolved(cfg, rec, overrides=lines)


#: the config's names a flag typed under --resume may override (the algorithm's settings aside)
_RUN_KEYS = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"algo", "algo_settings"}


def _config(request: TrainRequest, algo_name: str, *, known: bool) -> tuple[TrainConfig, tuple[str, ...]]:
    """The `TrainConfig` the request describes for ``--algo algo_name`` and, ``known`` (a new run), under the
    world's known settings (`nonstop.learning.hyperparams`), with the lines that say where its settings
    came from and what was sized to the run."""
    from nonstop.envs import env_info
    from nonstop.experiment.config import default_env_kwargs
    from nonstop.experiment.registry import lookup
    from nonstop.learning.hyperparams import sized_line, world_entry

    algo = lookup("algo", algo_name)
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
    given_env = {**request.env_kwargs, **({"pixels": True} if request.pixels else {})}
    try:  # the world built with its arguments (a Game Boy world finds its ROM by rom=PATH)
        world = env_info(request.env, **given_env)
    except TypeError as exc:  # an argument the world does not take: said as the flag
        if request.pixels and "'pixels'" in str(exc):
            raise ValueError(
                f"--pixels: {request.env} does not offer its frames (the continuous family does: `nonstop envs`)"
            ) from None
        raise ValueError(f"--env-arg: {exc}") from None
    entry = world_entry(algo.name, request.env, request.hyperparams, cls) if known else None
    settings = cls.for_family(
        world.family, **{**(entry.settings if entry else {}), **algo.presets.get(preset or "", {}), **request.settings}
    )
    cfg = TrainConfig(
        **request.run,
        env=request.env,
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
