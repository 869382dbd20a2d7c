"""Running a sweep's cells: each `nonstop train` (or the authors' delay simulation) in a process of its own,
``jobs`` at a time with a live view, resumed from its checkpoint, stopped with one SIGTERM
(`nonstop.studies.sweep` holds what the cells are and what they measure)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from nonstop.studies.sweep import Cell, cell_result

__all__ = ["cell_state", "children_cpu_s", "run_cells"]


def cell_state(cell: Cell, run_dir: Path) -> str:
    """``done`` (finished its episodes), ``resume`` (has a checkpoint), ``new`` (nothing usable)."""
    from nonstop.learning.checkpoint import list_checkpoints

    result = cell_result(cell, run_dir) if run_dir.exists() else None
    if result is not None and result["complete"]:
        return "done"
    if run_dir.exists() and (run_dir / "config.json").exists() and list_checkpoints(run_dir):
        return "resume"
    return "new"


class _Running:
    def __init__(self, cell: Cell, run_dir: Path, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.cell, self.run_dir, self.process, self.log_path = cell, run_dir, process, log_path
        self.started = time.monotonic()

    def episodes_so_far(self) -> int:
        try:
            with (self.run_dir / "episodes.csv").open() as f:
                return max(0, sum(1 for _ in f) - 1)
        except OSError:
            return 0


def _start(cell: Cell, out: Path) -> _Running:
    from nonstop.realtime.lifeline import popen_lifeline

    run_dir = out / "cells" / cell.name
    state = cell_state(cell, run_dir)
    if state == "new" and run_dir.exists():
        shutil.rmtree(run_dir)  # a cell that died before its first checkpoint: nothing in it to keep
    # each cell is `nonstop train` in a process of its own: isolation is the point (cells run `jobs` at a time on
    # their own cores, one SIGTERM makes one checkpoint and stop, a cell resumes or fails alone, its output is its log)
    argv = [*cell.argv(run_dir), *(["--resume"] if state == "resume" and cell.delay_start != "zeros" else [])]
    log_path = out / "logs" / f"{cell.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv[1:])}\n".encode())
        log.flush()
        # the cell dies with the sweep (SIGTERM: it checkpoints and stops as on `kill`); in its own process
        # group, so a terminal's Ctrl-C reaches the sweep alone, which stops each cell with one SIGTERM
        # (a second signal would make a cell skip its final checkpoint)
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=popen_lifeline(signal.SIGTERM),
            start_new_session=True,
        )
    return _Running(cell, run_dir, process, log_path)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("nonstop: error:")]
    return (errors or lines or [""])[-1].strip()


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's reaped children so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cells(todo: list[Cell], out: Path, jobs: int, console: Any) -> list[tuple[str, str]]:
    """Run the cells, ``jobs`` at a time, with a live view; returns (cell, why) for each that failed.
    Ctrl-C/SIGTERM: every running cell gets one SIGTERM (it writes its final checkpoint) and is reaped."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from nonstop.realtime.lifeline import reap

    pending, running, failed = list(todo), list[_Running](), list[tuple[str, str]]()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as view:
        overall = view.add_task("cells", total=len(todo))
        tasks: dict[str, Any] = {}
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    cell = pending.pop(0)
                    running.append(_start(cell, out))
                    tasks[cell.name] = view.add_task(f"  {cell.name}", total=cell.episodes)
                for r in list(running):
                    view.update(tasks[r.cell.name], completed=min(r.episodes_so_far(), r.cell.episodes))
                    code = r.process.poll()
                    if code is None:
                        continue
                    running.remove(r)
                    view.remove_task(tasks.pop(r.cell.name))
                    view.advance(overall)
                    result = cell_result(r.cell, r.run_dir)
                    if code != 0 or result is None or not result["complete"]:
                        why = (
                            _last_line(r.log_path)
                            if code != 0
                            else f"ended with {result['episodes'] if result else 0} of {r.cell.episodes} episodes"
                        )
                        failed.append((r.cell.name, f"exit {code}: {why}" if code != 0 else why))
                    else:
                        ret = result["mean_return"]
                        console.print(
                            f"  done {r.cell.name}: mean return {ret:.2f} over {result['episodes']} episodes, "
                            f"inaction {result['inaction_fraction'] or 0:.1%}, "
                            f"{(time.monotonic() - r.started) / 60:.1f} min",
                            markup=False,
                        )
                time.sleep(0.25)
        except BaseException:
            for r in running:  # their final checkpoints, then nothing left running (SIGTERM: SIGINT may be ignored
                try:  # by a sweep started in the background, and its cells inherit that)
                    r.process.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for r in running:
                reap(r.process, timeout=60.0)
            console.print(f"stopped: {len(running)} running cells checkpointed; run the same command again to resume")
            raise
    return failed
