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
from dataclasses import dataclass, fields
from collections.abc import Callable
from typing import Any

from nonstop.commands._flags import add_env_module_argument, add_fields, arg_type, shown

__all__ = [
    "HELP",
    "add_arguments",
    "run",
    "settings_from_args",
    "config_from_args",
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
#: a team's seats sharing one θ: who each is, in what its network sees
_TEAM_FIELDS = ("agent_id",)
_SELF_PLAY_FIELDS = ("opponents", "snapshot_every", "pool_size", "opponent_latency")
_RECORD_FIELDS = ("out", "episodes", "progress_every", "checkpoint_every", "keep_checkpoints", "checkpoint_replay")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``nonstop train``'s flags, in the groups ``--help`` shows: the world, realtime and its clock,
    inference, learners, the algorithm (``--algo NAME --help`` shows only its settings), self-play and
    seats, the run's files."""
    from nonstop.experiment.config import TrainConfig, parse_n_workers
    from nonstop.experiment.record import RecordConfig
    from nonstop.inference.device import parse_device, parse_dtype
    from nonstop.inference.schedulers import SCHEDULER_NAMES
    from nonstop.realtime.defaults import DEFAULT_NAMES

    helps = [a for a in p._actions if type(a) is argparse._HelpAction]
    for own in helps:  # the parser's own -h: the same action, aware of --algo
        own.__class__ = _AlgoHelp
        own.help = "show this help and exit (after --algo NAME: only that algorithm's settings)"
    if not helps:
        p.add_argument("-h", "--help", action=_AlgoHelp, help="show this help (after --algo NAME: its settings only)")
    types: dict[str, Callable[[str], Any]] = {
        "n_inference": arg_type(parse_n_workers),
        "trim_above": str,
        "default": str,
        "device": arg_type(parse_device),
        "dtype": arg_type(parse_dtype),
    }
    shown_as = {"trim_above": "4MiB", "n_inference": "⌈τ̄_θ/τ_M⌉", "default": "the env's own", "dtype": "auto"}

    def run_fields(group: Any, names: tuple[str, ...]) -> None:
        add_fields(group, TrainConfig, names, types=types, unset=("trim_above", "dtype"), shown_as=shown_as)

    world = p.add_argument_group("world")
    run_fields(world, ("env",))
    add_env_module_argument(world)
    world.add_argument(
        "--env-arg",
        action="append",
        metavar="KEY=VALUE",
        help="env keyword argument, repeatable (max_episode_steps=900; tick_hz=20: the world's rate)",
    )
    world.add_argument(
        "--pixels",
        action="store_true",
        help="a continuous world's frames instead of its state: 84x84 grayscale, as Atari's, for the same "
        "encoder (the same as --env-arg pixels=true)",
    )
    run_fields(p.add_argument_group("realtime and clock"), ("clock", "seconds", "default"))
    inference = p.add_argument_group("inference and scheduler")
    run_fields(inference, ("interaction", "scheduler", "n_inference", "latency"))
    inference.add_argument(
        "--scheduler-arg",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the scheduler, repeatable (fill: p_minimax=0.972 from `nonstop tolerance`, "
        "cap=8; quantile_hold: quantile=0.99; default: the scheduler's own)",
    )
    run_fields(inference, ("backend", "ray_address", "trim_above", "device", "dtype", "batch_curve", "max_batch"))
    learners = p.add_argument_group("learners and backends")
    run_fields(learners, ("n_learners", "learner_mode", "tau_l", "learner_backend", "max_restarts", "restart_window"))
    for action in p._actions:  # the choices that live with the parts they choose
        if action.dest == "scheduler":
            action.choices = SCHEDULER_NAMES
        elif action.dest == "default":
            action.choices = DEFAULT_NAMES
    add_algo_arguments(p)
    seats = p.add_argument_group(
        "self-play and seats (self-play: a two-seat world, the learner against a pool of its own past snapshots)"
    )
    add_fields(seats, TrainConfig, ("self_play",))
    add_fields(
        seats, TrainConfig, _SELF_PLAY_FIELDS, unset=_SELF_PLAY_FIELDS, shown_as={"opponent_latency": "--latency"}
    )
    add_fields(seats, TrainConfig, _TEAM_FIELDS)
    files = p.add_argument_group("run files")
    add_fields(files, TrainConfig, ("seed",))
    add_fields(files, RecordConfig, _RECORD_FIELDS, types={"out": str, "episodes": int})
    files.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="RUN",
        help="continue RUN (or the run in --out) from its newest checkpoint, with its saved config: a flag "
        "typed now overrides it and is said at the start (--seconds and --episodes are the run's "
        "totals, earlier segments included)",
    )
    files.add_argument(
        "--trust-module",
        action="store_true",
        help="with --resume: import the module the saved config's world names (module:Id), from PYTHONPATH; "
        "without it such a run is refused (a file runs no code), unless --env-module names the module now",
    )
    p.set_defaults(tensorboard=True, argv=None)  # set by other callers (the demo; the CLI: what was typed)
    files.add_argument(
        "--track",
        action="append",
        metavar="wandb|mlflow",
        help="also send the progress rows, episodes, config and summary to Weights & Biases or MLflow "
        "(repeat, or a comma list; pip install 'nonstop[track]'; see nonstop.learning.tracking; "
        "default: none)",
    )


class _AlgoHelp(argparse._HelpAction):
    """``--help``; after ``--algo NAME``, the settings only other algorithms read are left out, so
    ``--algo sac --help`` shows SAC's and not DQN's."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        algo = getattr(namespace, "algo", None)
        if algo is not None:
            readers = _setting_readers()
            for action in parser._actions:
                if action.dest in readers and algo not in readers[action.dest]:
                    action.help = argparse.SUPPRESS
            if algo != "dqn":
                for action in parser._actions:
                    if action.dest == "preset":  # the paper's DQN settings
                        action.help = argparse.SUPPRESS
        parser.print_help()
        parser.exit()


def _setting_readers() -> dict[str, set[str]]:
    """Each algorithm setting's name, and the algorithms whose config has it."""
    from nonstop.experiment.registry import lookup, names

    readers: dict[str, set[str]] = {}
    for name in names("algo"):
        for f in fields(lookup("algo", name).config_class):
            readers.setdefault(f.name, set()).add(name)
    return readers


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

    group = p.add_argument_group(
        "DQN settings (defaults: the paper's; the env family may override, see DQNConfig.for_family)"
    )
    group.add_argument(
        "--preset",
        choices=sorted(PAPER_PRESETS),
        default=None,
        help="the paper's stated DQN settings (γ, batch, Adam step, replay, k); flags given beside it win "
        "(default: none)",
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

    algorithm = p.add_argument_group("algorithm (each setting's help ends with the --algo that read it)")
    add_fields(algorithm, TrainConfig, ("algo", *_DELAY_FIELDS))
    for action in p._actions:
        if action.dest == "algo":
            action.choices = names("algo")
    algorithm.add_argument(
        "--hyperparams",
        metavar="FILE",
        help="settings per world for this --algo, in the layout of the shipped nonstop/learning/hyperparams/<algo>.yml "
        "(a world id, then its settings): read instead of the shipped file; flags typed win over it "
        "(default: the shipped file)",
    )
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
    readers = _setting_readers()
    for action in p._actions:
        if action.dest in readers and action.help:
            action.help += f" [--algo {', '.join(sorted(readers[action.dest]))}]"


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
        kind = {"float": float, "int": int, "str": str}[type_name.removesuffix(" | None")]  # None: sized to the run
        group.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(), help=text)


def _setting_names() -> set[str]:
    """Every algorithm's settings' names (each one flag)."""
    from nonstop.experiment.registry import lookup, names

    return {f.name for name in names("algo") for f in fields(lookup("algo", name).config_class)}


def settings_from_args(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    """The run the flags describe: its `TrainConfig`, its `RecordConfig` and, under ``--resume``, a line per
    saved setting that a flag typed now overrides (``seconds: 4 → 10``; whether an override is allowed is
    the run log's check, `check_compatible`). A resumed run keeps its saved config and its algorithm.

    ``args`` is read here and nowhere below: the flags become plain values first (`_read_flags`), then each
    lower layer is asked once, in a straight line, and hands back a value: the trackers, the saved config,
    the algorithm, the world's arguments and id, its family."""
    from nonstop.envs import env_info
    from nonstop.envs.registry import import_file_module, parse_env_args, qualify_env_id, split_env_id
    from nonstop.experiment.config import TrainConfig, default_env_kwargs
    from nonstop.experiment.record import RecordConfig
    from nonstop.experiment.registry import lookup
    from nonstop.learning.dqn import PAPER_PRESETS, DQNConfig
    from nonstop.learning.hyperparams import world_entry
    from nonstop.learning.runlog import read_config
    from nonstop.learning.tracking import parse_track

    f = _read_flags(args)
    if f.trust_module and not f.resume:
        raise ValueError(
            "--trust-module trusts the module a resumed run's config.json names: it goes with --resume "
            "(a world typed as --env MODULE:ID is imported as it is)"
        )
    rec = RecordConfig(**f.record, track=parse_track(f.track), resume=f.resume, tensorboard=f.tensorboard)
    saved = read_config(rec.out) if rec.resume and rec.out is not None else None  # RecordConfig asks for RUN
    algo = lookup("algo", (saved.get("algo", "dqn") if saved is not None else f.algo) or "dqn")  # an old run is DQN
    if saved is not None and "algo" in f.typed and f.algo != algo.name:
        raise ValueError(
            f"{rec.out} is a --algo {algo.name} run: it resumes as one (start a new run for --algo {f.algo})"
        )
    given_env = parse_env_args(f.env_args)
    if f.pixels:
        given_env["pixels"] = True
    env = qualify_env_id(f.env, f.env_module)  # MODULE:ID: the module travels with the id to every process
    try:
        family = env_info(env, **given_env).family  # with its arguments: a Game Boy world finds its ROM by rom=PATH
    except TypeError as exc:  # an argument the world does not take: bad input, said as the flag
        if f.pixels and "'pixels'" in str(exc):
            raise ValueError(
                f"--pixels: {env} does not offer its frames (the continuous family does: `nonstop envs`)"
            ) from None
        raise ValueError(f"--env-arg: {exc}") from None
    cls = algo.config_class
    foreign = [n for n in f.settings if n not in {x.name for x in fields(cls)}]
    if foreign:
        flags = ", ".join("--" + n.replace("_", "-") for n in foreign)
        raise ValueError(f"{flags}: not a setting of --algo {algo.name} (its settings: {cls.__name__})")
    if f.preset and cls is not DQNConfig:
        raise ValueError(f"--preset {f.preset} is the paper's DQN settings: it does not apply to --algo {algo.name}")
    if saved is not None and f.hyperparams is not None:
        raise ValueError(
            f"--hyperparams {f.hyperparams} sets a new run's settings: {rec.out} resumes with its saved ones"
        )
    # the world's known settings (`nonstop.learning.hyperparams`), under the preset and the flags typed
    known = world_entry(algo.name, env, f.hyperparams, cls) if saved is None else None
    settings = cls.for_family(
        family,
        **{**(known.settings if known else {}), **(PAPER_PRESETS[f.preset] if f.preset else {}), **f.settings},
    )
    try:
        scheduler_args = parse_env_args(f.scheduler_args)  # KEY=VALUE, values read as JSON
    except ValueError as exc:
        raise ValueError(str(exc).replace("--env-arg", "--scheduler-arg")) from None
    cfg = TrainConfig(
        **{**f.run, "env": env},
        env_kwargs={**default_env_kwargs(family), **given_env},
        algo=algo.name,
        **{algo.settings_field: settings},
        seed=f.seed,
        scheduler_args=scheduler_args,
        **f.self_play,
        **f.trim,
    )
    if saved is None:
        return cfg, rec, []
    fresh = cfg.to_dict()
    keys = {name for name in (*_RUN_FIELDS, *_DELAY_FIELDS, *_SELF_PLAY_FIELDS, "self_play", "seed") if name in f.typed}
    keys |= {"env_kwargs"} if f.typed & {"env_arg", "pixels"} else set()
    keys |= {"scheduler_args"} if "scheduler_arg" in f.typed else set()
    if "agent_id" in f.typed and fresh.get("agent_id", "none") != saved.get("agent_id", "none"):
        raise ValueError(
            f"--agent-id {fresh.get('agent_id', 'none')}: the run was trained with --agent-id "
            f"{saved.get('agent_id', 'none')}, which its network's input depends on"
        )
    merged = {**saved, **{k: fresh[k] for k in keys if k in fresh}}
    if "env_module" in f.typed and "env" not in f.typed:  # the saved world, its module named now
        keys.add("env")
        merged["env"] = qualify_env_id(saved.get("env", fresh["env"]), f.env_module)
    elif "env" not in f.typed:  # the world the file names: its module is imported only if trusted
        module = split_env_id(str(merged.get("env", "")))[0]
        import_file_module(
            str(merged.get("env", "")),
            f"{rec.out}/config.json",
            trust=f.trust_module,
            instead=f", or name it yourself: --env-module {module}",
        )
    field_name = algo.settings_field  # where the algorithm's settings are saved ("dqn" for DQN)
    setting_keys = {x.name for x in fields(cls) if x.name in f.typed or "preset" in f.typed}
    saved_settings = saved.get(field_name) or {}
    merged[field_name] = {**saved_settings, **{k: fresh[field_name][k] for k in setting_keys}}
    resumed = TrainConfig(**merged)
    now = resumed.to_dict()
    lines = [f"{k}: {saved.get(k)!r} → {now.get(k)!r}" for k in sorted(keys) if saved.get(k) != now.get(k)]
    lines += [
        f"{algo.name}.{k}: {saved_settings.get(k)!r} → {now[field_name][k]!r}"
        for k in sorted(setting_keys)
        if saved_settings.get(k) != now[field_name][k]
    ]
    return resumed, rec, lines


@dataclass(frozen=True)
class _Flags:
    """The flags of one `nonstop train`, as plain values (`_read_flags`)."""

    record: dict[str, Any]  # RecordConfig's fields given, --out resolved with --resume RUN
    track: Any  # --track as typed (the trackers are learning.tracking's to parse)
    resume: bool
    tensorboard: bool
    typed: set[str]  # the flags typed (under --resume, where they override the saved config; else empty)
    algo: str | None
    preset: str | None
    settings: dict[str, Any]  # every algorithm setting given (which algorithm's is checked once it is known)
    env: str
    env_module: str | None
    trust_module: bool  # --trust-module: a resumed config's module:Id may be imported
    env_args: Any  # --env-arg's KEY=VALUE items
    pixels: bool
    scheduler_args: Any  # --scheduler-arg's KEY=VALUE items
    run: dict[str, Any]  # TrainConfig's run fields given
    seed: int
    self_play: dict[str, Any]
    trim: dict[str, Any]
    hyperparams: str | None  # --hyperparams FILE: the user's known settings per world


def _read_flags(args: argparse.Namespace) -> _Flags:
    """Every flag of ``args`` as a plain value, and the checks that need no lower layer."""
    given = vars(args)  # every flag the parser defines is set (add_arguments), typed or not
    record = {name: given[name] for name in _RECORD_FIELDS if given[name] is not None}
    resume = args.resume
    if isinstance(resume, str):  # --resume RUN
        if record.get("out") not in (None, resume):
            raise ValueError(f"--resume {resume} and --out {record['out']} name two runs: give one")
        record["out"] = resume
    if not (args.seconds > 0 and math.isfinite(args.seconds)):  # named as the flag, before anything is built
        raise ValueError(f"--seconds must be a positive number of seconds, got {args.seconds}")
    settings = {n: given[n] for n in sorted(_setting_names()) if given[n] is not None}
    if isinstance(settings.get("hidden"), list):
        settings["hidden"] = tuple(settings["hidden"])
    run = {name: given[name] for name in (*_RUN_FIELDS, *_DELAY_FIELDS, *_TEAM_FIELDS) if given[name] is not None}
    run.pop("trim_above", None)
    return _Flags(
        record=record,
        track=args.track,
        resume=bool(resume),
        tensorboard=args.tensorboard,
        typed=given_flags(args) if resume else set(),
        algo=args.algo,
        preset=args.preset,
        settings=settings,
        env=args.env,
        env_module=args.env_module,
        trust_module=args.trust_module,
        env_args=args.env_arg,
        pixels=args.pixels,
        scheduler_args=args.scheduler_arg,
        run=run,
        seed=args.seed,
        self_play=_self_play_settings(args),
        trim=_trim_setting(args),
        hyperparams=args.hyperparams,
    )


def config_from_args(args: argparse.Namespace) -> Any:
    """The `TrainConfig` the flags describe, as a new run (`settings_from_args` without ``--resume``)."""
    return settings_from_args(argparse.Namespace(**{**vars(args), "resume": False}))[0]


def _self_play_settings(args: argparse.Namespace) -> dict[str, Any]:
    given = {n: vars(args)[n] for n in _SELF_PLAY_FIELDS if vars(args)[n] is not None}
    if not args.self_play:
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in given)
            raise ValueError(f"{flags} set{'s' if len(given) == 1 else ''} up self-play: add --self-play")
        return {}
    return {"self_play": True, **given}


def _trim_setting(args: argparse.Namespace) -> dict[str, Any]:
    """``trim_above`` from ``--trim-above``, refused where no worker process exists to trim."""
    from nonstop.policies.memory import parse_min_free

    text = args.trim_above
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
    argv = args.argv  # what the user typed (the CLI sets it; None: compare with the defaults)
    if argv is None:
        return {a.dest for a in parser._actions if vars(args).get(a.dest) != a.default}
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    typed, _ = parser.parse_known_args([a for a in argv if a != "train"])
    return set(vars(typed)) - {"tensorboard", "argv"}  # the parser's own defaults, never typed


def _sized(cfg: Any) -> tuple[str, ...]:
    """The line saying what the run sizes to its length (`nonstop.learning.hyperparams.sized_line`), if any."""
    from nonstop.envs import env_info
    from nonstop.experiment.registry import lookup
    from nonstop.learning.hyperparams import sized_line

    settings = getattr(cfg, lookup("algo", cfg.algo).settings_field)
    line = sized_line(settings, round(cfg.seconds * env_info(cfg.env, **cfg.env_kwargs).tick_hz))
    return () if line is None else (line,)


def run(args: argparse.Namespace) -> int:
    from nonstop._console import Console
    from nonstop.experiment.record import train_in_directory

    console = Console(stderr=True)
    cfg, rec, overrides = settings_from_args(args)
    intro: tuple[str, ...] = ()
    if not rec.resume:
        from nonstop.learning.hyperparams import world_entry

        known = world_entry(cfg.algo, cfg.env, args.hyperparams)
        if known is not None:
            intro = (known.line() + " (a flag typed wins over it)",)
        intro += _sized(cfg)
    if rec.resume:  # the run goes on as it was: only the flags typed now change it, each said
        console.print(
            f"resuming {rec.out} with its saved config" + (f"; overriding {', '.join(overrides)}" if overrides else ""),
            markup=False,
        )
    summary, end, out = train_in_directory(cfg, rec, console=console, intro=intro)
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
            f"return {recent}"
            + (f" (no update: {summary['no_updates_reason']})" if summary.get("no_updates_reason") else "")
            + f"; `nonstop report {out}` draws the plots",
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
                # a run judged against a reference (team self-play: the episodes against a random team)
                **{key: value for key, value in summary.items() if key.startswith("judged_")},
            }
        )
    )
    if end.error is not None:
        raise end.error  # the CLI names it in one line and exits non-zero
    return end.exit_code
