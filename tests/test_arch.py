"""The authors' 2xDeep ResNet (``--arch 2xdeep``): six conv sequences, 30 conv layers, the last
five at 32k channels, pooled as their released ``DeepImpalaCNN`` (strides 2, 1, 1, 1, 2, 1 to an
8×8 map, FC 512), beside the paper's 15-layer IMPALA network."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nonstop.learning.dqn import DQNConfig, build_q_network  # noqa: E402
from nonstop.policies.models import DEEP_PARAM_LABELS, count_parameters, impala_resnet, module_parameters  # noqa: E402


def _convs(net: torch.nn.Module) -> list[torch.nn.Conv2d]:
    return [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]


def test_2xdeep_has_thirty_conv_layers_and_the_counted_parameters():
    shallow, deep = impala_resnet(1, 18), impala_resnet(1, 18, depth=6)
    assert len(_convs(shallow)) == 15 and len(_convs(deep)) == 30
    assert [c.out_channels for c in _convs(deep)[15:]] == [32] * 15  # the final three blocks: 32k filters
    assert [c.padding for c in _convs(deep)[::5]] == [(0, 0)] * 6  # the base convs are unpadded
    assert [s.pool.stride for s in deep.sequences] == [2, 1, 1, 1, 2, 1]
    assert deep.fc.in_features == 32 * 8 * 8 and deep.fc.out_features == 512  # the authors' int(k * 2048) → 512
    assert module_parameters(deep) == count_parameters(1, 18, depth=6)
    assert module_parameters(deep) > module_parameters(shallow)
    out = deep(torch.zeros(2, 1, 84, 84))
    assert out.shape == (2, 18)
    # the appendix's labels (70k … 1B), counted without building the big ones
    for k, label in DEEP_PARAM_LABELS.items():
        assert 0.85 <= count_parameters(k, depth=6) / label <= 1.15, k


def test_arch_reaches_the_q_network_and_bad_arch_is_refused():
    net = build_q_network((84, 84), 6, DQNConfig(arch="2xdeep", k=0.25))
    assert len(_convs(net)) == 30
    default = build_q_network((84, 84), 6, DQNConfig(k=1))  # the authors' ImpalaCNN: unpadded, a 512 head
    assert len(_convs(default)) == 15 and default.fc.in_features == 1568 and default.fc.out_features == 512
    padded = build_q_network((84, 84), 6, DQNConfig(k=1, arch="impala_padded"))
    assert padded.fc.in_features == 32 * 11 * 11 and padded.fc.out_features == 256
    with pytest.raises(ValueError, match="DQNConfig.arch must be impala, impala_padded, 2xdeep or grid"):
        DQNConfig(arch="3xdeep")
    grid = build_q_network((13, 13, 5), 21, DQNConfig(arch="grid"))  # a many-agent world's window: GridConv
    assert type(grid).__name__ == "GridConv"
    with pytest.raises(ValueError, match=r"GridConv takes \(H, W, C\) windows"):
        build_q_network((84, 84), 6, DQNConfig(arch="grid"))
    with pytest.raises(ValueError, match="depth must be one of"):
        impala_resnet(1, 18, depth=4)


def test_train_arch_flag(tmp_path, capsys):
    import json

    from nonstop.cli import main

    assert main(["train", "--env", "Boxing", "--arch", "3xdeep", "--out", str(tmp_path / "bad")]) == 2
    assert "impala, impala_padded, 2xdeep or grid" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "--env",
            "Boxing",
            "--arch",
            "2xdeep",
            "--k",
            "0.25",
            "--seconds",
            "1",
            "--replay-capacity",
            "2000",
            "--learning-starts",
            "30",
            "--out",
            str(out),
            "--progress-every",
            "0.5",
        ]
    )
    assert rc == 0
    assert json.loads((out / "config.json").read_text())["algo_settings"]["arch"] == "2xdeep"


def test_2xdeep_costs_more_operations_per_parameter_than_the_15_layer_net():
    """Figure 6's premise: at the same size the deeper network is slower. Counted, not timed
    (timings: ``nonstop bench models --construction 2xdeep``); the count is checked against
    torch's own FLOP counter on built networks."""
    from torch.utils.flop_counter import FlopCounterMode

    from nonstop.policies.models import count_flops

    for k in (0.25, 1):
        for depth in (3, 6):
            net = impala_resnet(k, 18, depth=depth)
            with FlopCounterMode(display=False) as counter:
                net(torch.zeros(1, 1, 84, 84))
            assert counter.get_total_flops() == count_flops(k, 18, depth=depth), (k, depth)
    # at each appendix size, 2xDeep's FLOPs per parameter exceed the 15-layer net's at the same parameter count
    # (by 2.2-2.5x at 70k and 1M, 1.9x at 10M, 1.5-1.6x at 100M and 1B, where the big convs dominate both)
    for k_deep, label in DEEP_PARAM_LABELS.items():
        k_shallow = min((k / 64 for k in range(4, 64 * 110)), key=lambda k: abs(count_parameters(k) - label))
        deep_per_param = count_flops(k_deep, depth=6) / count_parameters(k_deep, depth=6)
        shallow_per_param = count_flops(k_shallow) / count_parameters(k_shallow)
        assert deep_per_param > 1.4 * shallow_per_param, (label, deep_per_param, shallow_per_param)


