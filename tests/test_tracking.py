"""``--track wandb|mlflow``: the run's rows, config and summary mirrored to Weights & Biases and MLflow.

Both libraries are installed by the test extra (wandb ~26 MB and mlflow-skinny ~17 MB of wheels, no
builds) and run for real, offline: wandb with ``WANDB_MODE=offline`` (its run directory is read back
here, record by record), MLflow with a file store in ``tmp_path`` (read back through
``MlflowClient``). No fake stands in for either. Nothing else is set: MLflow's file store needs
``MLFLOW_ALLOW_FILE_STORE`` since 3.7, which nonstop sets around its own calls and never leaves
behind. A missing library is simulated the way a machine without it looks (an import hook that
answers ModuleNotFoundError), in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nonstop.learning.runlog import RunLog, read_columns
from nonstop.learning.tracking import TrackerError, parse_track, read_tracking

wandb = pytest.importorskip("wandb", reason="the test extra installs wandb")
mlflow = pytest.importorskip("mlflow", reason="the test extra installs mlflow-skinny")
from mlflow.tracking import MlflowClient  # noqa: E402


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """wandb offline and MLflow on a file store, both inside tmp_path (the choice of store, and no other
    variable: none left from the caller's environment either); returns the MLflow URI. After the test,
    nonstop has left no MLflow or W&B variable behind."""
    for var in [v for v in os.environ if v.startswith(("WANDB_", "MLFLOW_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("WANDB_MODE", "offline")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    yield uri
    left = sorted(v for v in os.environ if v.startswith(("WANDB_", "MLFLOW_")))
    assert left == ["MLFLOW_TRACKING_URI", "WANDB_MODE"] or left == ["WANDB_MODE"], left


# ----------------------------------------------------------------------------- reading wandb's own files


def wandb_records(run_file: Path) -> list:
    """Every record of a wandb ``.wandb`` transaction log (LevelDB's log format: 32 KiB blocks of
    chunks, each with a 7-byte header crc32/length/type, after a 7-byte ':W&B' file header), parsed
    with wandb's own protobuf classes."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        if length == 0 and kind == 0:
            pos += block - pos % block  # zero padding to the end of a block
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # FULL/FIRST start, MIDDLE/LAST go on
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_run(run_dir: Path) -> dict:
    """What wandb wrote offline for the newest run under RUN/wandb: config, history rows, summary."""
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert files, sorted(p.name for p in (run_dir / "wandb").iterdir())
    out: dict = {"config": {}, "history": [], "summary": {}, "exit_code": None, "files": files}
    for path in files:
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                out["id"], out["name"], out["project"] = record.run.run_id, record.run.display_name, record.run.project
                out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif kind == "config":
                out["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
            elif kind == "history":
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                out["history"].append({k: v for k, v in row.items() if not k.startswith("_")})
            elif kind == "summary":
                out["summary"].update(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.summary.update}
                )
            elif kind == "exit":
                out["exit_code"] = record.exit.exit_code
    return out


def _rows(log: RunLog, start: int, n: int) -> None:
    for i in range(n):
        ticks = (start + i + 1) * 60
        log.log_progress(
            {
                "wall_s": ticks / 60,
                "env_ticks": ticks,
                "inaction_frac": 0.5 / (start + i + 1),
                "updates": 10 * (start + i),
                "loss": None,
            }
        )
        log.log_episode(
            {
                "episode": start + i,
                "end_tick": ticks - 5,
                "wall_s": ticks / 60,
                "return": float(start + i),
                "length_ticks": 55,
            }
        )


# ----------------------------------------------------------------------------- the flag


def test_track_names_repeat_or_comma_and_a_typo_is_named():
    assert parse_track(["mlflow", "wandb,mlflow", " WandB "]) == ("mlflow", "wandb")
    assert parse_track(None) == () and parse_track("") == ()
    with pytest.raises(ValueError, match="did you mean 'mlflow'"):
        parse_track(["mlfow"])
    with pytest.raises(ValueError, match="TensorBoard is always on"):
        parse_track("tensorboard")


# ----------------------------------------------------------------------------- MLflow


def test_mlflow_gets_the_config_rows_and_summary_and_resume_continues_its_run(tmp_path, offline):
    run = tmp_path / "run"
    config = {"env": "CartPole", "seconds": 4.0, "dqn": {"lr": 0.001, "hidden": [64, 64]}}
    with RunLog(run, config, tensorboard=False, track="mlflow") as log:
        assert log.trackers == ("mlflow",)
        _rows(log, 0, 3)
        log.log_match(
            {
                "episode": 2,
                "end_tick": 175,
                "wall_s": 3.0,
                "opponent": 1,
                "opponent_tick": 60,
                "pool_size": 2,
                "score": -3.0,
                "won": False,
            }
        )
        log.write_summary({"complete": True, "inaction_fraction": 0.25, "recent_return": float("nan"), "reason": None})
    run_id = read_tracking(run)["mlflow"]["run_id"]
    client = MlflowClient(tracking_uri=offline)
    got = client.get_run(run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "run"
    assert got.data.params["env"] == "CartPole" and got.data.params["dqn.lr"] == "0.001"
    assert json.loads(got.data.params["dqn.hidden"]) == [64, 64]
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "progress/inaction_frac"))
    assert history == [(60, 0.5), (120, 0.25), (180, 0.5 / 3)]
    assert [m.step for m in client.get_metric_history(run_id, "episode/return")] == [55, 115, 175]
    assert "progress/loss" not in got.data.metrics  # not measured yet: left out, not a fake 0
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "self_play/score")] == [(175, -3.0)]
    assert got.data.metrics["self_play/won"] == 0.0 and got.data.metrics["self_play/opponent"] == 1.0
    assert got.data.metrics["summary/inaction_fraction"] == 0.25 and "summary/recent_return" not in got.data.metrics
    artifacts = Path(got.info.artifact_uri.removeprefix("file://"))
    assert json.loads((artifacts / "summary.json").read_text())["recent_return"] is None
    assert json.loads((artifacts / "config.json").read_text()) == config

    # --resume: the same MLflow run goes on; a run stopped by Ctrl-C is marked KILLED
    with RunLog(run, config, resume=True, tensorboard=False, track=["mlflow"]) as log:
        _rows(log, 3, 2)
        log.write_summary({"complete": False, "interrupted": True, "reason": "interrupted (Ctrl-C)"})
    assert read_tracking(run)["mlflow"]["run_id"] == run_id
    assert len(client.search_runs([got.info.experiment_id])) == 1
    steps = [m.step for m in client.get_metric_history(run_id, "progress/inaction_frac")]
    assert sorted(steps) == [60, 120, 180, 240, 300]
    assert client.get_run(run_id).info.status == "KILLED"
    with RunLog(run, config, resume=True, tensorboard=False, track=["mlflow"]) as log:  # an error ends it: FAILED
        log.write_summary({"complete": False, "interrupted": False, "reason": "the world's host died"})
    assert client.get_run(run_id).info.status == "FAILED"
    assert read_columns(run / "progress.csv")["env_ticks"].tolist() == [60, 120, 180, 240, 300]  # the CSV as ever


