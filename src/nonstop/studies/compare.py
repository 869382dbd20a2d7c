"""Schedulers side by side on one world and one latency (what ``nonstop compare`` runs).

The same env, the same model latency (a `LatencyPolicy` over a `RandomPolicy`), the same seed, run
once per scheduler, each a `nonstop.experiment.run.Run` of stand-ins (`nonstop.experiment.standins`):

* ``sequential``  — one worker: acts once per τ_θ, β fills the ticks in between;
* ``unstaggered`` — N workers that all fire together: N actions per τ_θ, but the env takes one per
  tick, so the newest wins and the rest are superseded (about as much inaction as sequential);
* ``max_time``    — Algorithm 1: N workers staggered by the running maximum τ̂_θmax;
* ``exp_time``    — Algorithm 2: N workers staggered by the running mean τ̄_θ.

N defaults to ``⌈τ̄_θ/τ_M⌉`` (the N_I* of Algorithm 2; Algorithm 1 needs ``⌈τ_θmax/τ_M⌉``, so
with a spread-out latency ``max_time`` keeps some inaction at this N). ``--schedulers`` picks any
of `nonstop.inference.schedulers.SCHEDULER_NAMES` instead (``quantile_hold``, ``auto``, ``fill``, …).
Every figure comes from the tick log after a warm-up (the first round, when all workers start
together); each row reports the reward per tick beside inaction and delay. On the wall clock a busy
machine adds inaction no scheduler causes: `machine_diagnosis` says so, with the same reading
`nonstop train` makes (`nonstop.metrics.limits`), and the table is followed by it.

>>> result = compare("theory/inaction", "4t", seconds=5.0)
>>> {name: round(s["inaction_fraction"], 2) for name, s in result["schedulers"].items()}
{'sequential': 0.75, 'unstaggered': 0.75, 'max_time': 0.0, 'exp_time': 0.0}
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nonstop.metrics.timing import episode_returns

__all__ = [
    "cell",
    "SCHEDULERS",
    "CLOCKS",
    "TIMELINE_TICKS",
    "COMPARE_REMEDY",
    "resolve_n_workers",
    "default_plot_path",
    "CompareRun",
    "run_scheduler",
    "compare",
    "machine_diagnosis",
    "plot_compare",
    "to_json",
]


#: The schedulers compared, in table order.
SCHEDULERS = ("sequential", "unstaggered", "max_time", "exp_time")


CLOCKS = ("virtual", "wall")


#: Ticks shown in each timeline of the plot.
TIMELINE_TICKS = 240


#: What a user of `nonstop compare` or `nonstop demo` can change when the machine is the limit.
COMPARE_REMEDY = (
    "use --clock virtual (the same schedulers, exact on any machine), or run it on an idle machine "
    "or one with more cores"
)


def resolve_n_workers(n_workers: Any, latency_mean_s: float, tau_m: float) -> int:
    """``n_workers`` checked, or for ``"auto"``/``None`` the N_I* of Algorithm 2, ``⌈τ̄_θ/τ_M⌉``.

    >>> resolve_n_workers("auto", 0.1, 1 / 60), resolve_n_workers(None, 0.001, 1 / 60), resolve_n_workers(3, 0.1, 1 / 60)
    (6, 1, 3)
    >>> resolve_n_workers(0, 0.1, 1 / 60)
    Traceback (most recent call last):
    ...
    ValueError: n_workers must be >= 1 (or 'auto'), got 0
    """
    from nonstop.metrics.nstar import theoretical_nstar

    if n_workers is None or (isinstance(n_workers, str) and n_workers.strip().lower() == "auto"):
        return theoretical_nstar(latency_mean_s, tau_m)
    if isinstance(n_workers, bool) or not isinstance(n_workers, numbers.Integral):
        raise TypeError(f"n_workers must be a positive int or 'auto', got {type(n_workers).__name__} {n_workers!r}")
    if int(n_workers) < 1:
        raise ValueError(f"n_workers must be >= 1 (or 'auto'), got {n_workers}")
    return int(n_workers)


def _check_seconds(seconds: Any) -> float:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, numbers.Real)
        or not (math.isfinite(seconds) and float(seconds) > 0)
    ):
        raise ValueError(f"seconds must be a positive number of world seconds, got {seconds!r}")
    return float(seconds)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return int(seed)


def _latency(spec: Any, tick_hz: float) -> Any:
    from nonstop.policies import parse_latency

    if not isinstance(spec, str):  # each scheduler's run parses it again (its config is plain data)
        raise TypeError(f"latency must be a spec string (e.g. '6t', 'lognormal:100ms,0.5'), got {spec!r}")
    return parse_latency(spec, tick_hz=tick_hz)


def default_plot_path(env: str) -> Path:
    """``runs/compare-<env>.png``, the env id made file-safe.

    >>> str(default_plot_path("ALE/Boxing-v5"))
    'runs/compare-ALE_Boxing-v5.png'
    """
    return Path("runs") / f"compare-{re.sub(r'[^A-Za-z0-9._-]+', '_', env)}.png"


@dataclass(frozen=True)
class CompareRun:
    """What every scheduler's run of a comparison shares: the world ``env``, the declared ``latency``,
    the run's world ``seconds``, its ``clock`` and ``seed``, and where the workers' policies run
    (``backend``, ``ray_address``). Checked at the door.

    >>> CompareRun("theory/inaction", "4t", clock="sundial")
    Traceback (most recent call last):
    ...
    ValueError: clock must be one of ('virtual', 'wall'), got 'sundial'
    """

    env: str
    latency: str
    seconds: float = 10.0
    clock: str = "virtual"
    seed: int = 0
    backend: str = "thread"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _check_seconds(self.seconds))
        object.__setattr__(self, "seed", _check_seed(self.seed))
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {self.clock!r}")

    def config(self, scheduler: str, n_workers: int) -> Any:
        """One scheduler's run: stand-ins under ``scheduler``, their policies where ``backend`` hosts them."""
        from nonstop.experiment.config import TrainConfig

        return TrainConfig(
            env=self.env,
            clock=self.clock,
            seconds=self.seconds,
            interaction="stand_in",
            scheduler=scheduler,
            n_inference=n_workers,
            latency=self.latency,
            seed=self.seed,
            backend=self.backend,
            ray_address=self.ray_address,
        )


