"""The inference time each cell of the sweep declares: the paper's measured ticks per model size (its
Figure 7 and Appendix A), 2xDeep's scaled from them by FLOPs, or this machine's forward time."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

__all__ = ["DEEP_SIZES", "PAPER_SIZES", "declared_delays", "deep_paper_ticks", "delay_ticks", "fmt_k"]

#: k → (parameters, declared inference ticks at 60 Hz, at the Game Boy's 59.7275 Hz): the paper's Figure 7 / Appendix A
PAPER_SIZES: Final[dict[float, tuple[str, int, int]]] = {
    1: ("1M", 5, 5),
    7: ("10M", 8, 8),
    29: ("100M", 70, 70),
    98: ("1B", 599, 596),
}


#: 2xDeep width k → its parameter label (the appendix's "Training Procedure for Atari")
DEEP_SIZES: Final[dict[float, str]] = {0.0625: "70k", 0.75: "1M", 4.75: "10M", 18.5: "100M", 63: "1B"}


def delay_ticks(spec: str, *, game_boy: bool) -> int:
    """A declared delay (``"70t"``, or ``"12.5ms"`` rounded up to whole ticks) in ticks.

    >>> delay_ticks("599t", game_boy=False), delay_ticks("20ms", game_boy=False)
    (599, 2)
    """
    hz = 59.7275 if game_boy else 60.0
    try:
        if spec.endswith("ms"):
            return max(0, math.ceil(float(spec[:-2]) / 1000 * hz - 1e-9))
        if spec.endswith("t"):
            return int(spec[:-1])
    except ValueError:
        pass
    raise ValueError(f"--delay-start zeros needs a delay in ticks (70t) or milliseconds (12ms), got {spec!r}")


def fmt_k(k: float) -> str:
    return str(int(k)) if float(k).is_integer() else f"{k:g}"


def deep_paper_ticks(k: float, *, game_boy: bool) -> int:
    """The declared inference ticks of the 2xDeep network at the appendix's width ``k``: the paper
    gives none, so the 15-layer model's measured ticks at the same parameter label, scaled by the
    two networks' floating-point operations (`count_flops`; deeper is slower at the same size),
    both as the authors built them (``ImpalaCNN`` and ``DeepImpalaCNN``: `ARCH_OPTIONS`).

    >>> [deep_paper_ticks(k, game_boy=False) for k in (0.75, 4.75, 18.5, 63)]
    [13, 17, 129, 1119]
    """
    from nonstop.policies.models import ARCH_OPTIONS, count_flops

    label = DEEP_SIZES.get(k)
    base = next((kk for kk, (name, *_) in PAPER_SIZES.items() if name == label), None)
    if base is None:
        raise ValueError(
            f"the paper's 2xDeep sizes with a 15-layer time to scale are k in "
            f"{[kk for kk, v in DEEP_SIZES.items() if v != '70k']}, not k={fmt_k(k)}: pass --latency-source "
            f"measured or --latency {fmt_k(k)}=SPEC"
        )
    ticks = int(PAPER_SIZES[base][2 if game_boy else 1])
    return math.ceil(ticks * count_flops(k, **ARCH_OPTIONS["2xdeep"]) / count_flops(base, **ARCH_OPTIONS["impala"]))


def declared_delays(
    sizes: Iterable[float], source: str, *, game_boy: bool, overrides: dict[float, str], arch: str = "impala"
) -> dict[float, str]:
    """Size k → latency spec. ``source``: ``paper`` (the paper's measured steps; for 2xDeep
    `deep_paper_ticks`) or ``measured`` (this machine's batch-1 forward time of the k network, one
    torch thread); ``overrides`` win.

    >>> declared_delays([1, 98], "paper", game_boy=False, overrides={})
    {1: '5t', 98: '599t'}
    >>> declared_delays([98], "paper", game_boy=True, overrides={98: "10s"})
    {98: '10s'}
    >>> declared_delays([18.5], "paper", game_boy=False, overrides={}, arch="2xdeep")
    {18.5: '129t'}
    """
    out: dict[float, str] = {}
    for k in sizes:
        if k in overrides:
            out[k] = overrides[k]
        elif arch == "2xdeep":
            out[k] = (
                f"{deep_paper_ticks(k, game_boy=game_boy)}t"
                if source == "paper"
                else f"{_measured_forward_ms(k, 6):.3f}ms"
            )
        elif source == "paper":
            if k not in PAPER_SIZES:
                raise ValueError(
                    f"the paper gives inference times for k in {sorted(PAPER_SIZES)}, not k={fmt_k(k)}: "
                    f"pass --latency-source measured or --latency {fmt_k(k)}=SPEC"
                )
            out[k] = f"{PAPER_SIZES[k][2 if game_boy else 1]}t"
        else:
            out[k] = f"{_measured_forward_ms(k):.3f}ms"
    return out


_MEASURED: dict[tuple[float, int], float] = {}


def _measured_forward_ms(k: float, depth: int = 3) -> float:
    """Median batch-1 forward time of the width-k IMPALA ResNet (``depth`` 6: 2xDeep) here (one torch thread), in ms."""
    if (k, depth) not in _MEASURED:
        import torch

        from nonstop.metrics.capacity import time_forward
        from nonstop.policies.models import ARCH_OPTIONS, ensure_fits, impala_resnet

        arch = ARCH_OPTIONS["2xdeep" if depth == 6 else "impala"]  # the authors' networks
        ensure_fits(k, "cpu", n_actions=18, **arch)  # a clear error when the model cannot fit in this machine's memory
        torch.set_num_threads(1)
        model = impala_resnet(k=k, n_actions=18, **arch).eval()
        samples = time_forward(
            model, torch.zeros(1, 1, 84, 84), torch.device("cpu"), warmup=1, repeats=7, max_seconds=20.0
        )
        _MEASURED[(k, depth)] = 1000.0 * sorted(samples)[len(samples) // 2]
        del model
    return _MEASURED[(k, depth)]
