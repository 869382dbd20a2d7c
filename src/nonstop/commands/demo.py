"""The default job (`nonstop demo`): the paper's headline on realtime Boxing, in about half a minute.

1. **The same slow model, sequential and staggered.** One inference takes ``--slow-ticks`` ticks
   (a `LatencyPolicy`, so the comparison is about time, not about what the model knows). Run
   sequentially it acts once per inference and β fills the ticks between; run as ``N_I =
   ⌈τ_θ/τ_M⌉`` staggered workers (Algorithm 2) it acts at every tick with the same delay. A table
   and a plot (timelines of agent vs β ticks) come from the tick logs.
2. **Learning through the slow model, staggered vs sequential.** DQN learns the paper's delay
   world (`theory/delay-cycle`: reward 1 when the action names the current one of 8 states, which
   stays put w.p. 0.97 each tick), small enough to learn within the minute on the virtual clock,
   with the same slow inference: once served by ``N_I`` staggered workers, once sequentially by
   one, each with an asynchronous learner. Both learn the world; the staggered agent acts at every
   tick and earns about ``N_I`` times the return, and the picture shows the two return curves rise.
   Each run is a run directory with its report (`nonstop report`).

On a loaded machine the wall clock may not keep pace: the staggered workers, starved of CPU, act
less often than their schedule and the world fills the gap with β. Then the staggered run's
inaction is the machine's, not the schedule's (the machine diagnosis under the table says so), and
the demo runs the same comparison again on the virtual clock, which no load can hold back, says
plainly that it did and why, and draws its lesson from that run (`lesson_kept`, `LESSON_INACTION`).
``--quick`` caps both parts (a smoke check: 11 s against 32 s on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from nonstop._console import Console

__all__ = ["run_demo", "add_arguments", "learning_curve", "plot_learning", "lesson_kept", "LESSON_INACTION", "QUICK"]

#: the world part 2 learns: small enough that DQN learns it within a minute of world time
LEARN_ENV = "theory/delay-cycle"
LEARN_P = 0.97

#: the most inaction the staggered run may show for part 1 to make its point (sequential: 1 - 1/τ_θ,
#: 83 % at 6 ticks; staggered on an idle machine 0 %, on a 2-core machine with six busy processes 4 %)
LESSON_INACTION = 0.15

#: what ``--quick`` caps: world seconds of each comparison run and of each training run
QUICK = {"seconds": 3.0, "train_seconds": 15.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="Boxing", help="env id (default Boxing)")
    p.add_argument("--seconds", type=float, default=10.0, help="world seconds of each comparison run")
    p.add_argument("--slow-ticks", type=float, default=6.0, help="the slow model's inference time, in ticks")
    p.add_argument("--clock", choices=("wall", "virtual"), default="wall", help="clock of the comparison")
    p.add_argument("--train-seconds", type=float, default=60.0, help="world seconds of each training run (0: skip)")
    p.add_argument("--out", default="nonstop-demo", help="where the plot, tick logs and the run directory go")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke check (11 s against the full demo's 32 s on a loaded 2-core machine): at most {QUICK['seconds']:g} world seconds per comparison "
        f"run and {QUICK['train_seconds']:g} per training run (noisier figures)",
    )


def lesson_kept(result: dict[str, Any], staggered: str = "exp_time", sequential: str = "sequential") -> bool:
    """Whether a comparison shows part 1's lesson: the staggered run's inaction at most `LESSON_INACTION`
    and below the sequential run's. On the wall clock a machine that cannot keep pace breaks it.

    >>> lesson_kept({"schedulers": {"sequential": {"inaction_fraction": 0.83}, "exp_time": {"inaction_fraction": 0.04}}})
    True
    >>> lesson_kept({"schedulers": {"sequential": {"inaction_fraction": 0.83}, "exp_time": {"inaction_fraction": 0.55}}})
    False
    """
    s, e = result["schedulers"][sequential]["inaction_fraction"], result["schedulers"][staggered]["inaction_fraction"]
    return bool(e <= LESSON_INACTION and e < s)


def fresh_dir(out: Path) -> Path:
    """``out`` if it is absent or empty, else the first absent ``out-2``, ``out-3``, …: a second demo
    starts fresh beside the first and never resumes or overwrites it.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> fresh_dir(root / "demo").name
    'demo'
    >>> (root / "demo").mkdir(); (root / "demo" / "plot.png").write_bytes(b"x") and None
    >>> fresh_dir(root / "demo").name
    'demo-2'
    """
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return out
    n = 2
    while (candidate := out.with_name(f"{out.name}-{n}")).exists():
        n += 1
    return candidate


def run_demo(args: argparse.Namespace) -> int:
    from nonstop._console import Console

    _check_and_cap(args)
    console = Console()
    out = fresh_dir(Path(args.out))
    if out != Path(args.out):
        console.print(f"{args.out} holds an earlier demo, kept as it is; this one goes to {out}")
    out.mkdir(parents=True, exist_ok=True)
    _compare_part(args, console, out)
    if args.train_seconds == 0:
        return 0
    return _learning_part(args, console, out)


def _check_and_cap(args: argparse.Namespace) -> None:
    """Refuse non-positive durations, then apply ``--quick``'s caps."""
    for flag, value in (("--seconds", args.seconds), ("--slow-ticks", args.slow_ticks)):
        if not value > 0:
            raise ValueError(f"{flag} must be positive, got {value}")
    if args.train_seconds < 0:
        raise ValueError(f"--train-seconds must be >= 0, got {args.train_seconds}")
    if args.quick:
        given = vars(args)  # the flags QUICK caps, by their parsed names
        given.update({name: min(given[name], cap) for name, cap in QUICK.items()})


