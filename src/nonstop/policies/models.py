"""Torch models: the paper's 15-layer IMPALA ResNet scaled by width ``k``, and a small MLP.

The ResNet (Espeholt et al. 2018, scaled as in Cobbe et al. 2019 and Riemer et
al. 2025 §5) is three conv sequences with ``16k, 32k, 32k`` channels, each

    conv3x3 → maxpool(3, stride 2) → 2 × residual block (relu → conv3x3 → relu → conv3x3, + skip)

(15 conv layers in all), then ``relu → flatten → FC(fc_hidden) → relu → FC(n_actions)``.

Parameter counts (84×84×1 input, 18 actions; `PARAM_TABLE`). `ImpalaResNet`'s default construction
is the authors' released code (CERC-AAI/realtime_rl ``ImpalaCNN``: unpadded base convs and pools,
84 → 40 → 18 → 7, and a 512-wide head: FC(1568k → 512)), the network named ``impala``
(`ARCH_OPTIONS`: the default of ``nonstop train``, ``sweep``, ``paper`` and ``plan``, and what the memory
checks count); next to it the standard padded IMPALA network (``same_padding=True, fc_hidden=256``,
84 → 42 → 21 → 11), named ``impala_padded``::

    k    authors' code    / label   padded           / label    paper's label
    1    909,874          0.91      1,093,426        1.09       1M
    7    10,374,898       1.04      11,688,946       1.17       10M
    29   104,689,074      1.05      110,148,274      1.10       100M
    98   1,008,098,898    1.01      1,026,558,802    1.03       1B

The FC hidden width stays fixed. The convs grow as ``k²`` (≈ 96,768 k²: 9,216 k² in
the first sequence, 41,472 k² and 46,080 k² in the other two) and the FC input only
as ``k`` (11·11·32k), so the convs carry the large models (90% of k = 98) and the
fixed head the small ones (91% of k = 1); a head that scaled with ``k`` would
overshoot k = 7 (a 256k-wide head alone is 49M there). Both constructions land within
±20% of the paper's labels, the tolerance the tests use.

The authors' **2xDeep** variant (``depth=6``, ``--arch 2xdeep``; the paper's appendix, "Training
Procedure for Atari": six blocks rather than three, 30 conv layers rather than 15, 32k filters in
the final three) is built as their released code builds it (CERC-AAI/realtime_rl,
``model/architectures.py``, ``DeepImpalaCNN``), which the appendix alone does not say: six conv
sequences, the first at ``16k`` channels and the other five at ``32k``, each an *unpadded* conv3x3,
then a max-pool of 3 whose stride is 2 in sequences 1 and 5 and 1 in sequences 2, 3, 4 and 6, then
two residual blocks; the map shrinks 84 → 40 → 36 → 32 → 28 → 12 → 8, and the head is
``FC(32k·8·8 → 512) → FC(n_actions)``. So ``depth=6`` defaults to ``same_padding=False,
fc_hidden=512``, as the 15-layer network does. Its parameters land on the appendix's
labels (`DEEP_PARAM_LABELS`: 76k, 0.93M, 10.3M, 99.9M, 0.999B for k = 0.0625 … 63), and because
sequences 2-4 work at 32k channels on 28-36 pixel maps where the 15-layer net has 11-21, it costs
more floating-point operations per parameter (`count_flops`: 2.5x the 15-layer net's at 1M
parameters, 1.9x at 10M, 1.5x at 100M and 1B): deeper is slower at the
same size, which is Figure 6's point. (An earlier reading kept sequences 4-6 on the 11×11 map
without pooling; it matched the labels less well and was only ~1.1× the 15-layer net's cost per
parameter.) ``nonstop bench models --construction 2xdeep`` times it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypedDict

import torch
from torch import nn

__all__ = [
    "ImpalaResNet",
    "ResidualBlock",
    "ConvSequence",
    "MLP",
    "FromObservations",
    "impala_resnet",
    "impala_channels",
    "count_parameters",
    "count_flops",
    "module_parameters",
    "PAPER_K",
    "PAPER_PARAM_LABELS",
    "ARCH_DEPTHS",
    "ARCH_OPTIONS",
    "DEEP_PARAM_LABELS",
    "POOL_STRIDES",
    "PARAM_TABLE",
    "estimate_memory_bytes",
    "available_memory_bytes",
    "ensure_fits",
    "ImpalaArch",
    "ImpalaShape",
    "NetworkChoice",
    "ModelTooLargeError",
]

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack for **kwargs is Python 3.12's


class ImpalaShape(TypedDict, total=False):
    """The shape options of `ImpalaResNet` beside its width and its input's channels (each optional: an
    84×84 input, 3 conv sequences, and the released networks' padding and head, `_arch_defaults`)."""

    input_hw: int
    fc_hidden: int | None
    same_padding: bool | None
    depth: int