def run_scheduler(run: CompareRun, scheduler: str, n_workers: int) -> Any:
    """Run ``run.env`` for ``run.seconds`` with ``n_workers`` workers under ``scheduler``; return the tick log.

    One `Run` of stand-ins (`nonstop.experiment.standins`: each worker a random action after the
    declared latency, nothing learning), its workers' policies where ``run.backend`` puts them. The
    ticks before every worker started and after the measured window ends belong to no scheduler:
    the log's meta marks both (``agents_started_at_tick``, ``agents_stopped_at_tick``).
    """
    return _run(run.config(scheduler, n_workers))


def _run(cfg: Any) -> Any:
    """The tick log of one `Run` of ``cfg`` for its ``seconds``."""
    from nonstop.experiment.run import Run

    run = Run(cfg)
    try:
        run.build().start()
        run.advance(cfg.seconds)
        # the measured window ends here: on the wall clock the host ticks on (β) while the
        # pool and the world stop, and those ticks belong to no scheduler
        run.world.annotate("agents_stopped_at_tick", int(run.world.slot.read().tick))
    finally:
        run.teardown()
    return run.world.tick_log


def _episode_return(log: Any) -> tuple[float, str, int]:
    """(value, kind, completed): the mean return of completed episodes, or, if none completed,
    the reward total of the whole run."""
    returns = episode_returns(log)
    if returns:
        return float(sum(returns) / len(returns)), "mean_completed", len(returns)
    return float(log["reward"].sum()) if len(log) else 0.0, "total", 0