def _compare_part(args: argparse.Namespace, console: Console, out: Path) -> None:
    """Part 1: the slow model sequential vs staggered, rerun on the virtual clock if the machine cannot keep pace."""
    from nonstop.commands.compare import compare, plot_compare, render_machine_limits, render_table

    console.rule(f"[bold]1. one slow model ({args.slow_ticks:g} ticks per inference), sequential vs staggered")
    console.print(
        f"realtime {args.env} on the {args.clock} clock, {args.seconds:g} s each; the world never waits.\n"
        f"The slow model is a random policy that declares {args.slow_ticks:g} ticks of inference per action "
        f"(a LatencyPolicy: it sleeps on the wall clock, jumps on the virtual one), so the comparison is about "
        f"time, not about what the model knows; β (noop) fills every tick without a fresh action."
    )

    def run_comparison(clock: str) -> dict[str, Any]:
        return compare(
            args.env,
            f"{args.slow_ticks:g}t",
            seconds=args.seconds,
            clock=clock,
            schedulers=("sequential", "exp_time"),
            progress=lambda name: console.print(f"  running {name} …"),
        )

    result = run_comparison(args.clock)
    render_table(result, console)
    render_machine_limits(result, console)  # on a loaded machine the staggered inaction is the machine's: say so
    kept = lesson_kept(result)
    suffix = "" if kept else f"-{result['clock']}"  # a run that missed the lesson is kept beside the one that shows it
    for name, log in result["logs"].items():
        log.save(out / f"{name}{suffix}.npz")
    if not kept and result["clock"] == "wall":
        e = result["schedulers"]["exp_time"]
        console.print(
            f"This machine could not keep pace with the wall clock: the staggered workers acted every "
            f"{e['tau_i_mean_ticks']:.2f} ticks where every tick was due and left {e['inaction_fraction']:.0%} of "
            f"ticks to β. That is the load on this machine, not the schedule (these tick logs: *-wall.npz). "
            f"The same slow model and schedules on the virtual clock, which no load holds back:",
            style="yellow",
        )
        result = run_comparison("virtual")
        render_table(result, console)
        kept = lesson_kept(result)
        for name, log in result["logs"].items():
            log.save(out / f"{name}.npz")
    if not kept:
        console.print(
            f"The staggered run left {result['schedulers']['exp_time']['inaction_fraction']:.0%} of ticks to β on "
            f"the {result['clock']} clock: this demo could not show its lesson here (--env {args.env}, "
            f"--slow-ticks {args.slow_ticks:g}).",
            style="bold red",
        )
    _summarise_comparison(args, console, result, plot_compare(result, out / "sequential_vs_staggered.png"))


def _summarise_comparison(args: argparse.Namespace, console: Console, result: dict[str, Any], plot: Path) -> None:
    s, e = result["schedulers"]["sequential"], result["schedulers"]["exp_time"]
    console.print(
        f"On the {result['clock']} clock, staggering {result['n_workers']} workers cut inaction from {s['inaction_fraction']:.0%} to "
        f"{e['inaction_fraction']:.0%} at the same delay ({s['delay_mean_ticks']:.1f} vs {e['delay_mean_ticks']:.1f} ticks). "
        f"Plot: {plot}"
    )
    if result["clock"] == "wall":
        console.print(
            f"On the wall clock the delay reads about one tick more than {args.slow_ticks:g}: an action finished "
            "during a tick is applied at the next tick boundary, and the worker's own overhead (reading the "
            "observation, writing the action) pushes an exact-length inference just past one. The virtual "
            "clock has no overhead, so it shows the declared latency exactly.",
            style="dim",
        )


