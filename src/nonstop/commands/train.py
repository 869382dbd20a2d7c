"""``nonstop train``: a realtime training run a user can start, watch, stop and resume.

The flags are `TrainConfig`'s and `RecordConfig`'s fields (`nonstop.experiment.config`,
`nonstop.experiment.record`) and each algorithm's config's (``--algo``: `DQNConfig`, `SACConfig`),
defaults and help taken from them; the work is
`nonstop.experiment.record.train_in_directory`. ``nonstop report RUN`` plots a run.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from nonstop.commands._flags import add_env_module_argument, add_fields, arg_type, env_of, shown

__all__ = [
    "HELP",
    "add_arguments",
    "run",
    "config_from_args",
    "record_from_args",
    "add_dqn_arguments",
    "add_algo_arguments",
]

HELP = "train DQN or SAC in a realtime world: staggered inference, asynchronous learners"

_RUN_FIELDS = (
    "env",
    "clock",
    "seconds",
    "interaction",
    "scheduler",
    "n_inference",
    "latency",
    "default",
    "n_learners",
    "learner_mode",
    "tau_l",
    "learner_backend",
    "backend",
    "ray_address",
    "trim_above",
    "max_restarts",
    "restart_window",
    "device",
    "dtype",
    "batch_curve",
    "max_batch",
)
#: learning that pays for delay: the actor and critic see the actions in flight (any --algo)
_DELAY_FIELDS = ("delay_aware",)
_SELF_PLAY_FIELDS = ("opponents", "snapshot_every", "pool_size", "opponent_latency")
_RECORD_FIELDS = ("out", "episodes", "progress_every", "checkpoint_every", "keep_checkpoints", "checkpoint_replay")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nonstop.experiment.config import TrainConfig, parse_n_workers
    from nonstop.experiment.record import RecordConfig
    from nonstop.inference.device import parse_device, parse_dtype
    from nonstop.inference.schedulers import SCHEDULER_NAMES
    from nonstop.realtime.defaults import DEFAULT_NAMES

    add_fields(p, TrainConfig, _RUN_FIELDS[:1])
    add_env_module_argument(p)
    p.add_argument(
        "--env-arg",
        action="append",
        metavar="KEY=VALUE",
        help="env keyword argument, repeatable (max_episode_steps=900; tick_hz=20: the world's rate)",
    )
    p.add_argument(
        "--pixels",
        action="store_true",
        help="a continuous world's frames instead of its state: 84x84 grayscale, as Atari's, for the same "
        "encoder (the same as --env-arg pixels=true)",
    )
    p.add_argument(
        "--scheduler-arg",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the scheduler, repeatable (fill: p_minimax=0.972 from `nonstop tolerance`, "
        "cap=8; quantile_hold: quantile=0.99; default: the scheduler's own)",
    )
    add_fields(
        p,
        TrainConfig,
        _RUN_FIELDS[1:],
        types={
            "n_inference": arg_type(parse_n_workers),
            "trim_above": str,
            "default": str,
            "device": arg_type(parse_device),
            "dtype": arg_type(parse_dtype),
        },
        unset=("trim_above", "dtype"),
        shown_as={"trim_above": "4MiB", "n_inference": "⌈τ̄_θ/τ_M⌉", "default": "the env's own", "dtype": "auto"},
    )
    for action in p._actions:  # the choices that live with the parts they choose
        if action.dest == "scheduler":
            action.choices = SCHEDULER_NAMES
        elif action.dest == "default":
            action.choices = DEFAULT_NAMES
    g = p.add_argument_group("self-play (a two-seat world: the learner against a pool of its own past snapshots)")
    add_fields(g, TrainConfig, ("self_play",))
    add_fields(g, TrainConfig, _SELF_PLAY_FIELDS, unset=_SELF_PLAY_FIELDS, shown_as={"opponent_latency": "--latency"})
    add_fields(p, TrainConfig, _DELAY_FIELDS)
    add_algo_arguments(p)
    add_fields(p, TrainConfig, ("seed",))
    add_fields(p, RecordConfig, _RECORD_FIELDS, types={"out": str, "episodes": int})
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="RUN",
        help="continue RUN (or the run in --out) from its newest checkpoint, with its saved config: a flag "
        "typed now overrides it and is said at the start (--seconds and --episodes are the run's "
        "totals, earlier segments included)",
    )
    p.add_argument(
        "--track",
        action="append",
        metavar="wandb|mlflow",
        help="also send the progress rows, episodes, config and summary to Weights & Biases or MLflow "
        "(repeat, or a comma list; pip install 'nonstop[track]'; see nonstop.learning.tracking; "
        "default: none)",
    )


def add_dqn_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per ``DQNConfig`` field, its help and default taken from the dataclass (one source of truth).

    A flag left out keeps the env family's value (``DQNConfig.for_family``), so the parsed default is None.

    >>> p = argparse.ArgumentParser()
    >>> add_dqn_arguments(p)
    >>> a = p.parse_args(["--gamma", "0.9", "--no-double", "--hidden", "64", "64"])
    >>> (a.gamma, a.double, a.hidden, a.target_update)
    (0.9, False, [64, 64], None)
    """
    from nonstop.learning.dqn import FAMILY_DEFAULTS, PAPER_PRESETS, DQNConfig

    p.add_argument(
        "--preset",
        choices=sorted(PAPER_PRESETS),
        default=None,
        help="the paper's stated DQN settings (γ, batch, Adam step, replay, k); flags given beside it win "
        "(default: none)",
    )
    group = p.add_argument_group(
        "DQN settings (defaults: the paper's; the env family may override, see DQNConfig.for_family)"
    )
    for f in fields(DQNConfig):
        by_family = ", ".join(
            f"{family} {values[f.name]!r}"
            for family, values in FAMILY_DEFAULTS.items()
            if f.name in values and values[f.name] != f.default
        )
        _add_setting(group, f, f.default, by_family)