class ImpalaArch(ImpalaShape, total=False):
    """The construction options of `ImpalaResNet` beside ``k`` and ``n_actions`` (each optional),
    as `count_parameters`, `estimate_memory_bytes` and `ensure_fits` take them."""

    in_channels: int


class NetworkChoice(TypedDict):
    """How a named network (`ARCH_OPTIONS`) is built: the `ImpalaResNet` options it fixes."""

    depth: int
    same_padding: bool
    fc_hidden: int


#: Width multipliers the paper uses for its 1M, 10M, 100M and 1B models.
PAPER_K: Final = (1, 7, 29, 98)
#: The paper's nominal parameter counts for `PAPER_K`.
PAPER_PARAM_LABELS: Final = {1: 1_000_000, 7: 10_000_000, 29: 100_000_000, 98: 1_000_000_000}
#: The networks by name (`DQNConfig.arch`, ``nonstop train --arch``), as `ImpalaResNet` options:
#: ``impala`` is the authors' ``ImpalaCNN`` (unpadded base convs and pools, a 512-wide head: 0.91M
#: parameters at k = 1), the paper's network and `ImpalaResNet`'s defaults; ``impala_padded`` the
#: standard padded IMPALA network with a 256-wide head (1.09M at k = 1);
#: ``2xdeep`` the authors' ``DeepImpalaCNN``.
ARCH_OPTIONS: Final[dict[str, NetworkChoice]] = {
    "impala": NetworkChoice(depth=3, same_padding=False, fc_hidden=512),
    "impala_padded": NetworkChoice(depth=3, same_padding=True, fc_hidden=256),
    "2xdeep": NetworkChoice(depth=6, same_padding=False, fc_hidden=512),
}
#: Conv sequences per architecture name.
ARCH_DEPTHS: Final = {name: options["depth"] for name, options in ARCH_OPTIONS.items()}
#: The appendix's widths and parameter labels of the 2xDeep ResNet (``depth=6``).
DEEP_PARAM_LABELS: Final = {0.0625: 70_000, 0.75: 1_000_000, 4.75: 10_000_000, 18.5: 100_000_000, 63: 1_000_000_000}


def impala_channels(k: float) -> tuple[int, int, int]:
    """Channels of the three conv sequences: ``(16k, 32k, 32k)``, truncated to ints
    as in the authors' code (so fractional ``k`` such as 0.75 works).

    >>> impala_channels(7)
    (112, 224, 224)
    """
    if not isinstance(k, (int, float)) or isinstance(k, bool) or not math.isfinite(k) or int(16 * k) < 1:
        raise ValueError(f"width multiplier k must be a number >= 1/16, got {k!r}")
    return int(16 * k), int(32 * k), int(32 * k)


#: depth → the max-pool stride of each conv sequence (2xDeep: the authors' ``DeepImpalaCNN``)
POOL_STRIDES: Final[dict[int, tuple[int, ...]]] = {3: (2, 2, 2), 6: (2, 1, 1, 1, 2, 1)}


def _arch_defaults(depth: int, same_padding: bool | None, fc_hidden: int | None) -> tuple[bool, int]:
    """The construction a depth gets when ``same_padding``/``fc_hidden`` are not given: the authors'
    released networks (``ImpalaCNN`` at depth 3, ``DeepImpalaCNN`` at 6), unpadded with a 512-wide head."""
    return (False if same_padding is None else same_padding), (512 if fc_hidden is None else fc_hidden)


