"""A training run's report: plots and a summary of its directory (what ``nonstop report RUN`` writes).

Reads what ``nonstop train --out RUN`` wrote (layout in `nonstop.learning.runlog`) and writes, into
``--out`` (default ``RUN/report``):

* ``return_over_time.png`` — each episode's return over world time (``end_tick·τ_M``, from episodes.csv);
* ``inaction_delay.png``   — inaction and mean delay over world time, computed in windows from the
  tick log (the truth, docs/design.md §1.8) with the episode resets marked, or from progress.csv
  when the run has no tick log;
* ``delay_histogram.png``  — delay of the agent-applied ticks (from the tick log);
* ``win_rate_over_time.png`` — self-play runs: the learner's win rate (rolling) and score against
  its pool of past snapshots over the run (from matches.csv, `nonstop.experiment.selfplay`);
* ``team_rates_over_time.png`` — team worlds: each team's win, kill and survival rates (rolling)
  over world time (from teams.csv, `nonstop.experiment.teamstats`); a several-seat tick log also
  gives every seat's inaction and delay (``seats``) and each team's (``teams``) in the summary;
* ``report.md`` and ``report.json`` — the headline, the plots, the summary below, and what was skipped and why;
* ``report.html`` (with ``--html``) — the same as one self-contained page (the PNGs inlined as base64,
  no file or address outside it), to mail or attach as it is.

Every view opens with the picture: five headline figures in words (`headline`: return, inaction,
delay, τ_I, updates per second), then the plots; the whole table of figures comes last (folded in
the HTML page). One time axis: world seconds (tick·τ_M) on every plot; wall time only where a
plot's label says so (the inaction plot of a run with neither a tick log nor a known τ_M).

Every figure of the summary is grouped by the file it comes from, so it can be traced back. A run
dir with only some files (a run still going, or one cut short) gives the plots it can and says
which it skipped; a directory with none of progress.csv, episodes.csv and a tick log is refused.

The tick log is ``RUN/ticklog/`` (streamed in chunks during the run), any earlier resume segments
``RUN/ticklog-before-<tick>``, or an older run's ``RUN/ticklog.npz``: `read_ticklog` stitches them
into one log without loading it. Its summary figures are folded chunk by chunk; the two tick-log
plots read the ``tick``, ``source`` and ``delay`` columns whole (13 bytes a tick).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.experiment.teamstats import TEAMS_FILE, plot_team_rates, read_team_rows, team_figures
from nonstop.learning.runlog import (
    EPISODE_COLUMNS,
    MATCH_COLUMNS,
    OPTIONAL_PROGRESS_COLUMNS,
    PROGRESS_COLUMNS,
    RunPaths,
    read_columns,
    read_config,
    read_ticklog,
)
from nonstop.envs.seats import teams_of

__all__ = ["Report", "build_report", "headline", "render_headline", "render_summary", "write_html", "write_markdown"]

#: Episodes in the "recent return" mean.
RECENT_EPISODES: Final = 10
#: Episodes in the recent return `nonstop train` prints and keeps in summary.json (experiment/record.py).
TRAIN_RECENT_EPISODES: Final = 20
#: About this many windows in the inaction/delay plot drawn from the tick log.
WINDOWS: Final = 200
#: Config keys shown in the summary when present.
CONFIG_KEYS: Final = ("env", "k", "scheduler", "n_inference", "n_learners", "clock", "seed", "lr", "batch_size")
#: Tick-log figures (from `nonstop.metrics.timing.summarize`) shown in the summary.
TICK_KEYS: Final = (
    "ticks",
    "duration_s",
    "agent_ticks",
    "inaction_fraction",
    "tau_i_mean_ticks",
    "tau_i_cv",
    "delay_mean_ticks",
    "delay_p50_ticks",
    "delay_max_ticks",
    "lateness_p99_us",
    "overruns",
    "superseded",
    "stale",
    "episodes_completed",
    "episode_return_mean",
)

#: Each seat's figures shown (a several-seat tick log), and each team's (a seat's team: `team_of`).
SEAT_KEYS: Final = ("inaction_fraction", "delay_mean_ticks", "delay_max_ticks", "reward_total")
TEAM_KEYS: Final = (
    "inaction_fraction",
    "inaction_fraction_max",
    "delay_mean_ticks",
    "delay_max_ticks",
    "reward_total",
    "episode_return_mean",
)

PLOT_FILES: Final = {
    "return_over_time": "return_over_time.png",
    "inaction_delay": "inaction_delay.png",
    "delay_histogram": "delay_histogram.png",
    "win_rate": "win_rate_over_time.png",
    "team_rates": "team_rates_over_time.png",
}


@dataclass
class Report:
    """What `build_report` found and wrote.

    ``summary`` maps each source (``config``, ``episodes``, ``progress``, ``ticks``, ``run_summary``)
    to its figures; ``plots`` maps a plot name to the PNG written; ``skipped`` maps a plot name to
    why it was not drawn; ``missing`` lists the run-dir files that were not there.
    """

    run_dir: Path
    out_dir: Path
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    plots: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON form (NaN becomes null)."""
        return _jsonable(
            {
                "run_dir": str(self.run_dir),
                "out_dir": str(self.out_dir),
                "summary": self.summary,
                "plots": {k: str(v) for k, v in self.plots.items()},
                "skipped": self.skipped,
                "missing": self.missing,
            }
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ----------------------------------------------------------------------------- figures from each file


def _last_finite(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else math.nan


def _mean_finite(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def episode_figures(episodes: dict[str, np.ndarray]) -> dict[str, Any]:
    """Summary of episodes.csv: count, mean/recent/best return, mean length."""
    returns = episodes["return"]
    n = len(returns)
    recent = returns[-RECENT_EPISODES:]
    return {
        "episodes": n,
        "return_mean": float(returns.mean()) if n else math.nan,
        f"return_last{RECENT_EPISODES}_mean": float(recent.mean()) if n else math.nan,
        "return_max": float(returns.max()) if n else math.nan,
        "length_mean_ticks": float(episodes["length_ticks"].mean()) if n else math.nan,
        "wall_s_last": float(episodes["wall_s"][-1]) if n else math.nan,
    }


def progress_figures(progress: dict[str, np.ndarray]) -> dict[str, Any]:
    """Summary of progress.csv: the last interval's counters, mean update rate, last loss and ε (DQN) or α (SAC)."""
    out: dict[str, Any] = {"intervals": len(progress["wall_s"])}
    for column in ("wall_s", "env_ticks", "updates", "transitions", "episodes", "epsilon", "loss", "recent_return"):
        out[f"{column}_last"] = _last_finite(progress[column])
    if "alpha" in progress:
        out["alpha_last"] = _last_finite(progress["alpha"])
    out["updates_per_s_mean"] = _mean_finite(progress["updates_per_s"])
    out["inaction_frac_mean"] = _mean_finite(progress["inaction_frac"])
    return out


# ----------------------------------------------------------------------------- the report


def build_report(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> Report:
    """Read ``run_dir``, write the plots into ``out_dir`` (default ``RUN/report``), return the `Report`.

    Raises FileNotFoundError when ``run_dir`` is not a directory or holds none of progress.csv,
    episodes.csv and a tick log; ValueError (naming the file) when a file is there but unreadable.
    Writes no report.md/report.json: see `write_markdown` and `run_report`.
    """
    paths = RunPaths(run_dir)
    missing = _missing_files(paths)
    report = Report(
        run_dir=paths.root, out_dir=Path(out_dir) if out_dir is not None else paths.root / "report", missing=missing
    )
    config = _summarise_config(report, paths) if "config.json" not in missing else {}
    episodes = read_columns(paths.episodes, EPISODE_COLUMNS) if "episodes.csv" not in missing else None
    required = [c for c in PROGRESS_COLUMNS if c not in OPTIONAL_PROGRESS_COLUMNS]  # a run before SAC has no alpha
    progress = read_columns(paths.progress, required) if "progress.csv" not in missing else None
    log = read_ticklog(paths.root) if "ticklog" not in missing else None
    _summarise_data(report, episodes, progress, log)
    if "summary.json" not in missing:
        _summarise_run_summary(report, paths)

    tau_m = _tau_m(log, config)
    _plot_return(report, episodes, tau_m)
    _plot_inaction_delay(report, progress, log, tau_m)
    _plot_delay_histogram(report, log)
    _report_matches(report, paths, config)
    _report_teams(report, paths, tau_m)
    return report


def _missing_files(paths: RunPaths) -> list[str]:
    """The run files absent from ``paths``; FileNotFoundError when there is no run or nothing to report."""
    if not paths.root.is_dir():
        raise FileNotFoundError(f"no run directory at {paths.root} (write one with `nonstop train --out {paths.root}`)")
    data_files = {
        "progress.csv": paths.progress.is_file(),
        "episodes.csv": paths.episodes.is_file(),
        "ticklog": bool(paths.ticklog_segments()),
    }
    missing = [
        name
        for name, present in {
            "config.json": paths.config.is_file(),
            **data_files,
            "summary.json": paths.summary.is_file(),
        }.items()
        if not present
    ]
    if all(name in missing for name in data_files):
        raise FileNotFoundError(
            f"{paths.root} holds none of {', '.join(data_files)}: nothing to report (is it a run dir written by "
            "`nonstop train --out`?)"
        )
    return missing


def _summarise_config(report: Report, paths: RunPaths) -> dict[str, Any]:
    """The run's config (returned whole) and the keys of it the report shows."""
    config = read_config(paths.root)
    report.summary["config"] = {k: config[k] for k in CONFIG_KEYS if k in config}
    if config.get("self_play"):
        report.summary["config"].update({k: config.get(k) for k in ("opponents", "pool_size", "snapshot_every")})
    return config


def _summarise_data(report: Report, episodes: Any, progress: Any, log: Any) -> None:
    """The figures of episodes.csv, progress.csv and the tick log (per seat and team in a world of several)."""
    if episodes is not None:
        report.summary["episodes"] = episode_figures(episodes)
    if progress is not None:
        report.summary["progress"] = progress_figures(progress)
    if log is not None:
        figures = log.summary(teams=teams_of(log.seat_names) if log.seats > 1 else None)
        report.summary["ticks"] = {k: figures[k] for k in TICK_KEYS}
        if log.seats > 1:  # every seat's inaction and delay, and each team's over its seats
            report.summary["seats"] = {name: _picked(f, SEAT_KEYS) for name, f in figures["seats"].items()}
            report.summary["teams"] = {team: _picked(f, TEAM_KEYS) for team, f in figures["teams"].items()}


def _summarise_run_summary(report: Report, paths: RunPaths) -> None:
    """What summary.json adds: the resolved N_I, the batch server's figures, and what no other section shows."""
    try:
        run_summary = json.loads(paths.summary.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{paths.summary} is not valid JSON: {exc}") from exc
    config_shown = report.summary.get("config", {})
    if config_shown.get("n_inference") is None and run_summary.get("n_inference") is not None:
        config_shown["n_inference"] = run_summary["n_inference"]  # the N_I the run resolved (⌈τ̄_θ/τ_M⌉)
    # summary.json repeats the tick figures of the newest segment; the "ticks" section above has them for
    # the whole (stitched) run, so only what no other section shows is listed here
    server = run_summary.get("batch_server")
    if isinstance(server, dict):  # --backend batched: the batches the applied actions rode in
        report.summary["batch_server"] = {
            k: server.get(k)
            for k in ("requests", "batch_size_mean", "late", "applied_batch_size_mean", "applied_batch_sizes")
        }
    shown = {key for figures in report.summary.values() for key in figures}
    report.summary["run_summary"] = {k: v for k, v in run_summary.items() if k not in shown and k != "n_inference"}


def _plot_return(report: Report, episodes: Any, tau_m: float | None) -> None:
    """Return over world time (wall time only for a run whose tick period is not known)."""
    from nonstop.metrics import plots

    if episodes is None:
        report.skipped["return_over_time"] = "episodes.csv is missing"
    elif not len(episodes["return"]):
        report.skipped["return_over_time"] = "episodes.csv has no finished episode yet"
    else:
        world = tau_m is not None
        report.plots["return_over_time"] = plots.plot_return_over_time(
            episodes["end_tick"] * tau_m if world else episodes["wall_s"],
            episodes["return"],
            report.out_dir / PLOT_FILES["return_over_time"],
            smooth=RECENT_EPISODES,
            xlabel="world time (s)" if world else "wall time (s; the world's tick period is unknown)",
        )


def _plot_inaction_delay(report: Report, progress: Any, log: Any, tau_m: float | None) -> None:
    """Inaction and delay over time: the tick log first, progress.csv otherwise."""
    from nonstop.metrics import plots

    out = report.out_dir
    if log is not None and len(log):
        w = plots.windowed_ticks(log, max(1, len(log) // WINDOWS))
        report.plots["inaction_delay"] = plots.plot_inaction_delay(
            w["time_s"],
            w["inaction_frac"],
            w["delay_mean_ticks"],
            out / PLOT_FILES["inaction_delay"],
            xlabel="world time (s)",
            title="Inaction and delay over world time (tick log)",
            resets_s=plots.episode_starts(log),
        )
    elif progress is not None and len(progress["wall_s"]):
        world = tau_m is not None
        report.plots["inaction_delay"] = plots.plot_inaction_delay(
            progress["env_ticks"] * tau_m if world else progress["wall_s"],
            progress["inaction_frac"],
            progress["delay_mean_ticks"],
            out / PLOT_FILES["inaction_delay"],
            xlabel="world time (s)" if world else "wall time (s; the world's tick period is unknown)",
            title="Inaction and delay over time (progress.csv)",
        )
    else:
        report.skipped["inaction_delay"] = "neither the tick log nor progress.csv has any row"


def _plot_delay_histogram(report: Report, log: Any) -> None:
    from nonstop.metrics import plots
    from nonstop.realtime.ticklog import SOURCE_AGENT

    if log is None:
        report.skipped["delay_histogram"] = "the tick log is missing (no ticklog/ nor ticklog.npz)"
        return
    delays = log["delay"][log["source"] == SOURCE_AGENT]
    if delays.size:
        report.plots["delay_histogram"] = plots.plot_delay_histogram(
            delays, report.out_dir / PLOT_FILES["delay_histogram"]
        )
    else:
        report.skipped["delay_histogram"] = "the tick log has no agent-applied tick (β acted throughout)"


def _report_matches(report: Report, paths: RunPaths, config: dict[str, Any]) -> None:
    """Self-play: win rate and score against the pool."""
    if paths.matches.is_file():
        from nonstop.experiment.selfplay import match_figures, plot_matches

        matches = read_columns(paths.matches, MATCH_COLUMNS)
        report.summary["matches"] = match_figures(matches)
        if len(matches["won"]):
            report.plots["win_rate"] = plot_matches(matches, report.out_dir / PLOT_FILES["win_rate"])
        else:
            report.skipped["win_rate"] = "matches.csv has no finished match yet"
    elif config.get("self_play") and not (paths.root / TEAMS_FILE).is_file():
        report.skipped["win_rate"] = "matches.csv is missing (no match finished yet)"


def _report_teams(report: Report, paths: RunPaths, tau_m: float | None) -> None:
    """Team worlds: each team's win, kill and survival rates over time (teams.csv: team self-play)."""
    if not (paths.root / TEAMS_FILE).is_file():
        return
    rows = read_team_rows(paths.root / TEAMS_FILE)
    if rows:
        report.summary["team_matches"] = {
            f"{team}.{key}": value for team, figures in team_figures(rows).items() for key, value in figures.items()
        }
        report.plots["team_rates"] = plot_team_rates(rows, report.out_dir / PLOT_FILES["team_rates"], tau_m)
    else:
        report.skipped["team_rates"] = "teams.csv has no finished episode yet"


def _picked(figures: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: figures[k] for k in keys if k in figures}


def _tau_m(log: Any, config: dict[str, Any]) -> float | None:
    """The world's tick period: the tick log's, else the env's from the config, else None (unknown)."""
    if log is not None:
        return float(log.tau_m)
    if config.get("env"):
        try:
            from nonstop.envs import env_info
            from nonstop.envs.registry import split_env_id

            if split_env_id(config["env"])[0] is not None:  # a report imports no module its files name
                return None
            hz = env_info(config["env"], **(config.get("env_kwargs") or {})).tick_hz
        except Exception:  # an env this machine cannot build: the plots fall back to wall time
            return None
        return 1.0 / hz if hz else None
    return None


# ----------------------------------------------------------------------------- the headline

#: the headline's five figures: (name, the words after the value)
HEADLINE: Final = ("return", "inaction", "delay", "τ_I", "updates/s")


def _first(report: Report, *where: tuple[str, str]) -> Any:
    for source, key in where:
        value = report.summary.get(source, {}).get(key)
        if value is not None and not (isinstance(value, float) and not math.isfinite(value)):
            return value
    return None


def headline(report: Report) -> list[tuple[str, str, str]]:
    """The five figures a report opens with, in words: ``(name, value, what it means)`` for return,
    inaction, delay, τ_I and updates per second ("—" where the run has no such figure)."""
    # the recent return `nonstop train` printed (summary.json: the mean of the last 20 episodes), else episodes.csv's
    recent = _first(report, ("run_summary", "recent_return"), ("progress", "recent_return_last"))
    recent_words = f"recent return: the mean of the last {TRAIN_RECENT_EPISODES} episodes, as nonstop train printed it"
    if recent is None:
        recent = _first(report, ("episodes", f"return_last{RECENT_EPISODES}_mean"))
        recent_words = f"recent return: the mean of the last {RECENT_EPISODES} episodes"
    best = _first(report, ("episodes", "return_max"))
    episodes = _first(report, ("episodes", "episodes"))
    inaction = _first(report, ("ticks", "inaction_fraction"), ("progress", "inaction_frac_mean"))
    delay = _first(report, ("ticks", "delay_mean_ticks"))
    tau_i = _first(report, ("ticks", "tau_i_mean_ticks"))
    updates = _first(report, ("progress", "updates_per_s_mean"))
    total = _first(report, ("progress", "updates_last"))

    def num(value: Any, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    return [
        (
            "return",
            num(recent, ",.5g"),
            recent_words + (f" ({episodes:,} finished; best {best:,.5g})" if episodes and best is not None else ""),
        ),
        (
            "inaction",
            "—" if inaction is None else f"{inaction:.2%}",
            "of the world's ticks went to β, the default action, for want of an agent's action",
        ),
        (
            "delay",
            num(delay, ".2f") + ("" if delay is None else " ticks"),
            "from the observation an action was computed on to the tick it was applied (mean)",
        ),
        (
            "τ_I",
            num(tau_i, ".2f") + ("" if tau_i is None else " ticks"),
            "between the agent's actions (mean; 1 tick: an action every tick)",
        ),
        (
            "updates/s",
            num(updates, ".3g"),
            "learner updates per second (mean)" + (f"; {total:,.0f} in all" if total is not None else ""),
        ),
    ]


def render_headline(report: Report, console: Any) -> None:
    """The headline in a terminal: one line a figure, then where the plots are."""
    for name, value, words in headline(report):
        console.print(f"  {name:<10} {value:>12}  {words}", highlight=False, markup=False)
    for name, path in report.plots.items():
        console.print(f"  plot {name}: {path}", highlight=False, markup=False)


# ----------------------------------------------------------------------------- output


def _format(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if key.endswith(("_fraction", "_frac", "_frac_mean")):
            return f"{value:.2%}"
        return f"{value:,.0f}" if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if (
        isinstance(value, dict)
        and 0 < len(value) <= 6
        and all(isinstance(k, str) and not k.isdigit() and isinstance(v, (int, float)) for k, v in value.items())
    ):
        return ", ".join(f"{k} {_format(k, v)}" for k, v in value.items())  # a seat's or team's figures
    text = json.dumps(value, default=str)  # nested figures of summary.json: whole in report.json
    return text if len(text) <= 60 else text[:59] + "…"


def _rows(report: Report) -> list[tuple[str, str, str]]:
    return [
        (source, key, _format(key, value))
        for source, figures in report.summary.items()
        for key, value in figures.items()
    ]


def render_summary(report: Report, console: Any = None) -> None:
    """Print the summary (a rich table, one row per figure, grouped by source file) and what was skipped."""
    from nonstop._console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"nonstop report {report.run_dir}", highlight=False, markup=False)
    render_headline(report, console)
    table = Table(title="every figure, by the file it comes from")
    table.add_column("source")
    table.add_column("figure")
    table.add_column("value", justify="right")
    previous = None
    for source, key, text in _rows(report):
        table.add_row(source if source != previous else "", key, text)
        previous = source
    console.print(table)
    for name, reason in report.skipped.items():
        console.print(f"skipped plot {name}: {reason}", highlight=False)
    if report.missing:
        console.print(f"not in the run dir: {', '.join(report.missing)}", highlight=False)


def write_markdown(report: Report) -> Path:
    """Write ``report.md`` (summary table, plots, skipped ones) and ``report.json`` into ``report.out_dir``."""
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Run report: {report.run_dir}", ""]
    lines += [f"- **{name} {value}** {words}" for name, value, words in headline(report)] + [""]
    for name, path in report.plots.items():
        lines += [
            f"## {HTML_TITLES.get(name, name.replace('_', ' '))}",
            "",
            f"![{name}]({os.path.relpath(path, out)})",
            "",
        ]
    lines += [
        "<details><summary>Every figure, by the file it comes from</summary>",
        "",
        "| source | figure | value |",
        "| --- | --- | ---: |",
    ]
    lines += [f"| {source} | {key} | {text} |" for source, key, text in _rows(report)]
    lines += ["", "</details>", ""]
    if report.skipped:
        lines += ["## Skipped", ""] + [f"- {name}: {reason}" for name, reason in report.skipped.items()] + [""]
    if report.missing:
        lines += [f"Not in the run dir: {', '.join(report.missing)}.", ""]
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n")
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


#: headings of the plots in report.html
HTML_TITLES: Final = {
    "return_over_time": "Return over world time",
    "inaction_delay": "Inaction and delay over world time",
    "delay_histogram": "Delay of the agent's actions",
    "win_rate": "Self-play: win rate and score against the pool",
}
#: the HTML report's style: inline, so the page is one file
HTML_STYLE: Final = """
body { margin: 0 auto; max-width: 980px; padding: 24px; color: #1d2330; background: #fff;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.dim { color: #6b7385; } code { font: 12px ui-monospace, Menlo, Consolas, monospace; }
table { border-collapse: collapse; min-width: 60%; }
th, td { padding: 5px 10px; border-bottom: 1px solid #e2e5eb; text-align: left; }
th { font-size: 12px; color: #6b7385; background: #fafbfc; }
td.value { text-align: right; font-variant-numeric: tabular-nums; }
tr.first td { border-top: 2px solid #d5d9e0; }
figure { margin: 0 0 12px; } figure img { max-width: 100%; border: 1px solid #e2e5eb; border-radius: 4px; }
#headline { display: grid; grid-template-columns: repeat(5, 1fr); gap: 10px; margin: 14px 0 6px; }
#headline div { border: 1px solid #e2e5eb; border-radius: 6px; padding: 8px 10px; background: #fafbfc; }
#headline b { display: block; font-size: 20px; font-variant-numeric: tabular-nums; }
#headline span { display: block; font-size: 12px; color: #6b7385; line-height: 1.3; }
#headline i { font-style: normal; font-size: 13px; font-weight: 600; color: #1d2330; }
details { margin: 24px 0; } summary { cursor: pointer; font-weight: 600; }
"""


def write_html(report: Report) -> Path:
    """Write ``report.html`` into ``report.out_dir``: the summary table and every plot, inlined.

    One self-contained file: each PNG travels as a base64 ``data:`` URI, the style is inline, and
    nothing refers to a file or an address outside the page.
    """
    import base64
    from html import escape

    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    previous = None
    for source, key, text in _rows(report):
        first = source != previous
        opening = '<tr class="first">' if first and previous is not None else "<tr>"
        rows.append(
            f"{opening}<td>{escape(source) if first else ''}</td><td>{escape(key)}</td>"
            f'<td class="value">{escape(text)}</td></tr>'
        )
        previous = source
    cards = [
        f'<div data-figure="{escape(name)}"><i>{escape(name)}</i><b>{escape(value)}</b><span>{escape(words)}</span></div>'
        for name, value, words in headline(report)
    ]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>nonstop report {escape(report.run_dir.name)}</title><style>{HTML_STYLE}</style></head><body>",
        f'<h1>Run report</h1><p class="dim"><code>{escape(str(report.run_dir))}</code></p>',
        '<section id="headline">',
        *cards,
        "</section>",
    ]
    for name, path in report.plots.items():
        data = base64.b64encode(Path(path).read_bytes()).decode()
        title = escape(HTML_TITLES.get(name, name.replace("_", " ")))
        parts.append(
            f'<h2>{title}</h2><figure><img alt="{title}" data-plot="{escape(name)}" '
            f'src="data:image/png;base64,{data}"></figure>'
        )
    parts += [
        '<details id="figures"><summary>Every figure, by the file it comes from</summary>',
        "<table><thead><tr><th>source</th><th>figure</th><th>value</th></tr></thead><tbody>",
        *rows,
        "</tbody></table></details>",
    ]
    if report.skipped:
        parts.append("<h2>Skipped</h2><ul>")
        parts += [f"<li>{escape(name)}: {escape(reason)}</li>" for name, reason in report.skipped.items()]
        parts.append("</ul>")
    if report.missing:
        parts.append(f'<p class="dim">Not in the run dir: {escape(", ".join(report.missing))}.</p>')
    parts.append("</body></html>\n")
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