def add_algo_arguments(p: argparse.ArgumentParser) -> None:
    """``--algo`` (the registry's algorithms) and one flag per setting of each algorithm's config: DQN's
    group first (`add_dqn_arguments`), then each other algorithm's settings that no group before it has.
    A flag left out keeps the env family's value, so every setting's parsed default is None.

    >>> p = argparse.ArgumentParser()
    >>> add_algo_arguments(p)
    >>> a = p.parse_args(["--algo", "sac", "--tau", "0.01", "--lr", "1e-3"])
    >>> (a.algo, a.tau, a.lr, a.gamma)
    ('sac', 0.01, 0.001, None)
    """
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.registry import lookup, names

    add_fields(p, TrainConfig, ("algo",))
    for action in p._actions:
        if action.dest == "algo":
            action.choices = names("algo")
    add_dqn_arguments(p)
    taken = {a.dest for a in p._actions}
    for name in names("algo"):
        cls = lookup("algo", name).config_class
        mine = [f for f in fields(cls) if f.name not in taken]
        shared = [f for f in fields(cls) if f.name in taken and f.name != "algo"]
        if not mine and not shared:
            continue
        defaults = ", ".join(f"{f.name} {shown(f.default)}" for f in shared if f.default is not None)
        group = p.add_argument_group(
            f"{name.upper()} settings (--algo {name}; the flags above that it shares take "
            f"its own defaults: {defaults})".replace("%", "%%")
        )
        for f in mine:
            _add_setting(group, f, f.default, "")
            taken.add(f.name)


def _add_setting(group: Any, f: Any, default: Any, by_family: str) -> None:
    """One algorithm setting's flag (its parsed default None: the env family's value stands)."""
    flag = "--" + f.name.replace("_", "-")
    text = f"{f.metadata.get('help', '')} (default: {shown(default)}{'; ' + by_family if by_family else ''})"
    text = text.replace("%", "%%")
    if isinstance(default, bool):
        group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
    elif isinstance(default, tuple):
        group.add_argument(flag, type=int, nargs="+", default=None, metavar="N", help=text)
    else:
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        kind = {"float": float, "int": int, "str": str}[type_name]
        group.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(), help=text)


