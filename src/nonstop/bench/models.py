"""``nonstop bench models``: the paper's ResNet sizes and their batch-1 inference time.

For each width ``k`` it reports the parameter count (analytic, and the built
module's), then times a batch-1 forward pass on an 84×84×1 frame with one torch
thread (the paper ran one core per inference process): warm-up passes first,
then median / p90 / min / max in ms and in ticks at ``--tick-hz``. A ``k`` whose
weights would not fit in free memory is skipped with a note, never a crash.

``--save PATH`` writes each ``k``'s measured times as an empirical latency file
(one seconds value per line), so a `LatencyPolicy` can replay them::

    nonstop bench models --k 1,7 --save data/latency/impala_k{k}_cpu.txt
    nonstop run ... --latency empirical:data/latency/impala_k7_cpu.txt
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nonstop.bench.common import percentiles
from nonstop.metrics.capacity import time_forward

if TYPE_CHECKING:  # the models need torch (the learn extra); this module's import does not
    from nonstop.policies.models import ImpalaArch

DESCRIPTION = "IMPALA ResNet width k: parameters and batch-1 forward latency (ms, ticks) on 84x84x1"

_CONSTRUCTIONS: dict[str, ImpalaArch] = {
    "impala": {"same_padding": False, "fc_hidden": 512},  # CERC-AAI/realtime_rl ImpalaCNN (the default)
    "authors": {"same_padding": False, "fc_hidden": 512},  # the same, by its old name here
    "impala_padded": {"same_padding": True, "fc_hidden": 256},  # the standard padded IMPALA network
    "2xdeep": {"depth": 6},  # the authors' 30-layer DeepImpalaCNN (Figure 6): unpadded, pooled, FC 512
}


def _k_list(text: str) -> list[float]:
    try:
        ks = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k takes comma-separated widths such as 1,7,29, got {text!r}") from None
    if not ks or any(k * 16 < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"--k takes widths >= 1/16 such as 1,7,29, got {text!r}")
    return [int(k) if k.is_integer() else k for k in ks]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--k", type=_k_list, default=None, help="comma-separated widths (default 1,7; the paper's sizes are 1,7,29,98)"
    )
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(parser)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one core per worker)")
    parser.add_argument("--repeats", type=int, default=None, help="timed passes per k (default 30; 5 with --quick)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed passes first (default 3; 1 with --quick)")
    parser.add_argument(
        "--max-seconds", type=float, default=30.0, help="stop timing a k after this long (at least 3 passes are kept)"
    )
    parser.add_argument("--n-actions", type=int, default=18, help="output size (18: full Atari action set)")
    parser.add_argument("--tick-hz", type=float, default=60.0, help="environment rate for the ticks column")
    parser.add_argument(
        "--construction",
        "--arch",
        choices=tuple(_CONSTRUCTIONS),
        default="impala",
        help="impala: the authors' released ImpalaCNN, unpadded, FC 512 (default; 'authors' names it too); "
        "impala_padded: padded convs, FC 256; 2xdeep: the 30-layer ResNet of the paper's Figure 6",
    )
    parser.add_argument(
        "--save",
        metavar="PATH",
        default=None,
        help="write each k's forward times (seconds, one per line) as an empirical latency file; "
        "'{k}' in PATH is replaced by k, else _k<k> is added when several k are measured",
    )
    if "--quick" not in parser._option_string_actions:  # the CLI adds it; a bare parser needs it too
        parser.add_argument("--quick", action="store_true", help="k=1 only, few repeats")


def _save_path(template: str, k: float, several: bool) -> Path:
    if "{k}" in template:
        return Path(template.format(k=k))
    path = Path(template)
    return path.with_name(f"{path.stem}_k{k}{path.suffix}") if several else path


def _write_samples(path: Path, seconds: list[float], header: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {line}" for line in header] + [repr(s) for s in seconds]
    path.write_text("\n".join(lines) + "\n")


def run(args: argparse.Namespace) -> dict:
    import torch

    from nonstop.policies.models import count_parameters

    quick = bool(getattr(args, "quick", False))
    ks = args.k if args.k else ([1] if quick else [1, 7])
    repeats = args.repeats if args.repeats is not None else (5 if quick else 30)
    warmup = args.warmup if args.warmup is not None else (1 if quick else 3)
    if repeats < 1 or warmup < 0 or args.threads < 1:
        raise ValueError("--repeats and --threads must be >= 1 and --warmup >= 0")
    arch = _CONSTRUCTIONS[args.construction]
    result: dict = {
        "models": [],
        "device": args.device,
        "threads": args.threads,
        "tick_hz": args.tick_hz,
        "input": [1, 1, 84, 84],
        "construction": args.construction,
        "repeats": repeats,
        "warmup": warmup,
    }
    from nonstop.inference.device import parse_device, resolve_dtype

    args.device = parse_device(args.device)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    result["device"] = args.device
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            result["note"] = "CUDA is not available on this machine: nothing measured (use --device cpu)"
            result["models"] = [
                {"k": k, "params": count_parameters(k, args.n_actions, **arch), "skipped": "CUDA not available"}
                for k in ks
            ]
            return result
        result["device"] = f"{args.device} ({torch.cuda.get_device_name(torch.device(args.device))})"
    device = torch.device(args.device)
    dtype = resolve_dtype(getattr(args, "dtype", None), device)
    result["dtype"] = str(dtype).removeprefix("torch.")

    saved: list[str] = []
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        for k in ks:
            row, seconds = _measure_width(args, k, arch, device, dtype, warmup, repeats)
            if seconds is not None:
                first = next((m for m in result["models"] if "forward_ms_p50" in m), None)
                if first is not None:  # a ratio within one run survives a noisy machine
                    row["p50_vs_k" + str(first["k"])] = row["forward_ms_p50"] / first["forward_ms_p50"]
                if args.save:
                    row["saved"] = _save_width(args, k, len(ks) > 1, row, seconds, result["device"], warmup)
                    saved.append(row["saved"])
            result["models"].append(row)
            if seconds is not None:
                gc.collect()
    finally:
        torch.set_num_threads(previous_threads)
    if saved:
        result["saved"] = saved
    return result


def _measure_width(
    args: argparse.Namespace, k: float, arch: ImpalaArch, device: Any, dtype: Any, warmup: int, repeats: int
) -> tuple[dict, list[float] | None]:
    """Width ``k``'s size, work and batch-1 forward times; the times are None where the model does
    not fit the device (the row then says why it was skipped)."""
    import torch

    from nonstop.inference.device import autocast
    from nonstop.policies.models import (
        ModelTooLargeError,
        count_flops,
        count_parameters,
        ensure_fits,
        impala_channels,
        impala_resnet,
        module_parameters,
    )

    row: dict = {
        "k": k,
        "params": count_parameters(k, args.n_actions, **arch),
        "channels": list(impala_channels(k)),
        "flops": count_flops(k, args.n_actions, **arch),
    }
    row["flops_per_param"] = row["flops"] / row["params"]  # 2xDeep: more work per parameter (Figure 6)
    try:
        row["memory_bytes_estimate"] = ensure_fits(k, device, n_actions=args.n_actions, **arch)
    except ModelTooLargeError as exc:
        row["skipped"] = str(exc)
        return row, None
    torch.manual_seed(0)
    try:
        model = impala_resnet(k, args.n_actions, device=device, check_memory=False, **arch)
    except (RuntimeError, MemoryError) as exc:  # the estimate was too optimistic after all
        row["skipped"] = f"building k={k} failed: {exc}"
        return row, None
    row["params_actual"] = module_parameters(model)
    x = torch.rand(1, 1, 84, 84, device=device)
    with autocast(device, dtype):
        seconds = time_forward(model, x, device, warmup, repeats, args.max_seconds)
    ms = percentiles(seconds, 1e3)
    row.update(
        {
            "n": ms["n"],
            "forward_ms_p50": ms["p50"],
            "forward_ms_p90": ms["p90"],
            "forward_ms_min": ms["min"],
            "forward_ms_max": ms["max"],
            "forward_ms_mean": float(np.mean(seconds) * 1e3),
            "forward_ticks_p50": ms["p50"] / 1e3 * args.tick_hz,
            "forward_ticks_p90": ms["p90"] / 1e3 * args.tick_hz,
            "forward_ticks_max": ms["max"] / 1e3 * args.tick_hz,
            "forward_us_per_mparam": ms["p50"] * 1e3 / (row["params"] / 1e6),  # deeper is slower at the same size
        }
    )
    return row, seconds


def _save_width(
    args: argparse.Namespace, k: float, several: bool, row: dict, seconds: list[float], device: str, warmup: int
) -> str:
    """Width ``k``'s forward times written as an empirical latency file (`--save`); its path."""
    path = _save_path(args.save, k, several)
    _write_samples(
        path,
        seconds,
        [
            f"nonstop bench models: IMPALA ResNet k={k} ({row['params']} parameters, "
            f"construction {args.construction}), batch-1 forward on 1x84x84",
            f"device {device}, {args.threads} torch thread(s), {len(seconds)} passes "
            f"after {warmup} warm-up; seconds, one per line (Empirical.from_file)",
        ],
    )
    return str(path)


def render(result: dict) -> None:
    print(
        f"device {result['device']}, {result['threads']} thread(s), ticks at {result['tick_hz']:g} Hz, "
        f"construction {result['construction']}"
    )
    print(
        f"{'k':>5} {'params':>15} {'p50 ms':>9} {'p90 ms':>9} {'min ms':>9} {'max ms':>9} {'p50 ticks':>10} "
        f"{'GFLOP':>7} {'us/Mparam':>10}"
    )
    for m in result["models"]:
        if "skipped" in m:
            print(f"{m['k']:>5} {m['params']:>15,}  skipped: {m['skipped']}")
            continue
        print(
            f"{m['k']:>5} {m['params']:>15,} {m['forward_ms_p50']:>9.2f} {m['forward_ms_p90']:>9.2f} "
            f"{m['forward_ms_min']:>9.2f} {m['forward_ms_max']:>9.2f} {m['forward_ticks_p50']:>10.2f} "
            f"{m['flops'] / 1e9:>7.2f} {m['forward_us_per_mparam']:>10.0f}"
        )
    for path in result.get("saved", []):
        print(f"saved {path}")