def _released(k: float, n_actions: int, deep: bool) -> int:
    """Parameters of the authors' released ``ImpalaCNN`` / ``DeepImpalaCNN`` (CERC-AAI/realtime_rl,
    model/architectures.py) at width ``k``, counted from their layer list: a 3×3 base conv
    (``in → int(16k)``, then ``int(16k) → int(32k)``, the rest ``int(32k) → int(32k)``) and four 3×3
    residual convs per sequence (3 sequences, 6 for Deep), then ``Linear(int(k·1568), 512)`` (Deep:
    ``int(k·2048)``) and ``Linear(512, actions)``."""
    f1, f2 = int(16 * k), int(32 * k)
    widths = [1, f1, f2, f2] + [f2] * (3 if deep else 0)
    conv = sum(9 * a * b + b + 4 * (9 * b * b + b) for a, b in zip(widths, widths[1:]))
    full = int(k * (2048 if deep else 1568))
    return conv + full * 512 + 512 + 512 * n_actions + n_actions


@pytest.mark.parametrize("k", [1, 7, 29, 98])
def test_impala_is_the_authors_imp_cnn_parameter_for_parameter(k):
    """The network named ``impala`` (the default of train, sweep and paper) has the released
    ``ImpalaCNN``'s parameter count at the paper's four widths: 0.91M at k = 1 (909,874 with 18
    actions); ``impala_padded``, the standard padded IMPALA net with a 256 head, 1.09M."""
    from nonstop.policies.models import ARCH_OPTIONS

    for actions in (6, 18):
        assert count_parameters(k, actions, **ARCH_OPTIONS["impala"]) == _released(k, actions, deep=False)
    if k == 1:
        assert count_parameters(1, 18, **ARCH_OPTIONS["impala"]) == 909_874
        assert count_parameters(1, 18, **ARCH_OPTIONS["impala_padded"]) == 1_093_426
        assert module_parameters(impala_resnet(1, 18, **ARCH_OPTIONS["impala"])) == 909_874


@pytest.mark.parametrize("k", sorted(DEEP_PARAM_LABELS))
def test_2xdeep_is_the_authors_deep_impala_cnn_at_every_width_of_the_appendix(k):
    from nonstop.policies.models import ARCH_OPTIONS

    for actions in (6, 18):
        assert count_parameters(k, actions, **ARCH_OPTIONS["2xdeep"]) == _released(k, actions, deep=True)
    if k <= 0.75:  # built, not only counted
        assert module_parameters(impala_resnet(k, 18, **ARCH_OPTIONS["2xdeep"])) == _released(k, 18, deep=True)


def test_2xdeeps_declared_delays_scale_against_the_authors_network():
    from nonstop.studies.sweep import deep_paper_ticks

    assert [deep_paper_ticks(k, game_boy=False) for k in (0.75, 4.75, 18.5, 63)] == [13, 17, 129, 1119]