def _setting_names() -> set[str]:
    """Every algorithm's settings' names (each one flag)."""
    from nonstop.experiment.registry import lookup, names

    return {f.name for name in names("algo") for f in fields(lookup("algo", name).config_class)}


def algo_settings_from_args(args: argparse.Namespace, family: str) -> tuple[Any, Any]:
    """The chosen algorithm and its settings: the env family's defaults under the flags given (and a
    DQN ``--preset``); a flag of another algorithm's settings is one line."""
    from nonstop.experiment.registry import lookup
    from nonstop.learning.dqn import PAPER_PRESETS, DQNConfig

    algo = lookup("algo", getattr(args, "algo", None) or "dqn")
    cls = algo.config_class
    mine = {f.name for f in fields(cls)}
    given = {n: getattr(args, n) for n in sorted(_setting_names()) if getattr(args, n, None) is not None}
    foreign = [n for n in given if n not in mine]
    if foreign:
        flags = ", ".join("--" + n.replace("_", "-") for n in foreign)
        raise ValueError(f"{flags}: not a setting of --algo {algo.name} (its settings: {cls.__name__})")
    preset_name = getattr(args, "preset", None)
    if preset_name and cls is not DQNConfig:
        raise ValueError(f"--preset {preset_name} is the paper's DQN settings: it does not apply to --algo {algo.name}")
    preset = PAPER_PRESETS[preset_name] if preset_name else {}
    overrides = {**preset, **given}
    if isinstance(overrides.get("hidden"), list):
        overrides["hidden"] = tuple(overrides["hidden"])
    return algo, cls.for_family(family, **overrides)


def config_from_args(args: argparse.Namespace) -> Any:
    """The `TrainConfig` the flags describe (the env family's defaults of ``--algo``'s settings under the flags given)."""
    from nonstop.envs import env_info
    from nonstop.envs.registry import parse_env_args
    from nonstop.experiment.config import TrainConfig, default_env_kwargs

    if not (args.seconds > 0 and math.isfinite(args.seconds)):  # named as the flag, before anything is built
        raise ValueError(f"--seconds must be a positive number of seconds, got {args.seconds}")
    given_env = parse_env_args(getattr(args, "env_arg", None))
    if getattr(args, "pixels", False):
        given_env["pixels"] = True
    env = env_of(args.env, args)  # MODULE:ID: the module travels with the id to every process, and into config.json
    try:
        family = env_info(env, **given_env).family  # with its arguments: a Game Boy world finds its ROM by rom=PATH
    except TypeError as exc:  # an argument the world does not take: bad input, said as the flag
        if getattr(args, "pixels", False) and "'pixels'" in str(exc):
            raise ValueError(
                f"--pixels: {env} does not offer its frames (the continuous family does: `nonstop envs`)"
            ) from None
        raise ValueError(f"--env-arg: {exc}") from None
    algo, settings = algo_settings_from_args(args, family)
    env_kwargs = {**default_env_kwargs(family), **given_env}
    run = {
        name: getattr(args, name) for name in (*_RUN_FIELDS, *_DELAY_FIELDS) if getattr(args, name, None) is not None
    }
    run["env"] = env
    run.pop("trim_above", None)
    try:
        scheduler_args = parse_env_args(getattr(args, "scheduler_arg", None))  # KEY=VALUE, values read as JSON
    except ValueError as exc:
        raise ValueError(str(exc).replace("--env-arg", "--scheduler-arg")) from None
    return TrainConfig(
        **run,
        env_kwargs=env_kwargs,
        algo=algo.name,
        **{algo.settings_field: settings},
        seed=args.seed,
        scheduler_args=scheduler_args,
        **_self_play_settings(args),
        **_trim_setting(args),
    )


