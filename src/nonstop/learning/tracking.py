"""Experiment trackers: ``nonstop train --track wandb|mlflow`` mirrors the run to Weights & Biases or MLflow.

The CSVs of the run directory stay the truth (`nonstop.learning.runlog`); a tracker gets a copy of
the same rows as they are written, the run's config when it starts and its summary at the end,
so runs can be compared in the tools RL users already keep their experiments in. `RunLog` owns the
trackers, beside its CSV and TensorBoard writers.

What each tracker receives (the same names as TensorBoard's scalars):

* the config: wandb's run config; MLflow params (nested keys joined by ``.``) and ``config.json``;
* every progress row as ``progress/<column>``, plotted against ``progress/env_ticks``;
* every finished episode as ``episode/return``, ``episode/length_ticks``, ``episode/wall_s`` and
  ``episode/episode`` against ``episode/end_tick``; self-play matches as ``self_play/...``;
* the summary: wandb's run summary; MLflow ``summary/<figure>`` metrics and ``summary.json``;
* the end (`END_STATES`): a run that reached its end is FINISHED in MLflow (wandb exit code 0), one
  stopped by Ctrl-C or SIGTERM KILLED, one ended by an error FAILED (wandb exit code 1 for both).

Where the data goes is each library's own configuration: ``WANDB_MODE`` (``offline`` keeps it on
this machine, ``wandb sync`` uploads it later), ``WANDB_PROJECT`` (default ``nonstop``),
``WANDB_DIR`` (default: the run directory, so its files sit under ``RUN/wandb/``);
``MLFLOW_TRACKING_URI`` (a server ``http://HOST:5000``, a file store ``file:///PATH``, or MLflow's
default store: its database ``sqlite:///mlflow.db`` where the full ``mlflow`` package is installed,
else the file store ``./mlruns``) and ``MLFLOW_EXPERIMENT_NAME`` (default ``nonstop``). MLflow >= 3.7
refuses its file store unless ``MLFLOW_ALLOW_FILE_STORE`` is set: nonstop sets it around its own
MLflow calls only (`allow_mlflow_file_store`), so nothing is asked of the user and nothing is left in
their environment. The tracker run is named after the run directory, and its id is kept in
``RUN/tracking.json``: ``--resume`` continues the same tracker run.

A tracker that fails mid-run (a network outage, a full disk) is reported once and dropped; the run
goes on and the CSVs still hold every figure.

>>> parse_track(["wandb,mlflow", "wandb"])
('wandb', 'mlflow')
>>> parse_track(["tensorbord"])
Traceback (most recent call last):
...
ValueError: --track 'tensorbord' is not a tracker: choose from wandb, mlflow (TensorBoard is always on when installed)
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from nonstop._io import write_atomic
from nonstop.learning.jsonsafe import json_safe  # one way to make a summary JSON-safe, shared with the run log

__all__ = [
    "TRACKERS",
    "END_STATES",
    "Tracker",
    "TrackerError",
    "parse_track",
    "require_trackers",
    "open_tracker",
    "read_tracking",
    "end_state",
    "allow_mlflow_file_store",
    "mlflow_store",
]

#: tracker name -> (the module it imports, the pip extra that installs it, what it is)
TRACKERS: Final = {
    "wandb": ("wandb", "track-wandb", "Weights & Biases"),
    "mlflow": ("mlflow", "track-mlflow", "MLflow"),
}
#: RUN/tracking.json: which tracker runs this run directory feeds (so --resume continues them)
TRACKING_FILE: Final = "tracking.json"
#: how a run can end (`end_state` of its summary), and MLflow's run status for each
END_STATES: Final = {"finished": "FINISHED", "killed": "KILLED", "failed": "FAILED"}
#: the step each group of figures is plotted against
STEP_KEYS: Final = {"progress": "env_ticks", "episode": "end_tick", "self_play": "end_tick"}


class TrackerError(RuntimeError):
    """A tracker could not start (its store unreachable, its settings refused); says which and what to do."""


def parse_track(values: str | Iterable[str] | None) -> tuple[str, ...]:
    """The trackers of ``--track`` (repeatable, each a comma list), in order, each once."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    names: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"--track takes tracker names, got {value!r}")
        for name in (part.strip().lower() for part in value.split(",")):
            if not name:
                continue
            if name not in TRACKERS:
                hint = difflib.get_close_matches(name, TRACKERS, n=1)
                also = " (TensorBoard is always on when installed)" if "tensor" in name or name == "tb" else ""
                raise ValueError(
                    f"--track {name!r} is not a tracker: "
                    + (f"did you mean {hint[0]!r}? " if hint and not also else "")
                    + f"choose from {', '.join(TRACKERS)}{also}"
                )
            if name not in names:
                names.append(name)
    return tuple(names)


