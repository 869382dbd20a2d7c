"""A learner on the device (`nonstop.learning.devicelearner`, ``--learner-backend device``): the same Adam
numbers as the host's, the batching server's model following each version by a device copy with no
host copy in between, checkpoints that keep θ and the moments, and the one-line refusals. On the CPU;
the CUDA check skips where torch finds no CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nonstop.experiment import Run, TrainConfig
from nonstop.inference.cudaops import ieee_fp32
from nonstop.learning import weights as weights_module
from nonstop.learning.devicelearner import DeviceLearner, DeviceTrainingState
from nonstop.learning.dqn import DQNConfig, build_q_network, init_training
from nonstop.learning.learners import Learner, LearnerSettings, Segments, apply
from nonstop.learning.replay import ReplayBuffer
from nonstop.learning.weights import SharedWeights, TrainingState
from nonstop.metrics.timing import episode_returns

CUDA = torch.cuda.is_available()


def _filled_replay(n: int = 300, seed: int = 0) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    replay = ReplayBuffer.create(capacity=1000, obs_shape=(4,), dtype=np.float32)
    frames = [replay.add_frame(rng.normal(size=4).astype(np.float32)) for _ in range(n + 1)]
    for i in range(n):
        replay.add_transition(
            frames[i], int(rng.integers(2)), float(rng.normal()), 0.0 if i % 17 == 16 else 0.99, 1, frames[i + 1]
        )
    return replay


def _host_and_device(cfg: DQNConfig, replay: ReplayBuffer, device: str) -> tuple[list, Learner, DeviceLearner]:
    torch.manual_seed(1)
    model = build_q_network((4,), 2, cfg)
    n = sum(p.numel() for p in model.parameters())
    segs = [TrainingState.create(n), SharedWeights.create(n), TrainingState.create(n), SharedWeights.create(n)]
    init_training(model, segs[0], segs[1])
    init_training(model, segs[2], segs[3])
    settings = LearnerSettings((4,), 2, cfg)
    host = Learner(0, settings, Segments(segs[0], segs[1], replay), seed=5)
    dstate = DeviceTrainingState.from_host(segs[2], device)
    dev = DeviceLearner(settings, dstate, Segments(segs[2], segs[3], replay), seed=5)
    return segs, host, dev


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="needs CUDA"))]
)
def test_a_device_learner_takes_the_host_learners_adam_steps(device, no_shm_leak):
    """K = 40 updates from the same replay, sampling seed and initial θ: the device learner's θ, Adam moments
    and target (synced every 7 updates) are the host path's, and `to_host` writes them back once."""
    cfg = DQNConfig.for_family("classic", learning_starts=10, batch_size=16, lr=3e-3, target_update=7, double=True)
    replay = _filled_replay()
    segs, host, dev = _host_and_device(cfg, replay, device)
    try:
        start = segs[0].params.copy()
        with ieee_fp32():  # on CUDA: no TF32 rounding in a comparison at rtol 1e-5
            for _ in range(40):
                grad, loss = host.gradient()
                apply(segs[0], segs[1], grad, loss, cfg)
                dev.apply(dev.gradient())
        d = dev.dstate
        for name, tensor in (("params", d.theta), ("adam_m", d.adam_m), ("adam_v", d.adam_v), ("target", d.target)):
            np.testing.assert_allclose(tensor.cpu().numpy(), getattr(segs[0], name), rtol=1e-5, atol=1e-6, err_msg=name)
        assert not np.allclose(segs[0].params, start)  # it learned: the comparison is not vacuous
        assert not np.allclose(segs[0].target, start) and not np.allclose(
            segs[0].target, segs[0].params
        )  # synced at 35
        assert d.version == 40 and d.target_syncs == 5 and segs[2].updates == 40
        assert d.host_writes == 0 and segs[3].version == 1  # nothing reached the host while it learned
        assert d.to_host(segs[2], segs[3]) and not d.to_host(segs[2], segs[3])  # written once, then up to date
        np.testing.assert_allclose(segs[2].adam_v, segs[0].adam_v, rtol=1e-5, atol=1e-9)
        assert segs[2].target_version == segs[0].target_version == 10 and segs[3].version == 2
    finally:
        for seg in (*segs, replay):
            seg.unlink()


