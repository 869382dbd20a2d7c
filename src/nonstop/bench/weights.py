"""``nonstop bench weights``: memory of N_I process workers of one model, with one copy of θ per
worker (`DQNPolicy`, today's process backend) and with one shared copy per host (`make_shared_policy`'s actor).

Each worker is a real `ProcessPolicy` holding the paper's ResNet at width ``--k`` that has made
one forward pass. Memory is the **PSS** (proportional set size, /proc/PID/smaps_rollup) summed over
the workers: pages shared between processes count once in total, which RSS would count N times.
N bare workers (Python, torch, numpy, no model) are measured in the same run as the baseline
(their libraries' pages are shared N ways too), so ``model_pss`` (total − bare total at N) is what the models themselves cost. The driver that owns the
weights segment maps it too; its PSS share of those pages is added to the total, so θ counts
whole in both modes. Target: 8 workers of k=7 at
≤ 1.5× the model memory of one worker with shared weights (about 8× with copies).

``--backend ray`` measures Ray actors on one node of a local Ray instead: a copy of θ each
(`DQNPolicy` over the fetched version) against views of the node's object store
(`make_object_store_policy`'s actor, what ``train --backend ray`` builds). Memory is then the actors' USS
(private pages; the object store's are shared) less N bare actors', plus θ once for the object
store's copy.

What sharing alone does not remove: each worker's forward pass leaves its own working set
(activations, oneDNN scratch; about 6-9 MiB at k=7, 50 MiB at k=29) in its heap between passes.
Workers hand it back after each pass (`nonstop.policies.memory.WorkingSetRelease`, on by default);
the mode ``shared_kept`` measures shared weights with that off, in the same run, to show what it
buys. Memory is read a moment after the pass, once the worker's background trim is done.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Any

import numpy as np

from nonstop.policies.memory import DEFAULT_MIN_FREE

DESCRIPTION = "memory of N_I process workers of one model: a copy of θ each vs one shared copy per host"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--k", type=float, default=7.0, help="IMPALA ResNet width (default 7: ~11.7M parameters)")
    parser.add_argument("--workers", default=None, help="worker counts, comma-separated (default 1,4,8; quick 1,8)")
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(
        parser,
        what="each process worker's model (off the CPU each holds its own copy there: "
        "the host memory measured is then the process's, not θ's)",
    )
    parser.add_argument(
        "--backend",
        choices=("process", "ray"),
        default="process",
        help="process: ProcessPolicy workers (default); ray: Ray actors on one node of a local Ray, "
        "each a copy of θ vs views of the node's object store",
    )


def _memory(pid: int | None) -> dict[str, int]:
    """PSS, RSS and USS (private pages) of a process in bytes, from /proc/PID/smaps_rollup."""
    if pid is None:
        raise ValueError("the process has not started: it has no pid to measure")
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Pss", "Rss", "Private_Clean", "Private_Dirty"):
                values[key] = int(rest.split()[0]) * 1024
    return {"pss": values["Pss"], "rss": values["Rss"], "uss": values["Private_Clean"] + values["Private_Dirty"]}


def _pss_bytes(pid: int | None) -> tuple[int, int]:
    """(PSS, RSS) of a process in bytes."""
    m = _memory(pid)
    return m["pss"], m["rss"]


def _mapping_pss_bytes(name: str) -> int:
    """PSS of this process's mappings of the shared-memory segment ``name`` (the driver's share)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = line.rstrip().endswith(name)
            elif inside and first == "Pss:":
                total += int(line.split()[1]) * 1024
    return total


class _Bare:
    """A worker with the same imports as a model worker and no model (the baseline)."""

    def __init__(self) -> None:
        import torch  # noqa: F401

        import nonstop.learning.dqn  # noqa: F401

    def act(self, obs: np.ndarray) -> Any:
        from nonstop.policies.base import Decision

        return Decision(0)


#: seconds between the forward passes and the reading of memory: a worker between passes
_SETTLE_S = 0.3
#: the modes measured: θ copied into each worker, or shared, with the working set handed back
#: after each pass (the default) or kept (``trim_above=None``)
_MODES = {"copies": DEFAULT_MIN_FREE, "shared": DEFAULT_MIN_FREE, "shared_kept": None}