def require_trackers(names: Iterable[str]) -> None:
    """ModuleNotFoundError naming the extra to install, for the first tracker whose library is missing.
    Cheap (nothing is imported): call it before anything is written."""
    for name in names:
        module, extra, what = TRACKERS[name]
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a broken or blocked install is as good as none
            found = False
        if not found:
            raise ModuleNotFoundError(
                f"--track {name} needs {what} ({module}), which is not installed: pip install 'nonstop[{extra}]'",
                name=module,
            )


def end_state(summary: Mapping[str, Any]) -> str:
    """``finished``, ``killed`` (interrupted) or ``failed``, from a run summary's ``complete`` and ``interrupted``.

    >>> end_state({"complete": True}), end_state({"complete": False, "interrupted": True}), end_state({"complete": False})
    ('finished', 'killed', 'failed')
    """
    if summary.get("complete", True):
        return "finished"
    return "killed" if summary.get("interrupted") else "failed"


def read_tracking(run_dir: str | os.PathLike) -> dict[str, Any]:
    """RUN/tracking.json (``{}`` when absent or unreadable: a tracker run then starts afresh)."""
    path = Path(run_dir) / TRACKING_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(run_dir: Path, name: str, record: Mapping[str, Any]) -> None:
    data = read_tracking(run_dir)
    data[name] = dict(record)
    write_atomic(run_dir / TRACKING_FILE, (json.dumps(data, indent=2) + "\n").encode())


def _numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a row (None, NaN and text are left out: 'not measured yet')."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "item") and callable(value.item):
            value = value.item()
        if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