def _check_shape(function: str, shape: Any) -> None:
    """Refuse an option `ImpalaShape` does not name, as a keyword argument would be refused.

    >>> _check_shape("impala_resnet", {"depth": 3, "width": 2})
    Traceback (most recent call last):
    ...
    TypeError: impala_resnet() got an unexpected keyword argument 'width' (its shape options: depth, fc_hidden, input_hw, same_padding)
    """
    for name in shape:
        if name not in ImpalaShape.__optional_keys__:
            known = ", ".join(sorted(ImpalaShape.__optional_keys__))
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r} (its shape options: {known})")


def _sequence_sizes(input_hw: int, same_padding: bool, depth: int) -> list[tuple[int, int]]:
    """Per conv sequence: (the base conv's output side, the side after its max-pool)."""
    pad = 1 if same_padding else 0
    size, sizes = input_hw, []
    for stride in POOL_STRIDES.get(depth, POOL_STRIDES[3]):
        conv = size + 2 * pad - 2  # conv3x3, stride 1
        size = (conv + 2 * pad - 3) // stride + 1  # maxpool 3
        if conv < 1 or size < 1:
            raise ValueError(f"input of {input_hw}x{input_hw} is too small for {depth} conv sequences")
        sizes.append((conv, size))
    return sizes


def _feature_size(input_hw: int, same_padding: bool, depth: int = 3) -> int:
    return _sequence_sizes(input_hw, same_padding, depth)[-1][1]


class ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3×3 convs that keep the shape."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """conv3x3 → maxpool(3, ``pool_stride``) → two `ResidualBlock` s (``pool_stride`` 1: 2xDeep's
    sequences 2-4 and 6, which keep most of the map)."""

    def __init__(self, in_channels: int, out_channels: int, *, same_padding: bool = True, pool_stride: int = 2) -> None:
        super().__init__()
        pad = 1 if same_padding else 0
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=pad)
        self.pool = nn.MaxPool2d(3, stride=pool_stride, padding=pad)
        self.res0 = ResidualBlock(out_channels)
        self.res1 = ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res1(self.res0(self.pool(self.conv(x))))


class ImpalaResNet(nn.Module):
    """The 15-layer IMPALA ResNet with widths ``16k, 32k, 32k`` (see the module docstring).

    Takes ``(B, in_channels, input_hw, input_hw)`` floats in ``[0, 1]``, returns ``(B, n_actions)``.

    >>> net = ImpalaResNet(1, 18)
    >>> net(torch.zeros(2, 1, 84, 84)).shape
    torch.Size([2, 18])
    >>> module_parameters(net) == count_parameters(1, 18)
    True
    """

    def __init__(
        self,
        k: float,
        n_actions: int,
        in_channels: int = 1,
        *,
        input_hw: int = 84,
        fc_hidden: int | None = None,
        same_padding: bool | None = None,
        depth: int = 3,
    ) -> None:
        super().__init__()
        same_padding, fc_hidden = _arch_defaults(depth, same_padding, fc_hidden)
        _check_arch(n_actions, in_channels, input_hw, fc_hidden, depth)
        c1, c2, c3 = impala_channels(k)
        self.k: Final = k
        self.n_actions: Final = n_actions
        self.depth: Final = depth
        channels = [in_channels, c1, c2, c3, *([c3] * (depth - 3))]
        self.sequences = nn.Sequential(
            *(
                ConvSequence(cin, cout, same_padding=same_padding, pool_stride=stride)
                for cin, cout, stride in zip(channels, channels[1:], POOL_STRIDES[depth])
            )
        )
        side = _feature_size(input_hw, same_padding, depth)
        self.fc = nn.Linear(c3 * side * side, fc_hidden)
        self.head = nn.Linear(fc_hidden, n_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.sequences(x)).flatten(1)
        return self.head(torch.relu(self.fc(x)))


def _check_arch(n_actions: int, in_channels: int, input_hw: int, fc_hidden: int, depth: int = 3) -> None:
    named = {"n_actions": n_actions, "in_channels": in_channels, "input_hw": input_hw, "fc_hidden": fc_hidden}
    for name, value in named.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if depth not in ARCH_DEPTHS.values():
        raise ValueError(
            f"depth must be one of {sorted(ARCH_DEPTHS.values())} conv sequences "
            f"({', '.join(f'{n}: {d}' for n, d in ARCH_DEPTHS.items())}), got {depth!r}"
        )


def impala_resnet(
    k: float,
    n_actions: int,
    in_channels: int = 1,
    *,
    device: str | torch.device = "cpu",
    check_memory: bool = True,
    **shape: Unpack[ImpalaShape],
) -> ImpalaResNet:
    """Build the paper's ResNet at width ``k`` directly on ``device``, in eval mode; ``shape``: its
    `ImpalaShape` options (``input_hw``, ``fc_hidden``, ``same_padding``, ``depth``).

    With ``check_memory`` (default) `ensure_fits` runs first, so a model that
    cannot fit raises `ModelTooLargeError` before anything is allocated.

    >>> impala_resnet(1, 6).training
    False
    """
    _check_shape("impala_resnet", shape)
    depth = shape.get("depth", 3)
    same_padding, fc_hidden = _arch_defaults(depth, shape.get("same_padding"), shape.get("fc_hidden"))
    arch = ImpalaArch(
        in_channels=in_channels,
        input_hw=shape.get("input_hw", 84),
        fc_hidden=fc_hidden,
        same_padding=same_padding,
        depth=depth,
    )
    if check_memory:
        ensure_fits(k, device, n_actions=n_actions, **arch)
    with torch.device(device):
        model = ImpalaResNet(k, n_actions, **arch)
    return model.eval()


def count_parameters(
    k: float,
    n_actions: int = 18,
    in_channels: int = 1,
    *,
    input_hw: int = 84,
    fc_hidden: int | None = None,
    same_padding: bool | None = None,
    depth: int = 3,
) -> int:
    """Parameters of `ImpalaResNet` at width ``k``, computed without building it.

    >>> count_parameters(98), count_parameters(98, same_padding=True, fc_hidden=256)
    (1008098898, 1026558802)
    >>> {k: round(count_parameters(k, depth=6) / label, 2) for k, label in DEEP_PARAM_LABELS.items()}
    {0.0625: 1.09, 0.75: 0.93, 4.75: 1.03, 18.5: 1.0, 63: 1.0}
    """
    same_padding, fc_hidden = _arch_defaults(depth, same_padding, fc_hidden)
    _check_arch(n_actions, in_channels, input_hw, fc_hidden, depth)
    c1, c2, c3 = impala_channels(k)

    def conv(cin: int, cout: int) -> int:
        return 9 * cin * cout + cout

    def sequence(cin: int, cout: int) -> int:
        return conv(cin, cout) + 4 * conv(cout, cout)  # base conv + 2 blocks × 2 convs

    side = _feature_size(input_hw, same_padding, depth)
    convs = sequence(in_channels, c1) + sequence(c1, c2) + sequence(c2, c3) + (depth - 3) * sequence(c3, c3)
    fc = c3 * side * side * fc_hidden + fc_hidden
    head = fc_hidden * n_actions + n_actions
    return convs + fc + head


def count_flops(
    k: float,
    n_actions: int = 18,
    in_channels: int = 1,
    *,
    batch: int = 1,
    input_hw: int = 84,
    fc_hidden: int | None = None,
    same_padding: bool | None = None,
    depth: int = 3,
) -> int:
    """Floating-point operations of one forward pass of `ImpalaResNet` at width ``k``, computed
    without building it: 2 × the multiply-accumulates of its convs and linear layers (what
    ``torch.utils.flop_counter.FlopCounterMode`` counts; biases, ReLUs, pools and skip additions
    are left out, under 1 % of the total). They grow as ``k²`` (≈ 75M k² at 84×84 for the authors'
    network, ≈ 98.4M k² for the padded one): a backward pass costs about twice as much again.

    >>> round(count_flops(1) / 1e6), round(count_flops(98) / 1e9)
    (79, 721)
    >>> round(count_flops(98, same_padding=True, fc_hidden=256) / 1e9)
    945
    >>> round(count_flops(1, depth=6) / 1e6)  # the authors' 2xDeep: ~2.8x the operations per parameter
    343
    """
    same_padding, fc_hidden = _arch_defaults(depth, same_padding, fc_hidden)
    _check_arch(n_actions, in_channels, input_hw, fc_hidden, depth)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    c1, c2, c3 = impala_channels(k)
    channels = [in_channels, c1, c2, c3, *([c3] * (depth - 3))]
    macs, size = 0, input_hw
    for cin, cout, (conv_side, size) in zip(channels, channels[1:], _sequence_sizes(input_hw, same_padding, depth)):
        macs += 9 * cin * cout * conv_side * conv_side  # the base conv3x3 (unpadded in the authors' construction)
        macs += 4 * 9 * cout * cout * size * size  # two residual blocks of two padded convs, after the pool
    macs += c3 * size * size * fc_hidden + fc_hidden * n_actions
    return 2 * macs * batch


def module_parameters(module: nn.Module) -> int:
    """Number of parameters a built module holds."""
    return sum(p.numel() for p in module.parameters())


#: ``k → parameters`` for the paper's four sizes (84×84×1 input, 18 actions, default construction).
PARAM_TABLE: Final[dict[int, int]] = {k: count_parameters(k) for k in PAPER_K}


def estimate_memory_bytes(
    k: float,
    n_actions: int = 18,
    in_channels: int = 1,
    *,
    batch: int = 1,
    bytes_per_value: int = 4,
    **shape: Unpack[ImpalaShape],
) -> int:
    """Bytes to hold the fp32 weights plus an activation margin for a forward pass (``shape``: the
    network's `ImpalaShape` options).

    The margin is four copies of the largest feature map (the first conv's
    ``16k × H × W`` output) per batch element: inference keeps at most a few maps alive.

    >>> round(estimate_memory_bytes(98) / 1e9, 2)
    4.2
    """
    _check_shape("estimate_memory_bytes", shape)
    depth, input_hw = shape.get("depth", 3), shape.get("input_hw", 84)
    same_padding, fc_hidden = _arch_defaults(depth, shape.get("same_padding"), shape.get("fc_hidden"))
    params = count_parameters(
        k, n_actions, in_channels, input_hw=input_hw, fc_hidden=fc_hidden, same_padding=same_padding, depth=depth
    )
    c1 = impala_channels(k)[0]
    first_map = c1 * (input_hw if same_padding else input_hw - 2) ** 2
    return (params + 4 * first_map * batch) * bytes_per_value


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory_bytes(device: str | torch.device = "cpu") -> int:
    """Memory a new model could use on ``device``.

    CPU: ``MemAvailable`` from ``/proc/meminfo``, capped by the cgroup limit
    (``memory.max − memory.current``) when one is set. CUDA: free bytes from
    ``torch.cuda.mem_get_info``.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(dev)!r} requested but CUDA is not available: use --device cpu")
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type != "cpu":
        raise ValueError(f"cannot tell free memory on device {str(dev)!r}: use 'cpu' or 'cuda'")
    available: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if available is None:  # not Linux: free physical pages
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        available = min(available, max(limit - used, 0))
    return int(available)


