"""``nonstop train``: a realtime training run a user can start, watch, stop and resume.

The flags are `TrainConfig`'s and `RecordConfig`'s fields (`nonstop.experiment.config`,
`nonstop.experiment.record`) and each algorithm's config's (``--algo``: its ``config_class``), defaults
and help taken from them. The command reads its flags once into a `TrainRequest` and hands it down
(`nonstop.experiment.request.train`): the library resolves the world, the settings (hyperparameter file,
preset, flags) and a resumed run's saved config, and runs it. ``nonstop report RUN`` plots a run.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import fields
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nonstop.commands._flags import add_env_module_argument, add_fields, arg_type, shown

__all__ = [
    "HELP",
    "add_arguments",
    "run",
    "request_from_args",
    "settings_from_args",
    "config_from_args",
    "add_algo_arguments",
]

if TYPE_CHECKING:
    from nonstop.experiment.request import TrainRequest

HELP = "train an algorithm (--algo) in a realtime world: staggered inference, asynchronous learners"

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
_SELF_PLAY_FIELDS = ("opponents", "snapshot_every", "pool_size", "opponent_latency", "trials")
_RECORD_FIELDS = ("out", "episodes", "progress_every", "checkpoint_every", "keep_checkpoints", "checkpoint_replay")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``nonstop train``'s flags, in the groups ``--help`` shows: the world, realtime and its clock,
    inference, learners, the algorithm (``--algo NAME --help`` shows only its settings), self-play and
    seats, the run's files."""
    from nonstop.experiment.config import TrainConfig, parse_n_workers
    from nonstop.inference.device import parse_device, parse_dtype

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

    _world_and_run_flags(p, run_fields)
    add_algo_arguments(p)
    _seat_flags(p)
    _file_flags(p)


def _world_and_run_flags(p: argparse.ArgumentParser, run_fields: Callable[[Any, tuple[str, ...]], None]) -> None:
    """The world, realtime and its clock, inference and the scheduler, learners and backends."""
    from nonstop.inference.schedulers import SCHEDULER_NAMES
    from nonstop.realtime.defaults import DEFAULT_NAMES

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


def _seat_flags(p: argparse.ArgumentParser) -> None:
    """Self-play and the seats' identities."""
    from nonstop.experiment.config import TrainConfig

    seats = p.add_argument_group(
        "self-play and seats (self-play: a two-seat world, the learner against a pool of its own past snapshots)"
    )
    add_fields(seats, TrainConfig, ("self_play",))
    add_fields(
        seats, TrainConfig, _SELF_PLAY_FIELDS, unset=_SELF_PLAY_FIELDS, shown_as={"opponent_latency": "--latency"}
    )
    add_fields(seats, TrainConfig, _TEAM_FIELDS)


def _file_flags(p: argparse.ArgumentParser) -> None:
    """The run's files: seed, output, checkpoints, resume, trackers."""
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.record import RecordConfig

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
        from nonstop.experiment.registry import lookup

        algo = namespace.algo  # argparse sets every flag's default before the first action runs
        if algo is not None:
            readers = _setting_readers()
            for action in parser._actions:
                if action.dest in readers and algo not in readers[action.dest]:
                    action.help = argparse.SUPPRESS
                if action.dest == "preset" and not lookup("algo", algo).presets:  # no named settings of its own
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