def test_a_virtual_run_with_the_device_learner_is_the_host_learners_run(no_shm_leak):
    """The same CartPole run with ``--learner-backend device`` and with host learners: the same actions, update
    count, parameters and Adam moments at the end (one learner, the same cadence, the same Adam numbers)."""
    dqn = DQNConfig.for_family("classic", learning_starts=100, batch_size=16)
    logs = {}
    for backend in ("process", "device"):
        run = Run(
            TrainConfig(
                env="CartPole",
                seconds=8.0,
                latency="0.6t",
                algo_settings=dqn,
                scheduler="quantile_hold",
                n_inference=2,
                backend="batched",
                learner_backend=backend,
            )
        )
        try:
            run.build().start()
            run.advance(8.0)
            logs[backend] = (
                np.array(run.world.tick_log["action"]),
                run.state.updates,
                run.learning.current_params(),
                run.state.adam_v.copy(),
            )
        finally:
            run.teardown()
    assert logs["device"][1] == logs["process"][1] > 100
    assert np.array_equal(logs["device"][0], logs["process"][0])
    np.testing.assert_allclose(logs["device"][2], logs["process"][2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logs["device"][3], logs["process"][3], rtol=1e-5, atol=1e-10)
    assert logs["device"][3].any()  # Adam moved: the comparison is not of two untouched states


class _Counts:
    """Counts every host copy of the weights: publishes, reads and loads through the host's vectors."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, int] = {"publish": 0, "read_into": 0, "load_flat": 0, "to_host": 0}
        for owner, name in (
            (SharedWeights, "publish"),
            (SharedWeights, "read_into"),
            (weights_module, "load_flat"),
            (DeviceTrainingState, "to_host"),
        ):
            monkeypatch.setattr(owner, name, self._counted(name, getattr(owner, name)))

    def _counted(self, name: str, fn):
        def counted(*args, **kwargs):
            self.calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    def reset(self) -> None:
        self.calls = dict.fromkeys(self.calls, 0)


def test_the_server_follows_each_version_by_a_device_copy_and_the_run_learns(monkeypatch, no_shm_leak):
    """``--backend batched --learner-backend device`` on the virtual clock, CartPole for 90 world seconds:
    the server's model takes each new θ from the learner's device state (as many copies as versions, in
    order), no weights pass through the host while it runs, its θ is the learner's, and the return rises."""
    counts = _Counts(monkeypatch)
    dqn = DQNConfig.for_family("classic", learning_starts=500)
    run = Run(
        TrainConfig(
            env="CartPole",
            seconds=90.0,
            latency="0.6t",
            algo_settings=dqn,
            scheduler="quantile_hold",
            n_inference=2,
            backend="batched",
            learner_backend="device",
        )
    )
    try:
        run.build().start()
        counts.reset()
        run.advance(90.0)
        during = dict(counts.calls)
        dstate = run.part("device_state").dstate
        forward = run.part("batch_server").model_forward
        loaded, server_model = forward.refresh.loaded, forward.model
        served = torch.cat([p.detach().reshape(-1) for p in server_model.parameters()])
        versions = dstate.version
        returns = episode_returns(run.world.tick_log)
    finally:
        run.teardown()
    assert during == {"publish": 0, "read_into": 0, "load_flat": 0, "to_host": 0}, during
    assert versions == run.final_updates > 2000 and dstate.host_writes == 1  # the end of the run's write only
    assert loaded == sorted(set(loaded)) and len(loaded) >= 0.9 * versions and loaded[-1] >= versions - 1
    if loaded[-1] == versions:
        assert torch.equal(served, dstate.theta)
    assert len(returns) > 40 and np.mean(returns[-10:]) > 2 * np.mean(returns[:10]), returns


def test_thread_workers_get_each_version_through_the_host(no_shm_leak):
    """With workers that read `SharedWeights` (``--backend thread``) the device learner publishes each version
    there: one host copy a version, documented, and the workers act on it."""
    dqn = DQNConfig.for_family("classic", learning_starts=50, batch_size=8)
    run = Run(TrainConfig(env="CartPole", seconds=4.0, algo_settings=dqn, learner_backend="device"))
    try:
        run.build().start()
        run.advance(4.0)
        dstate, published = run.part("device_state").dstate, run.weights.version
        params = run.learning.current_params()
    finally:
        run.teardown()
    assert dstate.version > 20 and dstate.host_writes == dstate.version and published == dstate.version + 1
    np.testing.assert_array_equal(params, dstate.theta.numpy())


def test_a_checkpoint_keeps_the_device_learners_params_and_moments(no_shm_leak):
    """A snapshot of a device-learner run holds the device's θ, Adam moments and target; a run restored from
    it starts its device learner from exactly those and learns on."""
    dqn = DQNConfig.for_family("classic", learning_starts=50, batch_size=8, target_update=40)
    cfg = dict(
        env="CartPole",
        latency="0.6t",
        algo_settings=dqn,
        scheduler="quantile_hold",
        n_inference=2,
        backend="batched",
        learner_backend="device",
    )
    run = Run(TrainConfig(seconds=6.0, **cfg))
    try:
        run.build().start()
        run.advance(6.0)
        run.quiesce()
        snap = run.snapshot()
        d = run.part("device_state").dstate
        before = {
            name: getattr(d, attr).clone()
            for name, attr in (("params", "theta"), ("adam_m", "adam_m"), ("adam_v", "adam_v"), ("target", "target"))
        }
    finally:
        run.teardown()
    assert snap["updates"] > 100 and snap["target_version"] >= 2
    for name, tensor in before.items():
        assert torch.equal(snap[name], tensor), name
    assert float(before["adam_v"].abs().sum()) > 0

    resumed = Run(TrainConfig(seconds=12.0, **cfg))
    try:
        resumed.build()
        resumed.restore(snap)
        resumed.start()
        d2 = resumed.part("device_state").dstate
        for name, attr in (("params", "theta"), ("adam_m", "adam_m"), ("adam_v", "adam_v"), ("target", "target")):
            assert torch.equal(getattr(d2, attr), before[name]), name
        resumed.advance(2.0)
        assert resumed.state.updates > snap["updates"] and not torch.equal(d2.theta, before["params"])
    finally:
        resumed.teardown()


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(n_learners=2), "one learner a device"),
        (dict(interaction="infer_then_learn"), "learns inside its own loop"),
        (dict(clock="wall", backend="ray"), "with --backend ray"),
    ],
)
def test_the_device_learner_refuses_what_it_cannot_do_in_one_line(kw, says):
    with pytest.raises(ValueError, match=says) as err:
        TrainConfig(learner_backend="device", **kw)
    assert "\n" not in str(err.value)


