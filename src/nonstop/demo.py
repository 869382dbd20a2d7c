"""The default job (`nonstop demo`): the paper's headline on realtime Boxing, in about five minutes.

1. **The same slow model, sequential and staggered.** One inference takes ``--slow-ticks`` ticks
   (a `LatencyPolicy`, so the comparison is about time, not about what the model knows). Run
   sequentially it acts once per inference and β fills the ticks between; run as ``N_I =
   ⌈τ_θ/τ_M⌉`` staggered workers (Algorithm 2) it acts at every tick with the same delay. A table
   and a plot (timelines of agent vs β ticks) come from the tick logs.
2. **A short staggered training run**: DQN on 84×84 Boxing with the paper's IMPALA ResNet (k=1),
   the same slow inference served by staggered workers, one asynchronous learner, on the virtual
   clock (updates take their measured-on-this-machine ~0.25 s of world time), in 10-second
   episodes so that returns appear, written to a run directory with its report (`nonstop report`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["run_demo", "add_arguments"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="Boxing", help="env id (default Boxing)")
    p.add_argument("--seconds", type=float, default=10.0, help="world seconds of each comparison run")
    p.add_argument("--slow-ticks", type=float, default=6.0, help="the slow model's inference time, in ticks")
    p.add_argument("--clock", choices=("wall", "virtual"), default="wall", help="clock of the comparison")
    p.add_argument("--train-seconds", type=float, default=60.0, help="world seconds of the training run (0: skip)")
    p.add_argument("--out", default="nonstop-demo", help="where the plot, tick logs and the run directory go")


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
    from rich.console import Console

    from nonstop.compare import compare, plot_compare, render_table

    for name in ("seconds", "slow_ticks"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.train_seconds < 0:
        raise ValueError(f"--train-seconds must be >= 0, got {args.train_seconds}")
    console = Console()
    out = fresh_dir(Path(args.out))
    if out != Path(args.out):
        console.print(f"{args.out} holds an earlier demo, kept as it is; this one goes to {out}")
    out.mkdir(parents=True, exist_ok=True)
    console.rule(f"[bold]1. one slow model ({args.slow_ticks:g} ticks per inference), sequential vs staggered")
    console.print(f"realtime {args.env} on the {args.clock} clock, {args.seconds:g} s each; the world never waits.\n"
                  f"The slow model is a random policy that declares {args.slow_ticks:g} ticks of inference per action "
                  f"(a LatencyPolicy: it sleeps on the wall clock, jumps on the virtual one), so the comparison is about "
                  f"time, not about what the model knows; β (noop) fills every tick without a fresh action.")  # fmt: skip
    result = compare(
        args.env, f"{args.slow_ticks:g}t", seconds=args.seconds, clock=args.clock,
        schedulers=("sequential", "exp_time"), progress=lambda name: console.print(f"  running {name} …"),
    )  # fmt: skip
    render_table(result, console)
    plot = plot_compare(result, out / "sequential_vs_staggered.png")
    for name, log in result["logs"].items():
        log.save(out / f"{name}.npz")
    s, e = result["schedulers"]["sequential"], result["schedulers"]["exp_time"]
    console.print(
        f"staggering {result['n_workers']} workers cut inaction from {s['inaction_fraction']:.0%} to "
        f"{e['inaction_fraction']:.0%} at the same delay ({s['delay_mean_ticks']:.1f} vs {e['delay_mean_ticks']:.1f} ticks). "
        f"Plot: {plot}"
    )  # fmt: skip
    if args.clock == "wall":
        console.print(f"On the wall clock the delay reads about one tick more than {args.slow_ticks:g}: an action finished "
                      "during a tick is applied at the next tick boundary, and the worker's own overhead (reading the "
                      "observation, writing the action) pushes an exact-length inference just past one. The virtual "
                      "clock has no overhead, so it shows the declared latency exactly.", style="dim")  # fmt: skip
    if args.train_seconds == 0:
        return 0
    console.rule("[bold]2. a short staggered training run (DQN, IMPALA ResNet k=1, asynchronous learner)")
    from nonstop import report, trainer

    run_dir = out / "train"
    parser = argparse.ArgumentParser()
    trainer.add_arguments(parser)
    targs = parser.parse_args([
        "--env", args.env, "--env-arg", "max_episode_steps=600", "--seconds", f"{args.train_seconds:g}", "--latency", f"{args.slow_ticks:g}t",
        "--tau-l", "0.25", "--replay-capacity", "20000", "--learning-starts", "300", "--lr", "1e-4",
        "--progress-every", f"{max(args.train_seconds / 8, 1):g}", "--checkpoint-every", f"{args.train_seconds:g}",
        "--checkpoint-replay", "no", "--out", str(run_dir),
    ])  # fmt: skip
    targs.tensorboard = False
    code = trainer.run_train(targs)
    console.print("Episodes are 10 s (600 ticks) so returns appear within the minute; the short inaction spikes every "
                  "10 s in the report are the episode resets (the world restarts and the workers' in-flight actions, "
                  "computed in the old episode, are dropped as stale).", style="dim")  # fmt: skip
    rparser = argparse.ArgumentParser()
    report.add_arguments(rparser)
    report.run_report(rparser.parse_args([str(run_dir)]))
    console.print("A slow model acts at every tick when its inference is staggered; learning runs beside it and never blocks an action.")
    return code