class Tracker:
    """One tracker run fed by a `RunLog`. Subclasses implement ``_log``, ``_summary`` and ``_finish``;
    this class keeps a failing tracker from stopping the run: the first error is reported through
    ``note`` and the tracker goes quiet (the CSVs still hold every figure)."""

    name = "tracker"

    def __init__(self, note: Callable[[str], None]) -> None:
        self._note = note
        self.failed: str | None = None
        self.finished = False

    def log(self, group: str, row: Mapping[str, Any]) -> None:
        """One row of ``group`` (progress, episode, self_play), its finite numbers as ``group/column``."""
        numbers = _numbers(row)
        step_key = STEP_KEYS[group]
        if step_key not in numbers:
            return  # a row with no position on its axis cannot be plotted
        self._guard(lambda: self._log(group, {f"{group}/{k}": v for k, v in numbers.items()}, int(numbers[step_key])))

    def summary(self, summary: Mapping[str, Any]) -> None:
        self._guard(lambda: self._summary(json_safe(summary)))

    def finish(self, end: str = "finished") -> None:
        """End the tracker run as ``end`` (a key of `END_STATES`); later calls do nothing."""
        if end not in END_STATES:
            raise ValueError(f"end must be one of {sorted(END_STATES)}, got {end!r}")
        if self.finished:
            return
        self.finished = True
        self._guard(lambda: self._finish(end), always=True)

    def _guard(self, call: Callable[[], None], *, always: bool = False) -> None:
        if self.failed is not None and not always:
            return
        try:
            call()
        except Exception as exc:  # a mirror's failure must not end the run it mirrors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            if self.failed is None:
                self._note(
                    f"warning: --track {self.name} stopped: {type(exc).__name__}: {first} "
                    "(the run goes on; its CSVs hold every figure)"
                )
            self.failed = f"{type(exc).__name__}: {first}"

    def _log(self, group: str, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def _summary(self, summary: dict[str, Any]) -> None:
        raise NotImplementedError

    def _finish(self, end: str) -> None:
        raise NotImplementedError


class WandbTracker(Tracker):
    """A Weights & Biases run (`wandb.init`), honouring WANDB_MODE, WANDB_PROJECT and WANDB_DIR."""

    name = "wandb"

    def __init__(self, run_dir: Path, config: Mapping[str, Any], *, resume: bool, note: Callable[[str], None]) -> None:
        import wandb

        super().__init__(note)
        self._wandb = wandb
        previous = read_tracking(run_dir).get(self.name, {}) if resume else {}
        project = os.environ.get("WANDB_PROJECT") or "nonstop"
        run_id = previous.get("id") if previous.get("project") == project else None
        directory = None if os.environ.get("WANDB_DIR") else str(run_dir)
        try:
            self.run = wandb.init(
                project=project,
                name=run_dir.name,
                dir=directory,
                config=json_safe(config),
                id=run_id,
                resume="allow" if run_id else None,
                settings=wandb.Settings(console="off"),  # nonstop's console is its own (a live table)
            )
        except Exception as exc:  # wandb raises many kinds; each becomes one line
            raise TrackerError(
                f"--track wandb could not start a run (WANDB_MODE={os.environ.get('WANDB_MODE', 'online')}): "
                f"{type(exc).__name__}: {_first_line(exc)} (`wandb login` for W&B's service, or "
                "WANDB_MODE=offline to keep the run on this machine)"
            ) from exc
        for group, step_key in STEP_KEYS.items():
            self.run.define_metric(f"{group}/{step_key}")
            self.run.define_metric(f"{group}/*", step_metric=f"{group}/{step_key}")
        _remember(run_dir, self.name, {"id": self.run.id, "project": project, "dir": self.run.dir})

    def _log(self, group: str, values: dict[str, float], step: int) -> None:
        self.run.log(values)

    def _summary(self, summary: dict[str, Any]) -> None:
        self.run.summary.update(summary)

    def _finish(self, end: str) -> None:
        self.run.finish(exit_code=0 if end == "finished" else 1)
        if self._wandb.run is None:  # no other wandb run in this process: end wandb's service process too
            self._wandb.teardown()


#: MLflow >= 3.7's opt-in to its file store (``./mlruns``, ``file://``), which it otherwise refuses
ALLOW_FILE_STORE: Final = "MLFLOW_ALLOW_FILE_STORE"


@contextmanager
def allow_mlflow_file_store() -> Iterator[None]:
    """MLflow's file store allowed inside the block (``MLFLOW_ALLOW_FILE_STORE=true`` unless the user set
    it either way), and the environment as it was after it.

    >>> before = dict(os.environ)
    >>> with allow_mlflow_file_store():
    ...     os.environ[ALLOW_FILE_STORE] == before.get(ALLOW_FILE_STORE, "true")
    True
    >>> dict(os.environ) == before
    True
    """
    before = os.environ.get(ALLOW_FILE_STORE)
    if before is None:
        os.environ[ALLOW_FILE_STORE] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ALLOW_FILE_STORE, None)