def _human(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 10**9 else f"{n / 1e6:.1f}M"


class ModelTooLargeError(ValueError, MemoryError):
    """A model would not fit in the memory available; raised before allocating it.

    Both a `ValueError` (a bad argument) and a `MemoryError` (what it prevents).
    """


def ensure_fits(
    k: float,
    device: str | torch.device = "cpu",
    *,
    n_actions: int = 18,
    available_bytes: int | None = None,
    headroom: float = 1.25,
    **arch: Unpack[ImpalaArch],
) -> int:
    """Raise `ModelTooLargeError` if the width-``k`` ResNet would not fit; return its estimate.

    ``available_bytes`` overrides the measured budget (`available_memory_bytes`),
    for tests and for sharing a machine between workers. ``headroom`` multiplies
    the estimate to leave room for the allocator and the rest of the process.

    >>> ensure_fits(1, available_bytes=10**9) > 0
    True
    >>> ensure_fits(98, available_bytes=2**30)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nonstop.policies.models.ModelTooLargeError: IMPALA ResNet k=98 (1.01B parameters) needs ~5.25 GB ...
    """
    if not (isinstance(headroom, (int, float)) and headroom >= 1.0):
        raise ValueError(f"headroom must be a factor >= 1, got {headroom!r}")
    estimate = estimate_memory_bytes(k, n_actions, **arch)
    source = "the given budget"
    if available_bytes is None:
        available_bytes = available_memory_bytes(device)
        source = f"free memory on {torch.device(device)}"
    needed = int(estimate * headroom)
    if needed > available_bytes:
        params = count_parameters(k, n_actions, **arch)
        raise ModelTooLargeError(
            f"IMPALA ResNet k={k} ({_human(params)} parameters) needs ~{needed / 1e9:.2f} GB "
            f"(fp32 weights + activations, x{headroom} headroom) but {source} is only "
            f"{available_bytes / 1e9:.2f} GB: use a smaller k, a device with more memory, or a LatencyPolicy "
            f"replaying this size's measured inference times"
        )
    return estimate


class MLP(nn.Module):
    """A small fully connected Q-network for vector observations (CartPole-like).

    >>> net = MLP(4, 2)
    >>> net(torch.zeros(1, 4)).shape
    torch.Size([1, 2])
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        widths = [obs_dim, *hidden]
        for name, value in (("obs_dim", obs_dim), ("n_actions", n_actions), *(("hidden", h) for h in hidden)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        layers: list[nn.Module] = [nn.Flatten()]
        for cin, cout in zip(widths, widths[1:]):
            layers += [nn.Linear(cin, cout), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FromObservations(nn.Module):
    """A Q-network that takes observations as the env gives them, and so runs without nonstop.

    ``uint8`` frames become float32 ``/ 255`` laid out ``(B, C, H, W)``, exactly as nonstop's DQN
    prepares them (``nonstop.learning.dqn._to_tensor``: ``(B, H, W)`` gains a channel axis,
    ``(B, H, W, C)`` with ``C <= 4`` is moved channels-first); other dtypes (vectors) are cast to
    float32. An observation without its batch axis is a batch of one. It scripts
    (``torch.jit.script``): `nonstop export` saves it as the program a user loads with plain torch.

    >>> net = FromObservations(ImpalaResNet(0.25, 6), (84, 84))
    >>> net(torch.full((84, 84), 255, dtype=torch.uint8)).shape, net(torch.zeros(5, 84, 84, dtype=torch.uint8)).shape
    (torch.Size([1, 6]), torch.Size([5, 6]))
    """

    __constants__ = [
        "obs_ndim"
    ]  # (a Final annotation is a string under `from __future__ import annotations`: unscriptable)

    def __init__(self, net: nn.Module, obs_shape: Sequence[int]) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise TypeError(f"net must be a torch.nn.Module, got {type(net).__name__}")
        if len(obs_shape) not in (1, 2, 3):
            raise ValueError(
                f"observations must be vectors (D,) or frames (H, W), (H, W, C), (C, H, W), got {tuple(obs_shape)}"
            )
        self.net = net
        self.obs_ndim = len(obs_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dim() == self.obs_ndim:
            obs = obs.unsqueeze(0)
        if obs.dtype != torch.uint8:
            return self.net(obs.to(torch.float32))
        x = obs.to(torch.float32).div(255.0)
        if x.dim() == 3:
            x = x.unsqueeze(1)
        elif x.dim() == 4 and x.shape[-1] <= 4:
            x = x.permute(0, 3, 1, 2)
        return self.net(x)