def record_from_args(args: argparse.Namespace) -> Any:
    """The `RecordConfig` the flags describe."""
    from nonstop.experiment.record import RecordConfig
    from nonstop.learning.tracking import parse_track

    given = {name: getattr(args, name) for name in _RECORD_FIELDS if getattr(args, name, None) is not None}
    given["track"] = parse_track(getattr(args, "track", None))
    resume = getattr(args, "resume", False)
    if isinstance(resume, str):  # --resume RUN
        if given.get("out") not in (None, resume):
            raise ValueError(f"--resume {resume} and --out {given['out']} name two runs: give one")
        given["out"] = resume
    given["resume"] = bool(resume)
    return RecordConfig(**given, tensorboard=getattr(args, "tensorboard", True))


def _self_play_settings(args: argparse.Namespace) -> dict[str, Any]:
    given = {n: getattr(args, n) for n in _SELF_PLAY_FIELDS if getattr(args, n, None) is not None}
    if not getattr(args, "self_play", False):
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in given)
            raise ValueError(f"{flags} set{'s' if len(given) == 1 else ''} up self-play: add --self-play")
        return {}
    return {"self_play": True, **given}


def _trim_setting(args: argparse.Namespace) -> dict[str, Any]:
    """``trim_above`` from ``--trim-above``, refused where no worker process exists to trim."""
    from nonstop.policies.memory import parse_min_free

    text = getattr(args, "trim_above", None)
    if text is None:
        return {}
    value = parse_min_free(text)
    if args.clock != "wall" or args.backend not in ("process", "ray"):
        raise ValueError(
            f"--trim-above {text} trims worker processes: it needs --clock wall and --backend process or ray "
            f"(these workers are threads of this process, which keeps its heap)"
        )
    return {"trim_above": value}


def given_flags(args: argparse.Namespace) -> set[str]:
    """The destinations of the flags the user typed (``args.argv``, set by the CLI); without it, the
    ones whose value differs from the flag's default."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    argv = getattr(args, "argv", None)
    if argv is None:
        return {a.dest for a in parser._actions if getattr(args, a.dest, None) != a.default}
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    typed, _ = parser.parse_known_args([a for a in argv if a != "train"])
    return set(vars(typed))


def resumed_config(args: argparse.Namespace, out: Any) -> tuple[Any, list[str]]:
    """The run's saved config with the flags the user typed on top, and a line per override
    (``seconds: 4 → 10``). Whether an override is allowed is the run log's check (`check_compatible`)."""
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.registry import lookup
    from nonstop.learning.runlog import read_config

    saved = read_config(out)
    typed = given_flags(args)
    algo = lookup("algo", saved.get("algo", "dqn"))  # a run written before --algo is a DQN run
    if "algo" in typed and args.algo != algo.name:
        raise ValueError(
            f"{out} is a --algo {algo.name} run: it resumes as one (start a new run for --algo {args.algo})"
        )
    args.algo = algo.name
    fresh = config_from_args(args).to_dict()
    keys = {name for name in (*_RUN_FIELDS, *_DELAY_FIELDS, *_SELF_PLAY_FIELDS, "self_play", "seed") if name in typed}
    keys |= {"env_kwargs"} if typed & {"env_arg", "pixels"} else set()
    keys |= {"scheduler_args"} if "scheduler_arg" in typed else set()
    merged = {**saved, **{k: fresh[k] for k in keys if k in fresh}}
    if "env_module" in typed and "env" not in typed:  # the saved world, its module named now
        keys.add("env")
        merged["env"] = env_of(saved.get("env", fresh["env"]), args)
    field_name = algo.settings_field  # where the algorithm's settings are saved ("dqn" for DQN)
    setting_keys = {f.name for f in fields(algo.config_class) if f.name in typed or "preset" in typed}
    saved_settings = saved.get(field_name) or {}
    merged[field_name] = {**saved_settings, **{k: fresh[field_name][k] for k in setting_keys}}
    cfg = TrainConfig(**merged)
    now = cfg.to_dict()
    lines = [f"{k}: {saved.get(k)!r} → {now.get(k)!r}" for k in sorted(keys) if saved.get(k) != now.get(k)]
    lines += [
        f"{algo.name}.{k}: {saved_settings.get(k)!r} → {now[field_name][k]!r}"
        for k in sorted(setting_keys)
        if saved_settings.get(k) != now[field_name][k]
    ]
    return cfg, lines