def test_a_wall_clock_run_learns_on_a_device_learner_thread(no_shm_leak):
    """On the wall clock the learner is a thread of the run's process: it updates, the server follows, and the
    run's end writes the newest version to the host once."""
    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(
        TrainConfig(
            env="CartPole",
            clock="wall",
            seconds=2.0,
            algo_settings=dqn,
            n_inference=2,
            backend="batched",
            learner_backend="device",
        )
    )
    try:
        run.build().start()
        run.advance(2.0)
        run.quiesce()
        dstate = run.part("device_state").dstate
        report = run.learners.report()
    finally:
        run.teardown()
    assert dstate.version > 5 and dstate.host_writes == 1 and dstate.device_copies > 1
    assert report["backend"] == "device" and report["restarts"] == [0] and run.final_updates == dstate.version


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (run on a GPU host before issue 22 is closed)")
def test_on_cuda_the_learner_and_the_server_share_the_device_with_no_host_copy(monkeypatch, no_shm_leak):
    """``--device cuda``: θ, the moments and the target live on the GPU, the server's model (CUDA graphs) takes
    each version by a device-to-device copy, and no weights reach the host until the run's end."""
    counts = _Counts(monkeypatch)
    dqn = DQNConfig.for_family("classic", learning_starts=50, batch_size=16)
    run = Run(
        TrainConfig(
            env="CartPole",
            seconds=6.0,
            latency="0.6t",
            algo_settings=dqn,
            scheduler="quantile_hold",
            n_inference=2,
            backend="batched",
            learner_backend="device",
            device="cuda",
        )
    )
    try:
        run.build().start()
        counts.reset()
        run.advance(6.0)
        during = dict(counts.calls)
        dstate = run.part("device_state").dstate
        forward = run.part("batch_server").model_forward
        forward.refresh(forward.model)
        served = torch.cat([p.detach().reshape(-1) for p in forward.model.parameters()])
        assert dstate.theta.is_cuda and served.is_cuda and torch.equal(served, dstate.theta)
    finally:
        run.teardown()
    assert during == {"publish": 0, "read_into": 0, "load_flat": 0, "to_host": 0}, during
    assert dstate.version == run.final_updates > 100 and dstate.device_copies > 0.9 * dstate.version