def _measure(
    factory: Any, n: int, segment: str | None = None, trim_above: int | None = DEFAULT_MIN_FREE
) -> dict[str, Any]:
    from nonstop.inference.workers import ProcessPolicy

    workers: list[ProcessPolicy] = []
    try:
        for _ in range(n):
            workers.append(ProcessPolicy(factory, trim_above=trim_above))
        obs = np.zeros((84, 84), np.uint8)
        for w in workers:
            w.act(obs)  # the forward pass's activations are part of a worker's memory
        time.sleep(_SETTLE_S)
        pss, rss = zip(*(_pss_bytes(w._process.pid) for w in workers))
        # the driver maps the weights too: its share of those pages is the rest of θ's cost
        driver = _mapping_pss_bytes(segment) if segment else 0
    finally:
        for w in workers:
            w.close()
    return {"n": n, "pss_total": int(sum(pss)) + driver, "rss_total": int(sum(rss)), "driver_weights_pss": driver}


class _BareActor(_Bare):
    """`_Bare` as a Ray actor's factory (`RayPolicy` passes the weights it would compute from)."""

    def __init__(self, weights: Any = None) -> None:
        super().__init__()


def _measure_ray(factory: Any, n: int, broadcast: Any, trim_above: int | None = DEFAULT_MIN_FREE) -> dict[str, Any]:
    """``n`` actors of ``factory`` on this machine's one-node Ray, each after one forward pass:
    their summed USS (private pages: a copy of θ is private, the object store's pages are not)."""
    from nonstop.distributed.ray_backend import RayPolicy

    actors = RayPolicy.start_many([factory] * n, num_cpus=0, broadcast=broadcast, trim_above=trim_above)
    try:
        obs = np.zeros((84, 84), np.uint8)
        for a in actors:
            a.act(obs)  # fetches the version (a view or a copy) and runs the forward pass
        time.sleep(_SETTLE_S)
        mem = [_memory(a.pid) for a in actors]
    finally:
        for a in actors:
            a.close()
    return {
        "n": n,
        "uss_total": sum(m["uss"] for m in mem),
        "pss_total": sum(m["pss"] for m in mem),
        "rss_total": sum(m["rss"] for m in mem),
    }


def _run_ray(
    counts: list[int], cfg: Any, flat: np.ndarray, weights: Any
) -> tuple[dict[int, int], list[dict[str, Any]], dict[str, Any]]:
    """Ray actors on one node: a copy of θ each (`DQNPolicy` over `ObjectStoreWeights`) vs views of
    the node's object store (`make_object_store_policy`'s actor, what ``train --backend ray`` builds). The
    object store holds each version once in both modes (θ is added once to each total)."""
    import gymnasium as gym

    from nonstop.distributed.ray_backend import WeightBroadcast, ray_session
    from nonstop.distributed.shared_params import make_object_store_policy
    from nonstop.learning.dqn import make_dqn_policy

    obs_shape, space = (84, 84), gym.spaces.Discrete(18)
    with ray_session(None):
        broadcast = WeightBroadcast(weights)
        bare = {n: _measure_ray(_BareActor, n, broadcast)["uss_total"] for n in counts}
        shared = partial(make_object_store_policy, cfg.algorithm(obs_shape, space), seed=0)
        modes = {
            "copies": partial(make_dqn_policy, obs_shape, space, cfg.to_dict(), seed=0),
            "shared": shared,
            "shared_kept": shared,
        }
        rows = []
        for mode, factory in modes.items():
            for n in counts:
                m = _measure_ray(factory, n, broadcast, _MODES[mode])
                m.update(mode=mode, model_pss=m["uss_total"] - bare[n] + flat.nbytes)  # + the object store's one θ
                rows.append(m)
    return bare, rows, modes


