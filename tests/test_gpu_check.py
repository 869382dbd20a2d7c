"""The prepared checks' plumbing (scripts/gpu-check, scripts/ray-check; issue 33): each runs here with a tiny
budget or as a dry run and writes a summary naming every check, its threshold and why it was skipped; the
summaries' verdicts are checked on results made up to pass and to fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECKS = [
    "pytest_cuda",
    "capture_under_learner",
    "graphs_agree_with_eager",
    "curve_unpoisoned",
    "ceiling k=98",
    "served k=98",
    "ceiling k=29",
    "served k=29",
    "ceiling k=7",
    "ceiling k=1",
    "learner_effect_p99",
    "train_device",
    "train_host",
    "device_learner_rate",
]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHON=sys.executable, **extra)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_gpu_check_runs_on_a_host_without_cuda_and_names_every_check_it_skipped(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check")],
        env=_env(OUT=str(out), GPU_CHECK_BUDGET_S="1"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
    names = [s[0] for s in steps]
    assert names[0] == "preflight" and set(names[1:]) == {
        "pytest_cuda",
        "probe",
        "bench_gpu_k1_k7",
        "bench_gpu_k98",
        "bench_gpu_k29",
        "train_device",
        "train_host",
        "bench_learn",
    }
    assert all(s[1].startswith("skipped: ") for s in steps[1:])  # no CUDA here (or a 1 s budget where there is)
    summary = json.loads((out / "summary.json").read_text())
    assert [c["check"] for c in summary["checks"]] == GPU_CHECKS
    assert all(c["verdict"].startswith("SKIP: ") and c["threshold"] for c in summary["checks"])
    assert summary["passed"] == summary["failed"] == 0
    text = (out / "summary.txt").read_text()
    assert "SKIP: no CUDA" in text or "SKIP: budget" in text
    assert "threshold: the bf16 CUDA-graph curve's ceiling at --max-batch >= the k's target worlds (1000)" in text


def _write(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) + "\n")


def test_the_gpu_summary_puts_each_figure_beside_its_threshold_and_judges_it(tmp_path):
    out = tmp_path
    (out / "steps.tsv").write_text(
        "".join(
            f"{s}\t0\t10\t60\n"
            for s in (
                "pytest_cuda",
                "probe",
                "bench_gpu_k1_k7",
                "bench_gpu_k98",
                "train_device",
                "train_host",
                "bench_learn",
            )
        )
        + "bench_gpu_k29\tskipped: budget (20s of 440s left, it needs 50s)\t0\t-\n"
    )
    (out / "pytest_cuda.xml").write_text(
        '<testsuites><testsuite tests="9" failures="0" errors="0" skipped="0"></testsuite></testsuites>'
    )
    _write(
        out / "probe.json",
        {
            "graphs_captured": [1, 2, 4],
            "capture_s": 3.0,
            "failed_batches": 0,
            "learner_updates": 50,
            "learner_errors": 0,
            "graph_vs_eager_flips_away_from_ties": 0,
            "server_L1_ms": 9.0,
            "steady_L1_ms": 1.0,
        },
    )  # (L(1) nine times the replay: poisoned)

    def curve(k: int, ceiling: int) -> dict:
        return {
            "k": k,
            "dtype": "bf16",
            "mode": "graph",
            "worlds_ceiling": ceiling,
            "ceiling_batch": 32,
            "L_ms": {"1": 1.0},
        }

    _write(out / "bench_gpu_k1_k7.json", {"curves": [curve(1, 1200), curve(7, 380)]})
    _write(
        out / "bench_gpu_k98.json",
        {
            "curves": [curve(98, 10)],
            "serve": {"k": 98},
            "served": [
                {"design": "batched", "worlds": 9, "inaction_max": 0.004},
                {"design": "batched_remote", "worlds": 9, "inaction_max": 0.03},
            ],
            "learner_effect": {
                "alone": {"p99_ms": 3.0},
                "with_learner": {"p99_ms": 4.0},
                "learner_updates_per_s": 40.0,
            },
        },
    )
    _write(
        out / "train_device" / "summary.json",
        {"batch_server": {"failed_batches": 0}, "learners": {"events": []}, "updates": 300, "complete": True},
    )
    _write(
        out / "train_host" / "summary.json",
        {"batch_server": {"failed_batches": 2}, "learners": {"events": [[1.0, 0, "died (RuntimeError)"]]}},
    )
    _write(out / "bench_learn.json", {"update_rate": {"device_over_host": 3.2}})
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "summary", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    verdicts = {c["check"]: c["verdict"] for c in json.loads((out / "summary.json").read_text())["checks"]}
    assert verdicts == {
        "pytest_cuda": "PASS",
        "capture_under_learner": "PASS",
        "graphs_agree_with_eager": "PASS",
        "curve_unpoisoned": "FAIL",
        "ceiling k=98": "PASS",
        "served k=98 batched K=9": "PASS",
        "served k=98 batched_remote K=9": "FAIL",
        "ceiling k=29": "SKIP: budget (20s of 440s left, it needs 50s)",
        "served k=29": "SKIP: budget (20s of 440s left, it needs 50s)",
        "ceiling k=7": "FAIL",
        "ceiling k=1": "PASS",
        "learner_effect_p99": "PASS",
        "train_device": "PASS",
        "train_host": "FAIL",
        "device_learner_rate": "PASS",
    }
    assert 'FAIL   ceiling k=7: {"worlds": 380' in (out / "summary.txt").read_text()


def test_ray_check_dry_run_says_what_it_would_run_and_its_summary_judges_the_targets(tmp_path):
    out = tmp_path / "dry"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ray-check"), "--dry-run"],
        env=_env(OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "would run: " + sys.executable + " -m nonstop bench nstar --backend ray --clock wall --nodes 2" in done.stdout
    )
    summary = json.loads((out / "summary.json").read_text())
    assert [(c["check"], c["verdict"]) for c in summary["checks"]] == [
        ("ray_1_actor_per_node", "SKIP: dry run"),
        ("ray_2_actors_per_node", "SKIP: dry run"),
        ("nstar_on_ray", "SKIP: dry run"),
    ]
    assert (
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "ray-check"), "--bogus"],
            env=_env(OUT=str(out)),
            capture_output=True,
            text=True,
            timeout=60,
        ).returncode
        == 2
    )

    made = tmp_path / "made"
    (made).mkdir()
    (made / "steps.tsv").write_text(
        "ray_1_actor_per_node\t0\t90\t120\nray_2_actors_per_node\t0\t90\t120\nnstar_on_ray\t124\t300\t300\n"
    )
    _write(
        made / "ray_1_actor_per_node.json", {"meets_target": {"actor_per_node_acts_every_tick": True}, "diagnosis": []}
    )
    _write(
        made / "ray_2_actors_per_node.json",
        {
            "meets_target": {"actor_per_node_acts_every_tick": False},
            "diagnosis": ["cpu_contention: 14 of 16 cores busy"],
        },
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ray_check.py"), "summary", str(made)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    verdicts = [c["verdict"] for c in json.loads((made / "summary.json").read_text())["checks"]]
    assert verdicts == ["PASS", "FAIL", "SKIP: exit 124, no JSON"]
    _write(
        made / "nstar_on_ray.json",
        {
            "rows": [
                {"scheduler": "quantile_hold", "tau_theta_ticks": 2, "nstar_measured": 3, "nstar_formula": 3},
                {"scheduler": "max_time", "tau_theta_ticks": 12, "nstar_measured": 15, "nstar_formula": 13},
            ]
        },
    )
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ray_check.py"), "summary", str(made)],
        env=_env(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert json.loads((made / "summary.json").read_text())["checks"][2]["verdict"] == "FAIL"  # 15 is not 13 +- 1


def test_the_capture_probe_runs_its_whole_path_on_the_cpu(tmp_path, no_shm_leak):
    """The probe gpu-check runs on CUDA, run here on the CPU (no graphs there): a server beside a device
    learner thread serves bursts of 1-64 requests with nothing failing, and the probe's figures are there."""
    out = tmp_path / "probe.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "probe", str(out), "cpu"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    p = json.loads(out.read_text())
    assert "error" not in p, p.get("traceback")
    assert p["device"] == "cpu" and p["failed_batches"] == 0 and p["batches"] >= 6 and p["learner_errors"] == 0
    assert p["curve"]["padding"] == [1, 2, 4, 8, 16, 32, 64] and p["graph_vs_eager_flips_away_from_ties"] == 0
    assert p["steady_L1_ms"] > 0 and "versions_taken" in p
