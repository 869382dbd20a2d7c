"""``nonstop bench gpu``: one device acting for many realtime worlds (docs/design.md §7; issue 22, item 6).

Two parts, on the device ``--device`` picks (``auto``: CUDA when torch finds one; the CPU is allowed, with
small ``--k`` and ``--quick``):

1. **The batch curve** L(b) of the paper's IMPALA ResNet per width ``k`` and dtype, each pass timed from the
   host's uint8 frames to the actions back on the host (pinned upload, argmax download), eagerly and, on
   CUDA, replaying a CUDA graph captured per batch size (`nonstop.inference.device.TorchForward`). Per
   curve: the actions per second, the largest batch inside one tick, and the ceiling it allows, the most
   worlds one device keeps up with at ``--hz`` (`nonstop.inference.batchsize.worlds_ceiling`). Each dtype
   but fp32 reports the fraction of argmax actions that differ from fp32's on one fixed batch of frames
   (a randomly initialised model on random frames: measured, not assumed). A batch size that runs out of
   device memory is named, with the largest that fit. ``--save-curve FILE`` writes each measured L(b) as
   a ``table:b=L,...`` line that ``--batch-curve`` (train, plan, bench lanes) reads back.
2. **Worlds served at 60 Hz**, on the real clock: for each K of ``--worlds``, K worlds of ``--env`` share
   one `BatchingServer` (``--lanes`` request lanes a world under ``--scheduler``, the server's model on the
   device at ``--serve-k``, its curve the one just measured and re-measured as it runs), against today's
   design, one inference process per world running the same model on one CPU thread, in the same run.
   A third design (unless ``--no-remote``), ``batched_remote``: each world in a process of its own, its
   lanes remote lanes of the same kind of server in the bench's process, frames through a shared-memory
   lane ring (`nonstop.inference.lanering`). Per design and K: inaction (the worst world), delay p50/p99
   in ticks, and for the servers their utilisation (the fraction of the wall time a batch was running)
   and batch sizes. The figures: ``worlds_batched``, ``worlds_batched_remote`` and
   ``worlds_per_process``, the most K with inaction at most ``--max-inaction`` in every world, and the
   ratio of the first to the last; ``lane_round_trip``: what the ring costs one request (a forward that
   does nothing, a lane in this process against one in a child, p50/p99 in µs).

3. **The learner's effect** on the server (``learner_effect``, unless ``--learner-seconds 0``): the serving
   forward at ``--serve-k`` timed at one batch size alone, then with a device learner of the same width
   updating in a thread of the process (on its own stream, its versions taken by the server once each):
   p50/p99 of each, and their ratio.

How it is kept honest (issue 33): worlds start in parallel; every CUDA graph is captured before the
measured window opens (`nonstop.inference.device.TorchForward.prepare`), and a size that does not fit is
named with the largest that did; the worlds are served at ``--serve-dtype`` (bf16 on CUDA); each
ceiling respects ``--max-batch`` (``worlds_ceiling_any_batch`` says what a larger batch would allow);
each k's models are freed before the next is built; the fp32 reference for the disagreement figure runs
with TF32 off; ``--budget-s`` keeps the whole run within a stated time (what it leaves out is named).
The servers stage the next batch's frames on the host while a forward runs (``overlap``); uploading them
during the forward on a side stream is not built.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
from typing import Any

import numpy as np

from nonstop.bench.common import parse_positive_list
from nonstop.bench.gpuserve import lane_round_trip, serve, serve_or_say, serve_remote

__all__ = ["DESCRIPTION", "add_arguments", "run", "render", "write_curves"]

DESCRIPTION = (
    "one device, many worlds: the batch curve per k and dtype (eager vs CUDA graph), then worlds served at "
    "60 Hz by a batching server against one process per world"
)
_SIZES = {"cuda": "1,2,4,8,16,32,64,128,256", "cpu": "1,2,4,8,16", "quick_cpu": "1,2,4"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(p, device="auto", what="the model", dtype=False)
    p.add_argument(
        "--dtypes",
        default=None,
        metavar="fp32,bf16,...",
        help="precisions timed, comma-separated (default: fp32,bf16 on CUDA; fp32,bf16 on the CPU too, bf16 "
        "there only for the disagreement figure)",
    )
    p.add_argument("--k", default=None, help="IMPALA widths, comma-separated (default 1,7,29,98 on CUDA; 1 on the CPU)")
    p.add_argument(
        "--batch-sizes",
        default=None,
        help=f"batch sizes timed (default {_SIZES['cuda']} on CUDA, {_SIZES['cpu']} on the CPU)",
    )
    p.add_argument("--repeats", type=int, default=None, help="timed passes per batch size (default 10; quick 3)")
    p.add_argument(
        "--save-curve",
        default=None,
        metavar="FILE",
        help="write each measured L(b) as a --batch-curve file (several k or dtypes: FILE-k<K>-<dtype>)",
    )
    p.add_argument(
        "--worlds",
        default=None,
        help="world counts K served, comma-separated (default 8,16,32,64,128 on CUDA; 1,2,4 on the CPU; "
        "quick 1,2; 0: skip this part)",
    )
    p.add_argument(
        "--serve-k", type=float, default=None, help="the width the worlds are served at (default: the first --k)"
    )
    p.add_argument("--env", default="Boxing", help="the worlds' env (default Boxing, 84x84 grey frames)")
    p.add_argument("--seconds", type=float, default=None, help="wall seconds each K runs (default 10; quick 3)")
    p.add_argument("--lanes", type=int, default=2, help="request lanes per world (default 2)")
    p.add_argument("--scheduler", default="quantile_hold", help="the lanes' scheduler (default quantile_hold)")
    p.add_argument("--max-batch", type=int, default=64, help="the largest batch the server forms (default 64)")
    p.add_argument("--max-inaction", type=float, default=0.01, help="inaction a world may have and count as served")
    p.add_argument("--hz", type=float, default=60.0, help="the worlds' tick rate for the ceilings (default 60)")
    p.add_argument("--no-baseline", action="store_true", help="skip one process per world")
    p.add_argument(
        "--no-remote",
        action="store_true",
        help="skip the worlds in processes of their own served through a shared-memory lane ring",
    )
    p.add_argument(
        "--serve-dtype",
        default=None,
        metavar="DTYPE",
        help="the precision the worlds are served at (default bf16 on CUDA, fp32 on the CPU)",
    )
    p.add_argument(
        "--learner-seconds",
        type=float,
        default=None,
        help="seconds the server is timed alone and beside a device learner (default 3; quick 0.5; 0: skip)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="the whole run's wall-time budget in seconds: what would not fit is skipped and named",
    )


def _ints(text: str, option: str) -> list[int]:
    values = parse_positive_list(text, option)
    if any(v != int(v) for v in values):
        raise ValueError(f"{option} must be whole numbers, got {text!r}")
    return [int(v) for v in values]


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Every option checked and defaulted by device and --quick, before anything is built."""
    from nonstop.inference.device import parse_dtype, resolve_device

    device = resolve_device(args.device)  # CUDA asked where torch finds none: one line naming what it found
    cuda, quick = device.type == "cuda", bool(getattr(args, "quick", False))
    dtypes = [parse_dtype(d) or "fp32" for d in (args.dtypes or "fp32,bf16").split(",") if d.strip()]
    ks = parse_positive_list(args.k or ("1,7,29,98" if cuda and not quick else "1"), "--k")
    sizes = _ints(args.batch_sizes or _SIZES["cuda" if cuda else "quick_cpu" if quick else "cpu"], "--batch-sizes")
    worlds_text = (
        args.worlds if args.worlds is not None else ("1,2" if quick else "8,16,32,64,128" if cuda else "1,2,4")
    )
    worlds = [] if worlds_text.strip() == "0" else _ints(worlds_text, "--worlds")
    repeats = args.repeats if args.repeats is not None else (3 if quick else 10)
    seconds = args.seconds if args.seconds is not None else (3.0 if quick else 10.0)
    serve_dtype = parse_dtype(args.serve_dtype or ("bf16" if cuda else "fp32")) or ("bf16" if cuda else "fp32")
    learner_s = args.learner_seconds if args.learner_seconds is not None else (0.5 if quick else 3.0)
    if args.budget_s is not None and not args.budget_s > 0:
        raise ValueError(f"--budget-s must be a positive number of seconds, got {args.budget_s!r}")
    if not learner_s >= 0:
        raise ValueError(f"--learner-seconds must be >= 0, got {learner_s!r}")
    for name, ok in (
        ("--repeats", repeats >= 1),
        ("--seconds", seconds > 0),
        ("--lanes", args.lanes >= 1),
        ("--max-batch", args.max_batch >= 1),
        ("--hz", args.hz > 0),
        ("--max-inaction", 0.0 <= args.max_inaction < 1.0),
    ):
        if not ok:
            raise ValueError(
                f"{name} is out of range (repeats, lanes, max-batch >= 1; seconds, hz > 0; max-inaction in [0, 1))"
            )
    return {
        "device": device,
        "cuda": cuda,
        "dtypes": list(dict.fromkeys(dtypes)),
        "ks": ks,
        "sizes": sorted(set(sizes)),
        "worlds": worlds,
        "repeats": repeats,
        "seconds": seconds,
        "serve_dtype": serve_dtype,
        "learner_s": learner_s,
        "budget": _Budget(args.budget_s),
        "serve_k": args.serve_k if args.serve_k is not None else ks[0],
    }


