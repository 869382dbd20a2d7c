"""Where models run and in what precision (`nonstop.inference.device`), on every path that builds one:
the batching server's forward pass, DQN workers, learners, the run config and `nonstop plan`'s
curve planning. CUDA-only checks skip where torch finds no CUDA; everything else runs on the CPU."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
import torch

from nonstop.commands._flags import add_device_arguments
from nonstop.experiment.config import TrainConfig
from nonstop.inference.batchsize import LatencyCurve, curve_table_spec, parse_curve
from nonstop.inference.device import (
    TorchForward,
    padded_size,
    parse_dtype,
    resolve_device,
    resolve_dtype,
    to_device,
    uses_pinned,
)
from nonstop.learning.dqn import DQNConfig, DQNPolicy, build_q_network, compute_gradient, init_training, make_dqn_policy
from nonstop.learning.learners import Learner, LearnerSettings, Segments
from nonstop.learning.replay import ReplayBuffer
from nonstop.learning.weights import SharedWeights, TrainingState

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (run on a GPU host before issue 22 is closed)")


def _conv_net(n_actions: int = 6) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_q_network((84, 84), n_actions, DQNConfig(k=0.25))  # the paper's ResNet, narrow: 4/8/8 channels


def _frames(b: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (b, 84, 84), dtype=np.uint8)


def _plain_argmax(model: torch.nn.Module, frames: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        x = torch.from_numpy(frames).float().div(255.0).unsqueeze(1)
        return model.eval()(x).argmax(1).numpy()


# ----------------------------------------------------------------------------- the forward pass


def test_channels_last_fp32_agrees_with_the_plain_path():
    model, frames = _conv_net(), _frames(16)
    want = _plain_argmax(model, frames)
    for channels_last in (False, True):
        got = TorchForward(_conv_net(), "cpu", dtype="fp32", channels_last=channels_last)(frames)
        assert got.shape == (16,) and (got == want).all(), channels_last


def test_bf16_autocast_runs_and_its_disagreement_is_measured_not_assumed():
    frames = _frames(64, seed=1)
    fp32 = TorchForward(_conv_net(), "cpu", dtype="fp32")
    bf16 = TorchForward(_conv_net(), "cpu", dtype="bf16")
    assert bf16.q_values(frames).dtype == torch.float32  # scores come back as float32 whatever ran
    differ = float((fp32(frames) != bf16(frames)).mean())
    assert 0.0 <= differ <= 1.0 and bf16.describe()["dtype"] == "bfloat16"
    # the scores differ by bf16's rounding, not by a broken path: close, yet not identical
    q32, q16 = fp32.q_values(frames), bf16.q_values(frames)
    assert torch.allclose(q32, q16, atol=0.05, rtol=0.05) and not torch.equal(q32, q16)


def test_padding_to_a_captured_size_returns_one_action_per_request():
    frames = _frames(20, seed=2)
    want = _plain_argmax(_conv_net(), frames)
    forward = TorchForward(_conv_net(), "cpu", graph_sizes=(1, 4, 16))
    assert not forward.graphs  # no CUDA graph on the CPU: padded, then run eagerly
    for b in (1, 3, 5, 16, 20):
        got = forward(frames[:b])
        assert got.shape == (b,) and (got == want[:b]).all(), b
    assert forward.padded_batches == {4: 1, 16: 1}  # 3 -> 4, 5 -> 16; 1 and 16 fit, 20 is past the largest
    assert [padded_size(b, (1, 4, 16)) for b in (1, 2, 4, 5, 17)] == [1, 4, 4, 16, 17]


def test_a_refresh_runs_before_each_batch_and_bad_settings_are_refused():
    calls = []
    forward = TorchForward(_conv_net(), "cpu", refresh=lambda m: calls.append(m))
    forward(_frames(2)), forward(_frames(3))
    assert len(calls) == 2 and calls[0] is forward.model
    assert not TorchForward(_conv_net(), "cpu", graph_sizes=(4,)).graphs  # off CUDA the sizes only pad
    with pytest.raises(ValueError, match="graph_sizes must be batch sizes >= 1"):
        TorchForward(_conv_net(), "cpu", graph_sizes=(0, 4))


def test_pinned_transfers_are_chosen_only_under_cuda():
    assert uses_pinned(torch.device("cuda")) and uses_pinned(torch.device("cuda:1"))
    assert not uses_pinned(torch.device("cpu"))
    t = torch.arange(6)
    assert to_device(t, torch.device("cpu")) is t  # on the CPU nothing moves, nothing is pinned


def test_dtypes_default_by_device_and_bad_ones_are_one_line():
    assert resolve_dtype(None, "cpu") == torch.float32 and resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16  # the device's type decides, CUDA or not here
    assert resolve_dtype("fp16", "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype must be fp32, bf16, fp16 or auto, got 'fp8'"):
        parse_dtype("fp8")
    if not CUDA:
        with pytest.raises(ValueError, match=r"device 'cuda:1' needs a CUDA GPU, but torch .* finds none"):
            resolve_device("cuda:1")


def test_the_shared_device_flags_parse_and_refuse_in_one_line(capsys):
    p = argparse.ArgumentParser()
    add_device_arguments(p)
    a = p.parse_args(["--device", "auto", "--dtype", "fp16"])
    assert (a.device, a.dtype) == ("auto", "fp16")
    with pytest.raises(SystemExit):
        p.parse_args(["--device", "tpu"])
    assert "device must be cpu, cuda, cuda:N or auto, got 'tpu'" in capsys.readouterr().err


#: two scores closer than this (relative to the row's largest) are a near-tie: hardware may order them either way
NEAR_TIE = 1e-3


def agree_away_from_ties(
    q: torch.Tensor, actions: np.ndarray, want: np.ndarray, margin: float = NEAR_TIE
) -> np.ndarray:
    """Rows where ``actions`` and ``want`` differ although ``q``'s top two scores are more than ``margin``
    apart (relative): real disagreements. At a near-tie a padded graph and an eager pass may each take
    either action (a different kernel, summation order or TF32 rounding), so those rows are not judged."""
    top2 = torch.topk(q.float(), 2, dim=1).values
    gap = (top2[:, 0] - top2[:, 1]) / top2[:, 0].abs().clamp_min(1e-12)
    clear = gap.numpy() > margin
    return np.flatnonzero(clear & (np.asarray(actions) != np.asarray(want)))


def test_argmax_is_judged_strictly_away_from_near_ties_only():
    q = torch.tensor([[1.0, 1.0000001, 0.0], [2.0, 1.0, 0.0], [0.5, 0.1, 0.9]])
    assert agree_away_from_ties(q, np.array([0, 0, 2]), np.array([1, 0, 2])).tolist() == []  # row 0 a near-tie
    assert agree_away_from_ties(q, np.array([1, 1, 2]), np.array([1, 0, 2])).tolist() == [1]  # row 1 is not
    assert agree_away_from_ties(q, np.array([1, 0, 0]), np.array([1, 0, 2])).tolist() == [2]


@needs_cuda
def test_on_cuda_graphs_bf16_and_pinned_uploads_agree_with_eager():
    """Graphs (every size captured by prepare), padding and pinned uploads give eager's actions, judged
    strictly on every row whose top two scores are not a near-tie; fp32 compared with TF32 off."""
    from nonstop.inference.cudaops import ieee_fp32

    frames = _frames(24, seed=3)
    with ieee_fp32():
        eager = TorchForward(_conv_net(), "cuda", dtype="fp32", graph_sizes=())
        graphed = TorchForward(_conv_net(), "cuda", dtype="fp32", graph_sizes=(1, 8, 32))
        assert graphed.graphs and graphed.channels_last
        assert graphed.prepare(frames[0]) == [1, 8, 32] and graphed.describe()["graphs_captured"] == [1, 8, 32]
        q = eager.q_values(frames)
        for b in (1, 5, 24):
            got = graphed(frames[:b])
            assert got.shape == (b,) and agree_away_from_ties(q[:b], got, eager(frames[:b])).size == 0, b
            assert graphed.last is not None and graphed.last.measurable and graphed.last.device_s is not None
    assert graphed.host_copies == 3 and graphed.describe()["graphs_captured"] == [1, 8, 32]  # no capture while serving
    bf16 = TorchForward(_conv_net(), "cuda", graph_sizes=(32,))
    assert (
        bf16.dtype == torch.bfloat16 and bf16.describe()["serving_dtype"] == "bfloat16" and bf16(frames).shape == (24,)
    )


# ----------------------------------------------------------------------------- workers and learners


def _replay_of_frames(n: int = 64) -> ReplayBuffer:
    rb = ReplayBuffer.create(capacity=128, obs_shape=(84, 84), dtype=np.uint8)
    rng = np.random.default_rng(0)
    prev = rb.add_frame(rng.integers(0, 256, (84, 84), dtype=np.uint8))
    for _ in range(n):
        f = rb.add_frame(rng.integers(0, 256, (84, 84), dtype=np.uint8))
        rb.add_transition(prev, int(rng.integers(3)), 1.0, 0.9, 1, f)
        prev = f
    return rb


@pytest.fixture
def frame_parts(no_shm_leak):
    cfg = DQNConfig(k=0.25, batch_size=4, learning_starts=8)
    model = build_q_network((84, 84), 3, cfg)
    n = sum(p.numel() for p in model.parameters())
    state, weights, replay = TrainingState.create(n), SharedWeights.create(n), _replay_of_frames()
    try:
        init_training(model, state, weights)
        yield cfg, state, weights, replay
    finally:
        for seg in (state, weights, replay):
            seg.unlink()


def test_a_learner_given_the_cpu_explicitly_computes_the_default_gradient(frame_parts):
    cfg, state, weights, replay = frame_parts
    default = Learner(0, LearnerSettings((84, 84), 3, cfg), Segments(state, weights, replay), seed=5)
    explicit = Learner(0, LearnerSettings((84, 84), 3, cfg, device="cpu"), Segments(state, weights, replay), seed=5)
    assert explicit.device == torch.device("cpu") and next(explicit.online.parameters()).device.type == "cpu"
    g1, loss1 = default.gradient()
    g2, loss2 = explicit.gradient()
    assert g1.dtype == np.float32 and np.array_equal(g1, g2) and loss1 == loss2
    version = explicit.version
    explicit.gradient()  # no new version published: the weights are not reloaded, the version stays
    assert explicit.version == version == weights.version


def test_compute_gradient_moves_the_batch_to_the_model_device(frame_parts):
    cfg, _, _, replay = frame_parts
    online, target = build_q_network((84, 84), 3, cfg), build_q_network((84, 84), 3, cfg)
    batch = replay.sample(4, np.random.default_rng(0))
    grad, loss = compute_gradient(online, target, batch, cfg)
    assert grad.shape == (sum(p.numel() for p in online.parameters()),) and math.isfinite(loss)


@needs_cuda
def test_a_learner_on_cuda_matches_the_cpu_gradient(frame_parts):
    cfg, state, weights, replay = frame_parts
    from nonstop.inference.cudaops import ieee_fp32

    cpu = Learner(0, LearnerSettings((84, 84), 3, cfg), Segments(state, weights, replay), seed=5).gradient()
    with ieee_fp32():  # TF32 convolutions would round the gradient past 1e-4: compared as IEEE fp32
        on_cuda = LearnerSettings((84, 84), 3, cfg, device="cuda")
        gpu = Learner(0, on_cuda, Segments(state, weights, replay), seed=5).gradient()
    assert np.allclose(cpu[0], gpu[0], atol=1e-4) and abs(cpu[1] - gpu[1]) < 1e-4


def test_dqn_policies_take_a_device_and_dtype(frame_parts):
    from gymnasium import spaces

    from nonstop.distributed.shared_params import SharedForward, make_shared_policy

    cfg, _, weights, _ = frame_parts
    space = spaces.Discrete(3)
    obs = _frames(1)[0]
    policy = make_dqn_policy((84, 84), space, cfg.to_dict(), weights, seed=0, device="cpu", dtype="bf16")
    assert isinstance(policy, DQNPolicy) and policy.dtype == torch.bfloat16
    weights.epsilon = 0.0
    assert 0 <= policy.act(obs).action < 3
    # one shared host copy of θ serves fp32 on the CPU; another precision needs the policy's own copy
    algo = cfg.algorithm((84, 84), space)
    assert isinstance(make_shared_policy(algo, weights, seed=0), SharedForward)
    own = make_shared_policy(algo, weights, seed=0, dtype="bf16")
    assert not isinstance(own, SharedForward) and own.act(obs).action in (0, 1, 2)


# ----------------------------------------------------------------------------- the run's config


def test_the_config_keeps_a_placement_and_leaves_the_defaults_out():
    assert "device" not in TrainConfig().to_dict() and "dtype" not in TrainConfig().to_dict()
    d = TrainConfig(device="auto", dtype="BF16").to_dict()
    assert (d["device"], d["dtype"]) == ("auto", "bf16")
    assert TrainConfig(**{**TrainConfig().to_dict(), "device": "auto"}).device == "auto"
    with pytest.raises(ValueError, match="device must be cpu, cuda, cuda:N or auto, got 'gpu'"):
        TrainConfig(device="gpu")
    with pytest.raises(ValueError, match="with Ray"):
        TrainConfig(clock="wall", backend="ray", device="cuda")


def test_a_resumed_run_keeps_its_device_and_an_old_run_resumes(tmp_path, no_shm_leak):
    from nonstop.cli import build_parser
    from nonstop.commands.train import settings_from_args

    base = ["train", "--env", "CartPole", "--seconds", "1", "--learning-starts", "50", "--progress-every", "0.5"]
    out = tmp_path / "run"
    from nonstop.cli import main

    assert main([*base, "--device", "auto", "--dtype", "fp32", "--out", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert (saved["device"], saved["dtype"]) == ("auto", "fp32")
    argv = ["train", "--resume", str(out), "--seconds", "2"]
    args = build_parser().parse_args(argv)
    args.argv = argv
    cfg, rec, lines = settings_from_args(args)
    assert rec.resume and str(rec.out) == str(out)
    assert (cfg.device, cfg.dtype) == ("auto", "fp32") and lines == ["seconds: 1.0 → 2.0"]
    assert main(argv) == 0  # and it runs on
    old = tmp_path / "old"  # a run saved before the fields existed: neither key in its config
    assert main([*base, "--out", str(old)]) == 0
    assert "device" not in json.loads((old / "config.json").read_text())
    assert main(["train", "--resume", str(old), "--seconds", "2"]) == 0


# ----------------------------------------------------------------------------- plan --batch-curve


def test_plan_from_a_linear_curve_gives_the_analytic_worlds():
    from nonstop.commands.plan import plan_curves

    a, c, tau_m = 0.001, 0.00025, 1 / 60
    for max_batch in (8, 64, 1024):
        r = plan_curves([("card", LatencyCurve.linear(a, c))], tick_hz=60.0, max_batch=max_batch, worlds=None)[
            "curves"
        ][0]
        # b·τ_M/(a + c·b) grows with b, so the largest batch decides: K = ⌊B·τ_M/(a + c·B)⌋ < τ_M/c
        assert r["worlds_ceiling"] == math.floor(max_batch * tau_m / (a + c * max_batch)) < tau_m / c
        k = r["worlds_ceiling"]
        b = r["steady_batch"]  # the smallest batch that keeps up with K worlds: L(b) <= b·τ_M/K
        assert a + c * b <= b * tau_m / k * (1 + 1e-9) and (b == 1 or a + c * (b - 1) > (b - 1) * tau_m / k)
        assert r["lanes_forward"] == max(1, math.ceil((a + c * b) / tau_m - 1e-9))


def test_plan_says_which_card_runs_n_worlds(capsys, tmp_path):
    from nonstop.cli import main

    saved = tmp_path / "fast.curve"
    saved.write_text("# measured by hand\n" + curve_table_spec({1: 0.0005, 64: 0.0069}) + "\n")
    assert parse_curve(str(saved))(64) == pytest.approx(0.0069)
    assert (
        main(
            [
                "plan",
                "--batch-curve",
                "slow=linear:2ms,1ms",
                "--batch-curve",
                f"fast={saved}",
                "--worlds",
                "100",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # slow: b·τ_M/(2 + b) ms < 16.7 worlds; fast: 64 in 6.9 ms keeps up with 64·16.67/6.9 = 154
    assert r["cards_that_keep_up"] == ["fast"] and [c["worlds_ceiling"] for c in r["curves"]] == [16, 154]
    assert main(["plan", "--batch-curve", "quadratic:1,2"]) == 2
    assert "--batch-curve: bad latency curve" in capsys.readouterr().err


# ----------------------------------------------------------------------------- bench gpu


def test_bench_gpu_measures_a_curve_that_train_and_plan_read_back(tmp_path, capsys, no_shm_leak):
    from nonstop.cli import main

    saved = tmp_path / "cpu.curve"
    assert (
        main(
            [
                "bench",
                "gpu",
                "--quick",
                "--device",
                "cpu",
                "--dtypes",
                "fp32,bf16",
                "--batch-sizes",
                "1,3",
                "--worlds",
                "1",
                "--seconds",
                "1",
                "--no-baseline",
                "--no-remote",
                "--save-curve",
                str(saved),
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["device"] == "cpu" and [(c["dtype"], c["mode"]) for c in r["curves"]] == [
        ("fp32", "eager"),
        ("bf16", "eager"),
    ]
    fp32, bf16 = r["curves"]
    assert fp32["actions_differ_from_fp32"] == 0.0 and 0.0 <= bf16["actions_differ_from_fp32"] <= 1.0
    files = sorted(tmp_path.glob("cpu-k1-*.curve"))
    assert [f.name for f in files] == ["cpu-k1-bf16.curve", "cpu-k1-fp32.curve"]
    curve = parse_curve(str(files[1]))
    assert [round(curve(b) * 1e3, 3) for b in (1, 3)] == [round(fp32["L_ms"][b], 3) for b in ("1", "3")]
    assert main(["plan", "--batch-curve", str(files[1]), "--max-batch", "3", "--json"]) == 0  # as far as it measured
    assert (
        json.loads(capsys.readouterr().out.strip().splitlines()[-1])["curves"][0]["worlds_ceiling"]
        == fp32["worlds_ceiling"]
    )
    (served,) = r["served"]  # one Boxing world on the real clock, its lanes served by the k=1 model on this CPU
    assert served["design"] == "batched" and served["requests"] > 0 and 0.0 < served["utilisation"] <= 1.0
    assert 0.0 <= served["inaction_max"] <= 1.0 and "worlds_per_process" not in r


def test_bench_gpu_names_the_batch_that_ran_out_of_memory_and_what_fit():
    """A device that cannot hold a batch of 8: the curve stops there, says so, and keeps what fit."""
    from nonstop.bench.gpu import _time_curve
    from nonstop.realtime.clock import VirtualClock

    def forward(batch: np.ndarray) -> np.ndarray:
        if len(batch) >= 8:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return np.zeros(len(batch), np.int64)

    out = _time_curve(forward, _frames(16), [1, 4, 8, 16], repeats=2, clock=VirtualClock())
    assert out["out_of_memory_at_batch"] == 8 and out["largest_batch_that_fit"] == 4 and sorted(out["L_s"]) == [1, 4]


def test_a_torch_policy_takes_a_dtype():
    from gymnasium import spaces

    from nonstop.policies.base import TorchPolicy

    frames = _frames(8, seed=4)
    fp32 = TorchPolicy(_conv_net(), spaces.Discrete(6))
    bf16 = TorchPolicy(_conv_net(), spaces.Discrete(6), dtype="bf16")
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert [fp32.act(f).action for f in frames] == _plain_argmax(_conv_net(), frames).tolist()
    q = bf16.q_values(frames[0])
    assert q.dtype == torch.float32 and q.shape == (6,) and 0 <= bf16.act(frames[0]).action < 6