def test_mlflow_without_a_tracking_uri_writes_the_file_store_mlruns_here(tmp_path, offline, monkeypatch):
    """No MLFLOW_TRACKING_URI: MLflow 3's default store is a SQLite database that only the full mlflow
    package opens; the track extra's mlflow-skinny writes the file store ./mlruns instead, unasked."""
    import importlib.util

    if importlib.util.find_spec("sqlalchemy") is not None:
        pytest.skip("the full mlflow package is installed here: MLflow's own default store is used")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)
    with RunLog(tmp_path / "run", {"env": "x"}, tensorboard=False, track="mlflow") as log:
        _rows(log, 0, 2)
    record = read_tracking(tmp_path / "run")["mlflow"]
    assert record["tracking_uri"] == (tmp_path / "mlruns").as_uri()
    history = MlflowClient(tracking_uri=record["tracking_uri"]).get_metric_history(
        record["run_id"], "progress/env_ticks"
    )
    assert [m.step for m in history] == [60, 120]
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ


def test_a_tracker_that_cannot_start_leaves_no_run_directory(tmp_path, offline, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus-scheme://nowhere")
    run = tmp_path / "run"
    with pytest.raises(
        TrackerError, match="--track mlflow could not start a run at bogus-scheme://nowhere.*MLFLOW_TRACKING_URI"
    ):
        RunLog(run, {"env": "x"}, tensorboard=False, track=("wandb", "mlflow"))
    assert not run.exists()  # the wandb run it had started is finished, and its files went with the directory
    run.mkdir()  # an existing (empty) directory is left as it was found
    with pytest.raises(TrackerError):
        RunLog(run, {"env": "x"}, tensorboard=False, track=("wandb", "mlflow"))
    assert list(run.iterdir()) == []


def test_a_tracker_failing_mid_run_is_reported_once_and_the_run_goes_on(tmp_path, offline):
    notes: list[str] = []
    run = tmp_path / "run"
    with RunLog(run, {"env": "x"}, tensorboard=False, track="mlflow", note=notes.append) as log:
        _rows(log, 0, 1)
        MlflowClient(tracking_uri=offline).delete_run(read_tracking(run)["mlflow"]["run_id"])  # its store says no more
        _rows(log, 1, 3)
        assert log.trackers == ()
    failures = [n for n in notes if "--track mlflow stopped" in n]
    assert len(failures) == 1 and "CSVs hold every figure" in failures[0], notes
    assert (
        len(read_columns(run / "progress.csv")["env_ticks"]) == 4
        and len(read_columns(run / "episodes.csv")["return"]) == 4
    )


# ----------------------------------------------------------------------------- Weights & Biases


def test_wandb_offline_run_holds_the_config_rows_and_summary(tmp_path, offline):
    run = tmp_path / "run"
    with RunLog(run, {"env": "CartPole", "dqn": {"lr": 0.001}}, tensorboard=False, track="wandb") as log:
        _rows(log, 0, 3)
        log.write_summary({"complete": True, "inaction_fraction": 0.25, "updates": 20})
    written = wandb_run(run)  # under RUN/wandb/: WANDB_DIR unset, so the run directory keeps it
    assert (
        written["project"] == "nonstop"
        and written["name"] == "run"
        and written["id"] == read_tracking(run)["wandb"]["id"]
    )
    assert written["config"]["env"] == "CartPole" and written["config"]["dqn"] == {"lr": 0.001}
    progress = [r for r in written["history"] if "progress/env_ticks" in r]
    assert [r["progress/env_ticks"] for r in progress] == [60, 120, 180]
    assert [r["progress/inaction_frac"] for r in progress] == pytest.approx([0.5, 0.25, 0.5 / 3])
    assert all("progress/loss" not in r for r in progress)
    episodes = [r for r in written["history"] if "episode/end_tick" in r]
    assert [(r["episode/end_tick"], r["episode/return"]) for r in episodes] == [(55, 0.0), (115, 1.0), (175, 2.0)]
    assert written["summary"]["inaction_fraction"] == 0.25 and written["summary"]["updates"] == 20
    assert written["exit_code"] == 0
    assert wandb.run is None  # finished, and wandb's service process ended with it


# ----------------------------------------------------------------------------- end to end


def test_train_track_sends_the_same_progress_rows_to_both(tmp_path, offline, capsys, no_shm_leak):
    from nonstop.cli import main

    run = tmp_path / "run"
    argv = [
        "train",
        "--env",
        "CartPole",
        "--learning-starts",
        "50",
        "--batch-size",
        "8",
        "--progress-every",
        "1",
        "--seconds",
        "3",
        "--out",
        str(run),
        "--track",
        "wandb,mlflow",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    csv = read_columns(run / "progress.csv")
    client = MlflowClient(tracking_uri=offline)
    run_id = read_tracking(run)["mlflow"]["run_id"]
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "progress/inaction_frac"))
    assert history == list(zip(csv["env_ticks"].tolist(), csv["inaction_frac"].tolist(), strict=True))
    assert client.get_run(run_id).data.params["env"] == "CartPole"
    summary = json.loads((run / "summary.json").read_text())
    assert client.get_run(run_id).data.metrics["summary/updates"] == summary["updates"]
    written = wandb_run(run)
    progress = [r for r in written["history"] if "progress/env_ticks" in r]
    assert [r["progress/env_ticks"] for r in progress] == csv["env_ticks"].tolist()
    assert written["summary"]["updates"] == summary["updates"] and written["config"]["env"] == "CartPole"