def _learning_part(args: argparse.Namespace, console: Console, out: Path) -> int:
    """Part 2: DQN learns the delay world through the slow model, staggered and sequential; the worst exit code."""
    console.rule(
        f"[bold]2. learning through the slow model: staggered vs sequential ({args.slow_ticks:g} ticks per inference)"
    )
    console.print(
        f"DQN learns {LEARN_ENV} (8 states; reward 1 when the action names the current one; the state stays put "
        f"w.p. {LEARN_P:g} per tick), on the virtual clock, {args.train_seconds:g} world seconds per run, 5-s "
        f"episodes (300 ticks, so at most 300 per episode). Each action is {args.slow_ticks:g} ticks late either "
        "way; the sequential agent also leaves the ticks between its actions to β (noop, reward 0)."
    )
    from nonstop.commands import train as trainer

    codes = {}
    for name, scheduler in (("staggered", "exp_time"), ("sequential", "sequential")):
        console.print(f"  training {name} …")
        parser = argparse.ArgumentParser()
        trainer.add_arguments(parser)
        targs = parser.parse_args(_train_flags(args, scheduler, out / f"train-{name}"))
        targs.tensorboard = False
        with _without_json_line():  # train's last line is JSON for scripts; the demo is read by a person
            codes[name] = trainer.run(targs)
    _show_learning(args, console, out, list(codes))
    return max(codes.values())


def _train_flags(args: argparse.Namespace, scheduler: str, run_dir: Path) -> list[str]:
    """The `nonstop train` command line of one part-2 run."""
    return [
        "--env",
        LEARN_ENV,
        "--env-arg",
        f"p_minimax={LEARN_P}",
        "--env-arg",
        "max_steps=300",
        "--seconds",
        f"{args.train_seconds:g}",
        "--latency",
        f"{args.slow_ticks:g}t",
        "--scheduler",
        scheduler,
        "--lr",
        "1e-3",
        "--batch-size",
        "32",
        "--epsilon-ticks",
        "1500",
        "--epsilon-end",
        "0.02",
        "--learning-starts",
        "200",
        "--target-update",
        "200",
        "--replay-capacity",
        "20000",
        "--progress-every",
        f"{max(args.train_seconds / 6, 1):g}",
        "--checkpoint-every",
        f"{args.train_seconds:g}",
        "--checkpoint-replay",
        "no",
        "--out",
        str(run_dir),
    ]


def _show_learning(args: argparse.Namespace, console: Console, out: Path, names: list[str]) -> None:
    """The two return curves, their first vs last quarter, and the staggered run's report headline."""
    picture = plot_learning(
        {name: out / f"train-{name}" for name in names}, out / "learning_staggered_vs_sequential.png"
    )
    curves = {name: learning_curve(out / f"train-{name}") for name in names}
    for name, (_, returns) in curves.items():
        if len(returns):
            head, tail = returns[: max(1, len(returns) // 4)], returns[-max(1, len(returns) // 4) :]
            console.print(
                f"  {name}: episode return {sum(head) / len(head):.0f} → {sum(tail) / len(tail):.0f} "
                f"(first vs last quarter of {len(returns)} episodes)"
            )
    console.print(
        f"Both agents learn the world; staggering makes the slow model act at every tick, so it earns its return "
        f"on every tick instead of one in {args.slow_ticks:g}. Picture: {picture}"
    )
    from nonstop.studies.report import build_report, render_headline, write_html, write_markdown

    staggered = build_report(out / "train-staggered")
    write_markdown(staggered)
    console.print(
        f"The staggered run in five figures (every figure: {write_html(staggered)}, or `nonstop report "
        f"{out / 'train-staggered'}`):",
        markup=False,
    )
    render_headline(staggered, console)
    console.print(
        "A slow model acts at every tick when its inference is staggered; learning runs beside it and never blocks an action."
    )


class _DropJsonLine(io.TextIOBase):
    """stdout without the one JSON line `nonstop train` prints last (``{"run_dir": ...}``)."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._dropping = False

    def write(self, text: str) -> int:
        if text.startswith('{"run_dir"'):
            self._dropping = True
            return len(text)
        if self._dropping and text == "\n":
            self._dropping = False
            return len(text)
        self._dropping = False
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()


@contextlib.contextmanager
def _without_json_line() -> Iterator[None]:
    with contextlib.redirect_stdout(_DropJsonLine(sys.stdout)):
        yield


def learning_curve(run_dir: Path) -> tuple[list[float], list[float]]:
    """(world seconds at each episode's end, its return) from a run's ``episodes.csv``."""
    import csv

    from nonstop.envs import env_info
    from nonstop.learning.runlog import read_config

    cfg = read_config(run_dir)
    tick_hz = env_info(cfg["env"], **(cfg.get("env_kwargs") or {})).tick_hz or 60.0
    times, returns = [], []
    path = Path(run_dir) / "episodes.csv"
    if path.exists():
        with path.open() as f:
            for row in csv.DictReader(f):
                times.append(int(row["end_tick"]) / tick_hz)
                returns.append(float(row["return"]))
    return times, returns


def plot_learning(runs: dict[str, Path], path: Path) -> Path:
    """Episode return against world time for each named run, on one axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, run_dir in runs.items():
        times, returns = learning_curve(run_dir)
        ax.plot(times, returns, marker="o", ms=3, label=name)
    ax.set_xlabel("world seconds")
    ax.set_ylabel("episode return (max 300)")
    ax.set_title("DQN through a slow model: staggered vs sequential inference")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


HELP = "the default job: the paper's headline on realtime Boxing (about half a minute)"
run = run_demo