def mlflow_store() -> str:
    """Where MLflow runs go: ``MLFLOW_TRACKING_URI`` when set; else MLflow's own default when this install
    can open it (its ``sqlite:///mlflow.db`` needs SQLAlchemy, which the full ``mlflow`` package brings);
    else the file store ``./mlruns`` (MLflow's default before 3.0), which the ``mlflow-skinny`` client of
    the ``track`` extra can write."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    import mlflow

    default = mlflow.get_tracking_uri()
    database = default.split(":", 1)[0].split("+", 1)[0] in ("sqlite", "postgresql", "mysql", "mssql")
    if database and importlib.util.find_spec("sqlalchemy") is None:
        return (Path.cwd() / "mlruns").as_uri()
    return default


class MlflowTracker(Tracker):
    """An MLflow run (`mlflow.tracking.MlflowClient`), honouring MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME."""

    name = "mlflow"
    _BATCH: Final = 100  # MLflow's limit of params per log_batch call

    def __init__(self, run_dir: Path, config: Mapping[str, Any], *, resume: bool, note: Callable[[str], None]) -> None:
        super().__init__(note)
        uri: str | None = None
        try:
            uri = mlflow_store()
            with allow_mlflow_file_store():
                self._start(uri, run_dir, config, resume)
        except Exception as exc:  # MLflow raises many kinds; each becomes one line
            raise TrackerError(
                f"--track mlflow could not start a run at {uri or 'the default store'}: {type(exc).__name__}: "
                f"{_first_line(exc)}; set MLFLOW_TRACKING_URI to a tracking server (http://HOST:5000) or a file "
                "store (file:///PATH), or install the full mlflow package for MLflow's local database store"
            ) from exc
        _remember(run_dir, self.name, {"run_id": self.run_id, "tracking_uri": uri, "experiment_id": self.experiment_id})

    def _start(self, uri: str, run_dir: Path, config: Mapping[str, Any], resume: bool) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "nonstop"
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        previous = read_tracking(run_dir).get(self.name, {}) if resume else {}
        if previous.get("run_id") and previous.get("tracking_uri") == uri:
            self.run_id = previous["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        run = self.client.create_run(
            self.experiment_id, run_name=run_dir.name, tags={"nonstop.run_dir": str(run_dir.resolve())}
        )
        self.run_id = run.info.run_id
        params = [Param(k, v[:6000]) for k, v in _flatten(config).items()]
        for i in range(0, len(params), self._BATCH):
            self.client.log_batch(self.run_id, params=params[i : i + self._BATCH])
        self.client.log_dict(self.run_id, json_safe(config), "config.json")

    def _guard(self, call: Callable[[], None], *, always: bool = False) -> None:
        with allow_mlflow_file_store():  # every call may open the store again
            super()._guard(call, always=always)

    def _log(self, group: str, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric
        from mlflow.utils.time import get_current_time_millis

        now = get_current_time_millis()
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def _summary(self, summary: dict[str, Any]) -> None:
        from mlflow.entities import Metric
        from mlflow.utils.time import get_current_time_millis

        now = get_current_time_millis()
        metrics = [Metric(f"summary/{k}", v, now, 0) for k, v in _numbers(summary).items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])
        self.client.log_dict(self.run_id, summary, "summary.json")

    def _finish(self, end: str) -> None:
        self.client.set_terminated(self.run_id, END_STATES[end])


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config as MLflow params: ``{"dqn": {"lr": 1e-3}}`` -> ``{"dqn.lr": "0.001"}``."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, name + "."))
        else:
            safe = json_safe(value)
            out[name] = safe if isinstance(safe, str) else json.dumps(safe)
    return out


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0].rstrip(".") if lines else ""


#: each tracker's constructor: (run_dir, config, *, resume, note) -> Tracker
_OPENERS: Final[dict[str, Callable[..., Tracker]]] = {"wandb": WandbTracker, "mlflow": MlflowTracker}


def open_tracker(
    name: str,
    run_dir: str | os.PathLike,
    config: Mapping[str, Any],
    *,
    resume: bool = False,
    note: Callable[[str], None] = print,
) -> Tracker:
    """Start (or, on ``resume``, continue) the ``name`` tracker's run for ``run_dir`` (which must exist).
    ModuleNotFoundError naming the extra if its library is missing; `TrackerError` if it cannot start."""
    names = parse_track([name])
    if len(names) != 1:
        raise ValueError(f"open_tracker opens one tracker, got {name!r}")
    require_trackers(names)
    return _OPENERS[names[0]](Path(run_dir), config, resume=resume, note=note)