def compare(
    env: str = "Boxing",
    latency: str = "6t",
    *,
    n_workers: int | str | None = "auto",
    schedulers: tuple[str, ...] = SCHEDULERS,
    progress: Any = None,
    **run: Any,
) -> dict[str, Any]:
    """Run every scheduler in ``schedulers`` on ``env`` with the same latency and seed.

    Returns ``{"env", "tick_hz", "latency", "latency_mean_ticks", "latency_max_ticks", "n_workers",
    "seconds", "clock", "seed", "warmup_ticks", "schedulers": {name: summary}, "logs": {name: TickLog},
    "machine_limits": [line, ...]}`` (`machine_diagnosis`; on the wall clock each summary also has
    the machine's ``load_average`` as its run ended). A summary is
    `nonstop.metrics.timing.summarize` after the warm-up plus ``n_workers``, ``episode_return``,
    ``episode_return_kind`` (``"mean_completed"`` or ``"total"``) and ``episodes_ended``.
    ``run``: what every scheduler's run shares besides ``env`` and ``latency``, the fields of
    `CompareRun` (``seconds``, ``clock``, ``seed``, ``backend``, ``ray_address``).
    Bad inputs raise ``ValueError``/``TypeError`` before anything runs.
    """
    from nonstop.envs import env_info
    from nonstop.experiment.registry import constraint

    if not isinstance(env, str):
        raise TypeError(f"env must be an env id string, got {type(env).__name__} {env!r}")
    info = env_info(env)  # an unknown id fails here with the registry's message
    dist = _latency(latency, info.tick_hz)
    shared = CompareRun(env, latency, **run)
    seconds, clock = shared.seconds, shared.clock
    tau_m = 1.0 / info.tick_hz
    n = resolve_n_workers(n_workers, dist.mean, tau_m)
    _check_schedulers(schedulers, n)
    # a backend that cannot host stand-ins fails here, before any run
    configs = {name: shared.config(name, 1 if name == "sequential" else n) for name in schedulers}
    total_ticks = int(seconds * info.tick_hz)
    # The first round (all workers start together) plus two cycles to settle, at most a quarter of the run.
    warmup = min(3 * math.ceil(dist.max_hint / tau_m - 1e-9) + 30, total_ticks // 4)
    logs, summaries = {}, {}
    for name in schedulers:
        if progress is not None:
            progress(name)
        logs[name] = _run(configs[name])
        summaries[name] = _scheduler_summary(logs[name], configs[name].n_inference, warmup, clock)
    result = {
        "env": env,
        "tick_hz": info.tick_hz,
        "latency": repr(dist),
        "latency_mean_ticks": dist.mean / tau_m,
        "latency_max_ticks": dist.max_hint / tau_m,
        "n_workers": n,
        "seconds": seconds,
        "clock": clock,
        "seed": shared.seed,
        "backend": shared.backend,
        # processes the workers keep busy beside this one and the host's (threads: none)
        "worker_processes": n * constraint("policy_host", shared.backend).processes_per_worker,
        "warmup_ticks": warmup,
        "schedulers": summaries,
        "logs": logs,
    }
    result["machine_limits"] = machine_diagnosis(result)
    return result


def _check_schedulers(schedulers: tuple[str, ...], n: int) -> None:
    """Build each scheduler once, so that an unknown name fails before any run."""
    from nonstop.inference.schedulers import make_scheduler

    for name in schedulers:
        make_scheduler(name, 1 if name == "sequential" else n)


def _scheduler_summary(log: Any, workers: int, warmup: int, clock: str) -> dict[str, Any]:
    """One scheduler's row: the tick log's figures after the warm-up, its return, and the machine's load."""
    started = log.meta.get("agents_started_at_tick", 0)
    summary: dict[str, Any] = log.summary(
        warmup_ticks=started + warmup, end_tick=log.meta.get("agents_stopped_at_tick")
    )
    value, kind, ended = _episode_return(log)
    summary.update(
        n_workers=workers,
        episode_return=value,
        episode_return_kind=kind,
        episodes_ended=ended,
        reward_per_tick=summary["reward_total"] / summary["ticks"] if summary["ticks"] else None,
    )
    overhead = log.meta.get("workers", {}).get("remote_overhead_s")
    if overhead is not None:
        summary["remote_overhead_s"] = overhead
    if clock == "wall" and hasattr(os, "getloadavg"):
        summary["load_average"] = os.getloadavg()[0]  # the last minute's, as the run ends
    return summary


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine_diagnosis(result: dict[str, Any], *, cores: int | None = None) -> list[str]:
    """What `nonstop.metrics.limits` reads in each scheduler's figures: a line per finding, named by its
    scheduler, then one saying the machine is the limit and what to change; ``[]`` when nothing shows
    (always on the virtual clock). ``cores`` defaults to the cores this process may use.

    >>> wall = {"clock": "wall", "latency_mean_ticks": 6.0, "backend": "thread", "n_workers": 6, "schedulers": {
    ...     "sequential": {"n_workers": 1, "ticks": 600, "overruns": 0, "tau_i_mean_ticks": 6.0, "inaction_fraction": 0.83},
    ...     "exp_time": {"n_workers": 6, "ticks": 600, "overruns": 0, "tau_i_mean_ticks": 2.2, "inaction_fraction": 0.55}}}
    >>> for line in machine_diagnosis(wall, cores=2):
    ...     print(line)
    exp_time: staggered workers acted every 2.20 ticks where 6 workers of 6.0-tick latency should act every 1.00: they are starved of CPU
    the machine, not the algorithm, is the limit here (2 busy processes on 2 cores): use --clock virtual (the same schedulers, exact on any machine), or run it on an idle machine or one with more cores
    """
    from nonstop.metrics.limits import limit_findings, limit_remedy

    lines: list[str] = []
    for name, s in result["schedulers"].items():
        # by design unstaggered workers act together (once per τ_θ, as sequential) and Algorithm 1 spaces
        # its N workers by the largest latency: neither is starved for acting less than every tick
        spacing = (
            result.get("latency_max_ticks", result["latency_mean_ticks"])
            if name == "max_time"
            else result["latency_mean_ticks"]
        )
        found = limit_findings(
            s,
            clock=result["clock"],
            scheduler="sequential" if name == "unstaggered" else name,
            n_inference=int(s["n_workers"]),
            latency_mean_ticks=float(spacing),
        )
        lines += [f"{name}: {line}" for line in found]
    if not lines:
        return []
    loads = [s["load_average"] for s in result["schedulers"].values() if s.get("load_average") is not None]
    # this process (the worker threads) and the host's, and any the workers run in (Ray actors, processes)
    processes = 2 + int(result.get("worker_processes", 0))
    return [
        *lines,
        limit_remedy(
            processes=processes,
            cores=cores or _usable_cores(),
            remedy=COMPARE_REMEDY,
            load_average=max(loads) if loads else None,
        ),
    ]


def plot_compare(result: dict[str, Any], path: str | Path) -> Path:
    """Bars of inaction and mean delay per scheduler, and a timeline of agent vs β ticks for each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from nonstop.metrics.plots import latency_words

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(result["schedulers"])
    summaries = result["schedulers"]
    fig = plt.figure(figsize=(11, 4 + 0.8 * len(names)))
    grid = fig.add_gridspec(1 + len(names), 2, height_ratios=[4] + [1] * len(names), hspace=0.6)
    colors = [f"C{i}" for i in range(len(names))]
    ax = fig.add_subplot(grid[0, 0])
    inaction = [100 * np.nan_to_num(summaries[n]["inaction_fraction"]) for n in names]
    ax.bar_label(
        ax.bar(names, inaction, color=colors), labels=[cell(summaries[n]["inaction_fraction"], ".1%") for n in names]
    )
    ax.margins(y=0.15)
    ax.set_ylabel("inaction (% of ticks)")
    ax.set_title("Inaction (β ticks)")
    ax = fig.add_subplot(grid[0, 1])
    delays = [np.nan_to_num(summaries[n]["delay_mean_ticks"]) for n in names]  # no agent tick: no bar, "—"
    ax.bar_label(
        ax.bar(names, delays, color=colors), labels=[cell(summaries[n]["delay_mean_ticks"], ".2f") for n in names]
    )
    ax.margins(y=0.15)
    ax.set_ylabel("mean delay (ticks)")
    ax.set_title("Delay of applied actions")
    cmap = ListedColormap(["#d62728", "#2ca02c"])  # β red, agent green
    start = result["warmup_ticks"]
    for row, name in enumerate(names):
        log = result["logs"][name]
        tick, source = log["tick"], log["source"]
        window = (tick > start) & (tick <= start + TIMELINE_TICKS)
        ax = fig.add_subplot(grid[1 + row, :])
        shown = tick[window]
        if shown.size:
            ax.imshow(
                source[window][None, :],
                aspect="auto",
                cmap=cmap,
                vmin=0,
                vmax=1,
                interpolation="nearest",
                extent=(shown[0] - 0.5, shown[-1] + 0.5, 0, 1),
            )
        ax.set_yticks([])
        n_i = result["schedulers"][name]["n_workers"]
        ax.set_ylabel(f"{name}\n{n_i} worker{'' if n_i == 1 else 's'} ($N_I$)", rotation=0, ha="right", va="center")
        if row < len(names) - 1:
            ax.set_xticklabels([])
    ax.set_xlabel(f"tick (the first {TIMELINE_TICKS} after the warm-up)")
    fig.legend(
        handles=[Patch(color="#2ca02c", label="agent action"), Patch(color="#d62728", label="β (inaction)")],
        loc="lower center",
        bbox_to_anchor=(0.5, -0.04),
        ncol=2,
    )
    fig.suptitle(
        f"{result['env']}: {latency_words(result['latency'])}, {result['clock']} clock "
        "(inference workers $N_I$ per scheduler, left)"
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


def to_json(result: dict[str, Any]) -> str:
    """The result without the tick logs, as strict JSON (NaN becomes null)."""
    return json.dumps(_jsonable({k: v for k, v in result.items() if k != "logs"}), allow_nan=False)


def cell(value: Any, fmt: str) -> str:
    """A figure as a table cell: "—" where there is none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, fmt)