def add_algo_arguments(p: argparse.ArgumentParser) -> None:
    """``--algo`` (the registry's algorithms) and one flag per setting of each algorithm's config, its help
    and default taken from the dataclass: a group per algorithm, in the registry's order, with the settings
    no group before it has (and ``--preset``, in the first group whose algorithm names some). A flag left out
    keeps the env family's value, so every setting's parsed default is None.

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
    taken = {a.dest for a in p._actions}
    for name in names("algo"):
        algo = lookup("algo", name)
        cls = algo.config_class
        mine = [f for f in fields(cls) if f.name not in taken]
        shared = [f for f in fields(cls) if f.name in taken and f.name != "algo"]
        if not mine and not shared:
            continue
        defaults = ", ".join(f"{f.name} {shown(f.default)}" for f in shared if f.default is not None)
        group = p.add_argument_group(
            f"{name.upper()} settings (--algo {name}; defaults: its own, the env family may override, see "
            f"{cls.__name__}.for_family" + (f"; the flags above that it shares take {defaults})" if defaults else ")")
        )
        if algo.presets and "preset" not in taken:
            _add_preset(group)
            taken.add("preset")
        for f in mine:
            _add_setting(group, f, f.default, _by_family(cls, f.name, f.default))
            taken.add(f.name)
    readers = _setting_readers()
    for action in p._actions:
        if action.dest in readers and action.help:
            action.help += f" [--algo {', '.join(sorted(readers[action.dest]))}]"


def _add_preset(group: Any) -> None:
    """``--preset``: named settings an algorithm declares (`Algorithm.presets`: DQN's are the paper's)."""
    from nonstop.experiment.registry import lookup, names

    presets = sorted({preset for name in names("algo") for preset in lookup("algo", name).presets})
    group.add_argument(
        "--preset",
        choices=presets,
        default=None,
        help="named settings of the --algo (the paper's stated ones: γ, batch, Adam step, replay, k); flags given "
        "beside it win (default: none)",
    )


def _by_family(cls: Any, name: str, default: Any) -> str:
    """What each world family changes of setting ``name`` (``family_defaults``), in words."""
    return ", ".join(
        f"{family} {values[name]!r}"
        for family, values in cls.family_defaults.items()
        if name in values and values[name] != default
    )


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
        type_name = f.type if isinstance(f.type, str) else f.type.__name__
        kind = {"float": float, "int": int, "str": str}[type_name.removesuffix(" | None")]  # None: sized to the run
        group.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(), help=text)


def _setting_names() -> set[str]:
    """Every algorithm's settings' names (each one flag)."""
    from nonstop.experiment.registry import lookup, names

    return {f.name for name in names("algo") for f in fields(lookup("algo", name).config_class)}


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """The `TrainRequest` the flags make (`nonstop.experiment.request`): each flag read once, named as the
    config's field, and the checks that need no lower layer; the texts another part defines (the world's id
    and module, KEY=VALUE items, trackers, a size) go down as typed, for the library to read. ``args`` is read
    here and nowhere below."""
    from nonstop.experiment.request import TrainRequest

    given = vars(args)  # the flags named by the configs' fields (every one set by the parser, typed or not)
    typed = _as_config_names(given_flags(args)) if args.resume else frozenset()
    record = {name: given[name] for name in _RECORD_FIELDS if given[name] is not None}
    if isinstance(args.resume, str):  # --resume RUN
        if record.get("out") not in (None, args.resume):
            raise ValueError(f"--resume {args.resume} and --out {record['out']} name two runs: give one")
        record["out"] = args.resume
    if not (args.seconds > 0 and math.isfinite(args.seconds)):  # named as the flag, before anything is built
        raise ValueError(f"--seconds must be a positive number of seconds, got {args.seconds}")
    if args.trust_module and not args.resume:
        raise ValueError(
            "--trust-module trusts the module a resumed run's config.json names: it goes with --resume "
            "(a world typed as --env MODULE:ID is imported as it is)"
        )
    run = {  # the world and the size of a trimmed heap are texts, handed down as typed
        n: given[n]
        for n in (*_RUN_FIELDS, *_DELAY_FIELDS, *_TEAM_FIELDS)
        if n not in ("env", "trim_above") and given[n] is not None
    }
    settings = {name: given[name] for name in sorted(_setting_names()) if given[name] is not None}
    if isinstance(settings.get("hidden"), list):
        settings["hidden"] = tuple(settings["hidden"])
    self_play = _self_play(args.self_play, {name: given[name] for name in _SELF_PLAY_FIELDS if given[name] is not None})
    return TrainRequest(
        algo=args.algo,
        env=args.env,
        env_module=args.env_module,
        env_args=tuple(args.env_arg or ()),
        pixels=args.pixels,
        scheduler_args=tuple(args.scheduler_arg or ()),
        trim_above=args.trim_above,
        run={**run, **self_play, "seed": args.seed},
        settings=settings,
        preset=args.preset,
        hyperparams=args.hyperparams,
        record={**record, "tensorboard": args.tensorboard},
        track=tuple(args.track or ()),
        resume=bool(args.resume),
        trust_module=args.trust_module,
        typed=typed,
    )


def _self_play(self_play: bool, given: dict[str, Any]) -> dict[str, Any]:
    """``--self-play`` and its settings ``given``; a setting without it is refused."""
    if not self_play:
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in given)
            raise ValueError(f"{flags} set{'s' if len(given) == 1 else ''} up self-play: add --self-play")
        return {}
    return {"self_play": True, **given}


def _as_config_names(flags: set[str]) -> frozenset[str]:
    """The flags typed, by the config's names: ``--env-arg`` and ``--pixels`` set ``env_kwargs``,
    ``--scheduler-arg`` ``scheduler_args``; the others are named as their fields."""
    renamed = {"env_arg": "env_kwargs", "pixels": "env_kwargs", "scheduler_arg": "scheduler_args"}
    return frozenset(renamed.get(flag, flag) for flag in flags)


def settings_from_args(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    """The run the flags describe: its `TrainConfig`, its `RecordConfig` and, under ``--resume``, a line per
    saved setting that a flag typed now overrides (`nonstop.experiment.request.resolve`)."""
    from nonstop.experiment.request import resolve

    plan = resolve(request_from_args(args))
    return plan.cfg, plan.rec, plan.overrides


def config_from_args(args: argparse.Namespace) -> Any:
    """The `TrainConfig` the flags describe, as a new run (`settings_from_args` without ``--resume``)."""
    return settings_from_args(argparse.Namespace(**{**vars(args), "resume": False}))[0]


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


def run(args: argparse.Namespace) -> int:
    from nonstop._console import Console
    from nonstop.experiment.request import train

    request = request_from_args(args)
    console = Console(stderr=True)
    summary, end, out = train(request, console=console)
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