def _team_world(cfg: Any) -> bool:
    from nonstop.experiment.teamplay import is_team_world

    return is_team_world(cfg.env, cfg.env_kwargs)


def _train_teams(cfg: Any, rec: Any, console: Any) -> int:
    """``--self-play`` on a team world: `nonstop.experiment.teamplay` (virtual clock, its own loop)."""
    from nonstop.envs import env_info
    from nonstop.experiment.teamplay import TeamPlayConfig, train_teams

    if rec.out is None:
        raise ValueError("--self-play on a team world writes a run directory: add --out RUN")
    if (Path(rec.out) / "ticklog").exists():
        raise ValueError(f"{rec.out} already holds a run: choose a new --out")
    team_cfg = TeamPlayConfig.from_train_config(cfg, env_info(cfg.env, **cfg.env_kwargs).tick_hz)
    summary = train_teams(team_cfg, rec.out, echo=lambda line: console.print(line, markup=False, highlight=False))
    won = summary["judged_win_rate"]
    console.print(
        f"done: {summary['env_ticks_total']:,} env ticks, {summary['episodes']} episodes, {summary['updates']:,} "
        f"updates, {summary['wall_s']} s; against a random team in the last {summary['judged_episodes']}: won "
        f"{'—' if won is None else f'{won:.0%}'}; `nonstop report {rec.out}` draws the plots",
        markup=False,
    )
    print(json.dumps({"run_dir": str(rec.out), **summary}))
    return 0


def run(args: argparse.Namespace) -> int:
    from nonstop._console import Console
    from nonstop.experiment.record import train_in_directory

    console = Console(stderr=True)
    rec = record_from_args(args)
    if rec.resume:  # the run goes on as it was: only the flags typed now change it, each said
        cfg, overrides = resumed_config(args, rec.out)
        console.print(
            f"resuming {rec.out} with its saved config" + (f"; overriding {', '.join(overrides)}" if overrides else ""),
            markup=False,
        )
    else:
        cfg = config_from_args(args)
        if cfg.self_play and _team_world(cfg):  # a learning team against its snapshots (docs/multi-agent.md)
            return _train_teams(cfg, rec, console)
    summary, end, out = train_in_directory(cfg, rec, console=console)
    if summary.get("inaction_fraction") is not None:
        recent = "—" if summary["recent_return"] is None else f"{summary['recent_return']:.2f}"
        segment = summary.get("this_segment", summary)  # start-up belongs to this segment
        after = segment.get("inaction_fraction_after_startup")
        where = " in this segment" if segment is not summary else ""
        startup = (
            ""
            if after is None
            else f" ({after:.1%}{where} after the workers' first {segment['startup_ticks']:,} ticks of starting up)"
        )
        console.print(
            f"{'done' if end.complete else 'stopped'}: {summary['env_ticks_total']:,} env ticks, "
            f"{summary['updates']:,} updates, inaction {summary['inaction_fraction']:.1%}{startup}, recent "
            f"return {recent}; `nonstop report {out}` draws the plots",
            markup=False,
        )
    for line in summary.get("machine_limits") or []:
        console.print(line, style="yellow", markup=False)
    print(
        json.dumps(
            {
                "run_dir": str(out),
                "updates": summary.get("updates"),
                "recent_return": summary.get("recent_return"),
                "complete": end.complete,
            }
        )
    )
    if end.error is not None:
        raise end.error  # the CLI names it in one line and exits non-zero
    return end.exit_code
