"""`nonstop plan` against hand-computed cases (docs/design.md §5)."""

from __future__ import annotations

import json

import pytest

from nonstop.cli import main
from nonstop.commands.plan import PROCESS_BASE_BYTES, plan


def test_plan_hand_computed():
    # τ_M = 1/60 s; τ_θ = 0.1 s = 6 ticks -> N_I* = 6; τ_L/B = 0.4/16 = 0.025 s = 1.5 ticks -> N_L* = 2
    p = plan(forward_s=0.1, update_s=0.4, tick_hz=60, batch_size=16, n_params=1_000_000, obs_bytes=7056,
             activation_bytes=1000, process_base_bytes=10_000, nodes=2)  # fmt: skip
    assert (p["n_inference_star"], p["n_learners_star"], p["cores"]) == (6, 2, 9)
    assert p["memory_bytes"] == {
        "theta": 4_000_000,
        "inference_separate_copies": 6 * (4_000_000 + 11_000),
        "inference_shared_weights": 2 * 4_000_000 + 6 * 11_000,
    }
    assert p["traffic_bytes_per_s"]["observations"] == 60 * 7056
    assert p["traffic_bytes_per_s"]["actions"] == 60 * 24
    assert p["weight_versions_per_s"] == pytest.approx(60 / 16)
    assert p["traffic_bytes_per_s"]["weights"] == pytest.approx(60 / 16 * 4_000_000 * 2)


def test_plan_exact_multiples_do_not_round_up():
    p = plan(forward_s=5 / 60, update_s=16 * 3 / 60, tick_hz=60, batch_size=16)
    assert (p["n_inference_star"], p["n_learners_star"]) == (5, 3)
    assert "memory_bytes" not in p and "weights" not in p["traffic_bytes_per_s"]


def test_plan_fast_model_needs_one_of_each():
    p = plan(forward_s=0.001, update_s=0.001, tick_hz=60, batch_size=32)
    assert (p["n_inference_star"], p["n_learners_star"], p["cores"]) == (1, 1, 3)


@pytest.mark.parametrize("kwargs, match", [
    ({"forward_s": 0.0, "tick_hz": 60}, "forward time"),
    ({"forward_s": 0.1, "tick_hz": -1}, "tick rate"),
    ({"forward_s": 0.1, "tick_hz": 60, "batch_size": 0}, "batch size"),
])  # fmt: skip
def test_plan_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan(**kwargs)


def test_cli_paper_1b_model_at_60hz_with_declared_times(capsys):
    # the paper's k=98 (1B) model, times declared for other hardware: 700 ms forward, 5 s per update of 16
    assert main(["plan", "--k", "98", "--forward-ms", "700", "--update-ms", "5000", "--hz", "60", "--json"]) == 0
    p = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert p["n_params"] == 1_026_558_802
    assert p["n_inference_star"] == 42  # ⌈0.7 · 60⌉
    assert p["n_learners_star"] == 19  # ⌈(5/16) · 60⌉ = ⌈18.75⌉
    assert p["times"] == "declared"
    theta = 4 * 1_026_558_802
    assert p["memory_bytes"]["theta"] == theta
    assert p["memory_bytes"]["inference_separate_copies"] - p["memory_bytes"]["inference_shared_weights"] == 41 * theta


def test_cli_latency_only_and_errors(capsys):
    assert main(["plan", "--latency", "5t", "--hz", "60", "--json"]) == 0
    p = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (p["n_inference_star"], p["n_learners_star"], p["cores"]) == (5, None, 6)
    assert main(["plan", "--hz", "60"]) == 2
    assert "give a model" in capsys.readouterr().err
    assert main(["plan", "--k", "1", "--latency", "5t"]) == 2


def test_cli_measures_a_small_model_here(capsys):
    assert main(["plan", "--k", "1", "--batch-size", "4", "--json"]) == 0
    p = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert p["times"].startswith("measured")
    assert p["tau_theta_s"] > 0 and p["tau_l_update_s"] > 0
    assert p["n_inference_star"] == max(1, -(-p["tau_theta_s"] * 60 // 1))
    assert PROCESS_BASE_BYTES > 0


def test_plan_doctest():
    import doctest

    import nonstop.commands.plan as plan_module

    failures, tried = doctest.testmod(plan_module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_cli_device_cuda_without_a_gpu_is_a_clear_error(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on CI, also on a GPU machine
    assert main(["plan", "--k", "1", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--forward-ms" in err
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        from nonstop.commands.plan import measure_times

        measure_times(1, 4, device="tpu")


def test_python_dash_m_nonstop_is_the_command():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "nonstop", "plan", "--latency", "5t", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["n_inference_star"] == 5