def run(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    from nonstop.bench.common import parse_positive_list
    from nonstop.learning.dqn import DQNConfig, build_q_network
    from nonstop.learning.weights import SharedWeights, flat_parameters

    counts = (
        [int(n) for n in parse_positive_list(args.workers, "--workers")]
        if args.workers
        else ([1, 8] if args.quick else [1, 4, 8])
    )
    cfg = DQNConfig.for_family("atari", k=args.k)
    obs_shape, space = (84, 84), gym.spaces.Discrete(18)
    model = build_q_network(obs_shape, 18, cfg)
    flat = flat_parameters(model)
    del model
    weights = SharedWeights.create(flat.size)
    try:
        weights.publish(flat)
        weights.epsilon = 0.0  # greedy: every act() is a forward pass
        if getattr(args, "backend", "process") == "ray":
            bare, rows, modes = _run_ray(counts, cfg, flat, weights)
        else:
            bare, rows, modes = _run_processes(counts, cfg, obs_shape, space, weights, _placement(args))
    finally:
        weights.unlink()
    return _result(args, counts, flat, bare, rows, modes)


def _placement(args: argparse.Namespace) -> dict[str, Any]:
    """The workers' ``device`` and ``dtype``, checked here (CUDA where torch finds none: one line)."""
    from nonstop.inference.device import placement

    device = getattr(args, "device", "cpu")
    placement(device, getattr(args, "dtype", None))
    if device != "cpu" and getattr(args, "backend", "process") == "ray":
        raise ValueError(f"--device {device} with --backend ray: Ray workers run on their nodes' CPUs")
    return {"device": device, "dtype": getattr(args, "dtype", None)}


def _run_processes(
    counts: list[int],
    cfg: Any,
    obs_shape: tuple[int, ...],
    space: Any,
    weights: Any,
    where: dict[str, Any] | None = None,
) -> tuple[dict[int, int], list[dict[str, Any]], dict[str, Any]]:
    """Process workers: a copy of θ each vs views of the host's shared copy; PSS, with the driver's
    share of the weights segment added so θ counts whole in both modes."""
    from nonstop.distributed.shared_params import make_shared_policy
    from nonstop.learning.dqn import make_dqn_policy

    # N bare workers share the libraries' pages N ways too: the baseline is measured per N
    bare = {n: _measure(_Bare, n)["pss_total"] for n in counts}
    where = where or {}
    shared = partial(make_shared_policy, cfg.algorithm(obs_shape, space), weights, 0, **where)
    modes = {
        "copies": partial(make_dqn_policy, obs_shape, space, cfg.to_dict(), weights, 0, **where),
        "shared": shared,
        "shared_kept": shared,
    }
    rows = []
    for mode, factory in modes.items():
        for n in counts:
            m = _measure(factory, n, weights.name, _MODES[mode])
            m.update(mode=mode, model_pss=m["pss_total"] - bare[n])
            rows.append(m)
    return bare, rows, modes


def _result(
    args: argparse.Namespace,
    counts: list[int],
    flat: np.ndarray,
    bare: dict[int, int],
    rows: list[dict[str, Any]],
    modes: dict[str, Any],
) -> dict[str, Any]:
    mib = 2**20
    result: dict[str, Any] = {
        "backend": getattr(args, "backend", "process"),
        # process: PSS (shared pages split among the processes that map them); ray: USS (private pages) plus θ once
        "memory": "pss" if getattr(args, "backend", "process") == "process" else "uss + theta",
        "k": args.k,
        "device": getattr(args, "device", "cpu"),
        "n_params": int(flat.size),
        "theta_mib": flat.nbytes / mib,
        # copies and shared hand each pass's working set back above this many free bytes; shared_kept never
        "trim_above_bytes": DEFAULT_MIN_FREE,
        "bare_workers_pss_mib": {str(n): b / mib for n, b in bare.items()},
        "rows": [
            {
                **r,
                "pss_total_mib": r["pss_total"] / mib,
                "rss_total_mib": r["rss_total"] / mib,
                "model_pss_mib": r["model_pss"] / mib,
            }
            for r in rows
        ],
    }
    lo, hi = min(counts), max(counts)
    for mode in modes:
        by_n = {r["n"]: r for r in rows if r["mode"] == mode}
        result[f"{mode}_model_ratio_{hi}_vs_{lo}"] = by_n[hi]["model_pss"] / by_n[lo]["model_pss"]
        result[f"{mode}_total_ratio_{hi}_vs_{lo}"] = by_n[hi]["pss_total"] / by_n[lo]["pss_total"]
    if lo == 1 and hi == 8:
        result["target_shared_model_8_le_1_5x_one"] = result["shared_model_ratio_8_vs_1"] <= 1.5
    return result


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    t = Table(
        title=f"memory of N_I workers, k={result['k']:g} (|θ| = {result['theta_mib']:.1f} MiB; "
        f"bare workers {', '.join(f'{n}: {b:.0f}' for n, b in result['bare_workers_pss_mib'].items())} MiB PSS)"
    )
    for col in ("θ", "N_I", "PSS total (MiB)", "models' PSS (MiB)", "RSS total (MiB)"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(
            r["mode"],
            str(r["n"]),
            f"{r['pss_total_mib']:.0f}",
            f"{r['model_pss_mib']:.0f}",
            f"{r['rss_total_mib']:.0f}",
        )
    Console().print(t)
    for key, value in result.items():
        if "ratio" in key or key.startswith("target"):
            print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