BLOCKER = """
import importlib.abc
import sys


class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("wandb", "mlflow"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Missing())
"""


def test_a_missing_tracker_library_names_its_extra_before_the_run_directory_exists(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src), os.environ.get("PYTHONPATH", "")])}
    for tracker, extra in (("wandb", "nonstop[track-wandb]"), ("mlflow", "nonstop[track-mlflow]")):
        out = tmp_path / f"run-{tracker}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "nonstop.cli",
                "train",
                "--env",
                "CartPole",
                "--seconds",
                "1",
                "--out",
                str(out),
                "--track",
                tracker,
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and extra in lines[0], done.stderr[-2000:]
        assert not out.exists()
    code = textwrap.dedent("""
        from nonstop.learning.runlog import RunLog
        try:
            RunLog("run", {"env": "x"}, tensorboard=False, track="wandb")
        except ModuleNotFoundError as exc:
            print(exc)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "nonstop[track-wandb]" in done.stdout and not (tmp_path / "run").exists(), done.stderr[-2000:]


def test_a_sac_run_tracks_its_alpha_and_its_own_settings(tmp_path, offline, capsys, no_shm_leak):
    """SAC's progress rows carry α where DQN's carry ε, and the tracker gets them as they are in progress.csv,
    with SAC's settings (not DQN's) as the run's parameters."""
    from nonstop.cli import main

    run = tmp_path / "run"
    argv = ["train", "--env", "Pendulum-v1", "--algo", "sac", "--learning-starts", "40", "--batch-size", "8"]
    argv += ["--hidden", "16", "--progress-every", "2", "--seconds", "8", "--out", str(run), "--track", "mlflow"]
    assert main(argv) == 0, capsys.readouterr().err
    csv = read_columns(run / "progress.csv")
    client = MlflowClient(tracking_uri=offline)
    run_id = read_tracking(run)["mlflow"]["run_id"]
    alpha = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "progress/alpha"))
    assert alpha == pytest.approx(list(zip(csv["env_ticks"].tolist(), csv["alpha"].tolist(), strict=True)))
    assert alpha[-1][1] < 1.0  # α was tuned once learning began
    params = client.get_run(run_id).data.params
    assert params["algo"] == "sac" and params["algo_settings.tau"] == "0.005"
    assert not any(k.startswith("dqn.") for k in params)
