"""The default job: the same realtime world played by a fast agent and by a
deliberately slow one, with each one's tick-log summary side by side.

The slow agent takes several ticks per decision, so the world applies β on the
ticks in between: its inaction and delay are measured, not assumed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nonstop.realtime.host import Session

ROWS = (
    ("ticks", "ticks", "{:d}"),
    ("agent_ticks", "agent ticks", "{:d}"),
    ("inaction_fraction", "inaction", "{:.1%}"),
    ("tau_i_mean_ticks", "τ_I mean (ticks)", "{:.2f}"),
    ("tau_i_cv", "τ_I CV", "{:.3f}"),
    ("delay_mean_ticks", "delay mean (ticks)", "{:.2f}"),
    ("delay_max_ticks", "delay max (ticks)", "{:d}"),
    ("lateness_p50_us", "tick lateness p50 (µs)", "{:.0f}"),
    ("lateness_p99_us", "tick lateness p99 (µs)", "{:.0f}"),
    ("overruns", "overruns", "{:d}"),
    ("superseded", "superseded actions", "{:d}"),
    ("reward_total", "reward", "{:.0f}"),
    ("episodes_completed", "episodes completed", "{:d}"),
)


def play(env: str, *, clock: str, seconds: float, latency_ticks: float, seed: int, progress: Any = None) -> Any:
    """One agent (sequential scheduler, random policy with a declared latency) for ``seconds``."""
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.policies import Constant, LatencyPolicy, RandomPolicy

    with Session(env, clock=clock, seed=seed) as world:
        latency = Constant(latency_ticks * world.tau_m)

        def policy(i: int) -> LatencyPolicy:
            base = RandomPolicy(world.action_space)
            base.seed(seed + i)
            return LatencyPolicy(base, latency, seed=seed + i)

        pool = InferencePool(world, policy, make_scheduler("sequential", 1)).start()
        try:
            step = min(0.25, seconds)
            elapsed = 0.0
            while elapsed < seconds:
                world.run_for(min(step, seconds - elapsed))
                elapsed += step
                if progress is not None:
                    progress()
        finally:
            pool.stop()
    return world.tick_log


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    if args.seconds <= 0:
        raise ValueError(f"--seconds must be positive, got {args.seconds}")
    if args.slow_ticks < 0:
        raise ValueError(f"--slow-ticks must be non-negative, got {args.slow_ticks}")
    console = Console()
    console.print(
        f"[bold]nonstop demo[/]: realtime {args.env} on the {args.clock} clock, {args.seconds:g} s per agent.\n"
        f"fast agent: inference ≈ 0 ticks · slow agent: inference {args.slow_ticks:g} ticks (β = env default)"
    )
    agents = {"fast": 0.0, f"slow ({args.slow_ticks:g} ticks)": args.slow_ticks}
    logs = {}
    with Progress(console=console, transient=True) as bar:
        for name, ticks in agents.items():
            task = bar.add_task(f"{name} agent playing", total=args.seconds / 0.25)
            logs[name] = play(
                args.env, clock=args.clock, seconds=args.seconds, latency_ticks=ticks, seed=0,
                progress=lambda t=task: bar.advance(t),
            )  # fmt: skip
    table = Table(title=f"tick-log summary — {args.env} at {logs['fast'].meta.get('tick_hz', 0):g} Hz")
    table.add_column("metric")
    for name in logs:
        table.add_column(name, justify="right")
    summaries = {name: log.summary(warmup_ticks=5) for name, log in logs.items()}
    for key, label, fmt in ROWS:
        cells = []
        for s in summaries.values():
            v = s[key]
            cells.append("—" if v != v else fmt.format(v))
        table.add_row(label, *cells)
    console.print(table)
    if args.save:
        out = Path(args.save)
        for i, (name, log) in enumerate(logs.items()):
            path = log.save(out / f"{['fast', 'slow'][i]}.npz")
            console.print(f"saved {path}")
    console.print("A slower agent does not stop the world: it hands more ticks to β and acts on older observations.")
    return 0