class _Budget:
    """``--budget-s``: the run's end, and what was left out to keep to it."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds if seconds is not None else math.inf
        self.skipped: list[str] = []

    def left(self) -> float:
        return self.end - time.monotonic()

    def allows(self, need: float, what: str) -> bool:
        """Whether ``need`` more seconds fit; if not, ``what`` is named as left out."""
        if self.left() >= need:
            return True
        self.skipped.append(what)
        return False


# ----------------------------------------------------------------------------- part 1: the batch curve


def _time_curve(forward: Any, frames: np.ndarray, sizes: list[int], repeats: int, clock: Any) -> dict[str, Any]:
    """Median seconds per batch size, host to host; stops at the first size the device cannot hold."""
    import torch

    times: dict[int, float] = {}
    out: dict[str, Any] = {"L_s": times}
    for b in sizes:
        try:
            for _ in range(2):  # warm: cuDNN's choice, the graph's capture, the allocator
                forward(frames[:b])
            samples = []
            for _ in range(repeats):
                t0 = clock.now()
                forward(frames[:b])
                samples.append(clock.now() - t0)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            out["out_of_memory_at_batch"] = b
            out["largest_batch_that_fit"] = max(times) if times else None
            break
        times[b] = float(np.median(samples))
    return out


def _time_forward(forward: Any, frames: np.ndarray, sizes: list[int], repeats: int, clock: Any) -> dict[str, Any]:
    """`_time_curve` after every graph is captured (outside the timing); a size whose capture runs out of
    memory is named, with the largest that fit, and only the sizes below it are timed."""
    from nonstop.inference.device import GraphOutOfMemory

    oom: dict[str, Any] = {}
    if forward.graphs:
        try:
            forward.prepare(frames[0])
        except GraphOutOfMemory as exc:
            oom = {"out_of_memory_at_batch": exc.size, "largest_batch_that_fit": exc.fits}
            sizes = [b for b in sizes if b < exc.size]
    out = _time_curve(forward, frames, sizes, repeats, clock)
    return {**out, **oom} if oom and "out_of_memory_at_batch" not in out else out


def measure_curves(s: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per (k, dtype, mode): the measured curve and what it allows at ``args.hz``."""
    import torch

    from nonstop.inference.batchsize import LatencyCurve, worlds_ceiling
    from nonstop.inference.cudaops import ieee_fp32
    from nonstop.inference.device import TorchForward
    from nonstop.policies.models import ModelTooLargeError, impala_resnet
    from nonstop.realtime.clock import WallClock

    clock, tau_m = WallClock(spin=0.0), 1.0 / args.hz
    rows: list[dict[str, Any]] = []
    frames = np.random.default_rng(0).integers(0, 256, (max(s["sizes"]), 84, 84), dtype=np.uint8)
    modes = ("eager", "graph") if s["cuda"] else ("eager",)
    budget, reserve = s["budget"], _serve_need(s, args)
    for k in s["ks"]:
        if rows and not budget.allows(reserve, f"curves at k={k:g}"):
            rows.append({"k": k, "skipped": "--budget-s: no time left for this k"})
            continue
        torch.manual_seed(0)
        try:
            model = impala_resnet(k, 18, device=s["device"])
        except (ModelTooLargeError, RuntimeError) as exc:  # too large for this device: said, and the next k runs
            rows.append({"k": k, "skipped": str(exc).splitlines()[0]})
            continue
        with ieee_fp32():  # the reference is fp32 as IEEE has it: TF32 off
            fp32_actions = TorchForward(model, str(s["device"]), dtype="fp32").q_values(frames[:64]).argmax(1)
        for dtype in s["dtypes"]:
            for mode in modes:
                forward = TorchForward(
                    model, str(s["device"]), dtype=dtype, graph_sizes=s["sizes"] if mode == "graph" else ()
                )
                row: dict[str, Any] = {**forward.describe(), "k": k, "dtype": dtype, "mode": mode}
                row.update(_time_forward(forward, frames, s["sizes"], s["repeats"], clock))
                times = row.pop("L_s")
                if mode == "eager":
                    differ = forward.q_values(frames[:64]).argmax(1) != fp32_actions
                    row["actions_differ_from_fp32"] = float(differ.float().mean())
                del forward  # its serving copy and graphs go before the next one is built
                if times:
                    curve = LatencyCurve.table(times)
                    cap = min(max(times), args.max_batch)  # the server never forms a batch past --max-batch
                    ceiling, at = worlds_ceiling(curve, tau_m, cap)
                    row["worlds_ceiling_any_batch"] = worlds_ceiling(curve, tau_m, max(times))[0]
                    within = [b for b, t in times.items() if t <= tau_m and b <= args.max_batch]
                    row.update(
                        L_ms={str(b): t * 1e3 for b, t in times.items()},
                        actions_per_s={str(b): b / t for b, t in times.items()},
                        best_batch_within_tick=max(within) if within else None,
                        worlds_ceiling=ceiling,
                        ceiling_batch=at,
                        _table=times,
                    )
                rows.append(row)
        del model, fp32_actions
        gc.collect()  # a forward's captured graphs hold it in a cycle: freed here, before the next k is built
        if s["cuda"]:
            torch.cuda.empty_cache()
    return rows