def test_a_device_learner_that_dies_goes_on_under_the_restart_budget_and_then_ends_the_run(no_shm_leak):
    """A failed update is the learner's death: within ``--max-restarts`` it goes on from its device state (which
    is whole), and learns on; past the budget the run's check raises `PartFailed` in one line."""
    from nonstop.realtime.lifeline import PartFailed

    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(TrainConfig(env="CartPole", seconds=10.0, algo_settings=dqn, learner_backend="device", max_restarts=1))
    try:
        run.build().start()
        run.advance(2.0)
        run.learners.kill()
        before = run.state.updates
        run.advance(2.0)
        report = run.learners.report()
        assert report["restarts"] == [1] and "died (RuntimeError: learner 0 killed)" in [e[2] for e in report["events"]]
        assert run.state.updates > before + 50
        run.learners.kill()
        with pytest.raises(PartFailed, match="learner 0 kept dying") as err:
            run.advance(1.0)
        assert "\n" not in str(err.value)
    finally:
        run.teardown()


def test_train_refuses_a_second_device_learner_before_creating_the_run_dir(tmp_path, capsys):
    from nonstop.cli import main

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--seconds", "1", "--learner-backend", "device", "--n-learners", "2"]) == 2
    err = capsys.readouterr().err
    assert "one learner a device" in err and err.count("\n") == 1 and not out.exists()


def test_a_gradient_autograd_moved_out_of_the_flat_buffer_is_gathered_back(no_shm_leak):
    """Each parameter's ``.grad`` is a view into one flat buffer; where a gradient is no longer one (autograd may
    replace it), the buffer gathers it on the device and the views are restored."""
    cfg = DQNConfig.for_family("classic", learning_starts=10, batch_size=16)
    replay = _filled_replay()
    segs, _, dev = _host_and_device(cfg, replay, "cpu")
    try:
        dev.gradient()
        want = torch.cat([p.grad.reshape(-1).clone() for p in dev.online.parameters()])
        first = next(dev.online.parameters())
        first.grad = first.grad.clone()  # no longer a view of the buffer
        dev._grad.zero_()  # the buffer (and every gradient still a view of it) now holds zeros
        n = first.numel()
        assert want[:n].abs().sum() > 0 and not torch.equal(dev._grad[:n], want[:n])
        got = dev._flat_grad()
        assert first.grad.data_ptr() == dev._grad.data_ptr() and got.data_ptr() == dev._grad.data_ptr()
        assert torch.equal(got[:n], want[:n]) and not got[n:].any()
    finally:
        for seg in (*segs, replay):
            seg.unlink()