def _serve_need(s: dict[str, Any], args: argparse.Namespace) -> float:
    """Seconds the worlds-served part and the learner's effect need (each run: its window and ~15 s of
    start and stop)."""
    designs = 1 + (not args.no_remote) + (not args.no_baseline)
    return len(s["worlds"]) * designs * (s["seconds"] + 15.0) + (2 * s["learner_s"] + 10.0 if s["learner_s"] else 0.0)


def write_curves(rows: list[dict[str, Any]], path: str) -> list[str]:
    """Each (k, dtype)'s fastest measured curve (a CUDA graph where one ran) as a ``--batch-curve`` file:
    ``path`` itself for one, ``path`` with ``-k<K>-<dtype>`` before its suffix for several."""
    from nonstop._io import atomic_file
    from nonstop.inference.batchsize import curve_table_spec

    best: dict[tuple[float, str], dict[str, Any]] = {}
    for r in rows:
        if "_table" in r and ((r["k"], r["dtype"]) not in best or r["mode"] == "graph"):
            best[(r["k"], r["dtype"])] = r
    written = []
    stem, suffix = os.path.splitext(path)
    for (k, dtype), r in best.items():
        target = path if len(best) == 1 else f"{stem}-k{k:g}-{dtype}{suffix}"
        text = (
            f"# nonstop bench gpu: IMPALA ResNet k={k:g}, {dtype}, {r['mode']}, on {r['device']}: seconds per "
            f"batch, host frames to host actions\n{curve_table_spec(r['_table'])}\n"
        )
        with atomic_file(target, durable=False) as f:
            f.write(text.encode())
        written.append(target)
    return written


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.inference.batchsize import LatencyCurve

    s = _settings(args)
    budget = s["budget"]
    rows = measure_curves(s, args)
    result: dict[str, Any] = {
        "device": str(s["device"]),
        "dtypes": s["dtypes"],
        "batch_sizes": s["sizes"],
        "tick_hz": args.hz,
        "max_batch": args.max_batch,
        "serve_dtype": s["serve_dtype"],
        "curves": rows,
    }
    if args.save_curve:
        result["saved_curves"] = write_curves(rows, args.save_curve)
    served = [r for r in rows if r.get("k") == s["serve_k"] and r.get("dtype") == s["serve_dtype"] and "_table" in r]
    served = served or [r for r in rows if r.get("k") == s["serve_k"] and "_table" in r]  # the dtype not timed: any
    if s["worlds"] and served:
        curve = LatencyCurve.table(served[-1]["_table"])  # the graph's where one ran (it comes last)
        result["serve"] = {
            "k": s["serve_k"],
            "dtype": s["serve_dtype"],
            "env": args.env,
            "lanes": args.lanes,
            "scheduler": args.scheduler,
            "ceiling": served[-1]["worlds_ceiling"],
        }
        runs = []
        for k_worlds in s["worlds"]:
            need = s["seconds"] + 15.0
            if budget.allows(need, f"batched K={k_worlds}"):
                runs.append(serve_or_say(serve, "batched", k_worlds, "batched", k_worlds, s, args, curve))
            if not args.no_remote and budget.allows(need, f"batched_remote K={k_worlds}"):
                runs.append(serve_or_say(serve_remote, "batched_remote", k_worlds, k_worlds, s, args, curve))
            if not args.no_baseline and budget.allows(need, f"process_per_world K={k_worlds}"):
                runs.append(
                    serve_or_say(serve, "process_per_world", k_worlds, "process_per_world", k_worlds, s, args, curve)
                )
        result["served"] = runs
        if not args.no_remote and budget.allows(10.0, "lane_round_trip"):
            result["lane_round_trip"] = lane_round_trip((84, 84))  # the frames the curve was timed on
        best = {
            d: max((r["worlds"] for r in runs if r["design"] == d and r["served"]), default=0)
            for d in ("batched", "batched_remote", "process_per_world")
        }
        result["worlds_batched"] = best["batched"]
        if not args.no_remote:
            result["worlds_batched_remote"] = best["batched_remote"]
        if not args.no_baseline:
            result["worlds_per_process"] = best["process_per_world"]
            result["batched_over_per_process"] = (
                best["batched"] / best["process_per_world"] if best["process_per_world"] else None
            )
    if s["learner_s"] and budget.allows(2 * s["learner_s"] + 10.0, "learner_effect"):
        from nonstop.bench.gpulearner import learner_effect

        result["learner_effect"] = learner_effect(
            s["device"], s["serve_k"], s["serve_dtype"], min(16, args.max_batch), s["learner_s"]
        )
    if budget.seconds is not None:
        result["budget"] = {"budget_s": budget.seconds, "left_s": round(budget.left(), 1), "skipped": budget.skipped}
    for r in rows:
        r.pop("_table", None)
    return result


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"nonstop bench gpu — batch curve on {result['device']} (host frames to host actions)")
    for col in ("k", "dtype", "mode", "L(b) ms", "≤ 1 tick", "ceiling (worlds)", "≠ fp32"):
        t.add_column(col, justify="left" if col == "L(b) ms" else "right")
    for r in result["curves"]:
        if "skipped" in r:
            t.add_row(f"{r['k']:g}", "—", "—", r["skipped"][:60], "", "", "")
            continue
        curve = ", ".join(f"{b}: {ms:.3g}" for b, ms in (r.get("L_ms") or {}).items())
        if r.get("out_of_memory_at_batch"):
            curve += f" (out of memory at {r['out_of_memory_at_batch']})"
        differ = r.get("actions_differ_from_fp32")
        t.add_row(
            f"{r['k']:g}",
            r["dtype"],
            r["mode"],
            curve,
            str(r.get("best_batch_within_tick") or "—"),
            str(r.get("worlds_ceiling", "—")),
            "" if differ is None else f"{differ:.1%}",
        )
    console.print(t)
    if result.get("served"):
        t = Table(title=f"worlds served at 60 Hz: {result['serve']['env']}, k={result['serve']['k']:g}")
        for col in ("design", "worlds", "inaction (worst)", "delay p50/p99", "utilisation", "batch", "served"):
            t.add_column(col, justify="right")
        for r in result["served"]:
            if "error" in r:
                t.add_row(r["design"], str(r["worlds"]), r["error"][:80], "", "", "", "no")
                continue
            delay = "—" if r["delay_p50_ticks"] is None else f"{r['delay_p50_ticks']:.0f}/{r['delay_p99_ticks']:.0f}"
            t.add_row(
                r["design"],
                str(r["worlds"]),
                f"{r['inaction_max']:.1%}",
                delay,
                f"{r['utilisation']:.0%}" if "utilisation" in r else "—",
                f"{r['batch_size_mean']:.1f}" if r.get("batch_size_mean") else "—",
                "yes" if r["served"] else "no",
            )
        console.print(t)
        if "lane_round_trip" in result:
            trip = result["lane_round_trip"]
            console.print(
                f"a request's round trip, no forward: lane in this process p50 {trip['in_process_us']['p50']:.0f} µs "
                f"(p99 {trip['in_process_us']['p99']:.0f}), lane in another process through the ring "
                f"p50 {trip['remote_us']['p50']:.0f} µs (p99 {trip['remote_us']['p99']:.0f})",
                markup=False,
            )
        console.print(
            f"most worlds served: batched {result['worlds_batched']}"
            + (
                f", batched with worlds in their own processes {result['worlds_batched_remote']}"
                if "worlds_batched_remote" in result
                else ""
            )
            + (f", one process per world {result['worlds_per_process']}" if "worlds_per_process" in result else ""),
            markup=False,
        )
    effect = result.get("learner_effect")
    if effect:
        console.print(
            f"the server beside a device learner (k={effect['k']:g}, {effect['dtype']}, b={effect['batch']}): p99 "
            f"{effect['with_learner']['p99_ms']:.3g} ms against {effect['alone']['p99_ms']:.3g} ms alone "
            f"(x{effect['p99_ratio'] or float('nan'):.2f}); {effect['learner_updates_per_s']:.0f} updates/s",
            markup=False,
        )
    if result.get("budget", {}).get("skipped"):
        console.print(
            f"left out to keep to --budget-s {result['budget']['budget_s']:g}: "
            + ", ".join(result["budget"]["skipped"]),
            markup=False,
        )
