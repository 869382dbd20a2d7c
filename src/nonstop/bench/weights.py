"""``nonstop bench weights``: memory of N_I process workers of one model, with one copy of θ per
worker (`DQNPolicy`, today's process backend) and with one shared copy per host (`SharedDQNPolicy`).

Each worker is a real `ProcessPolicy` holding the paper's ResNet at width ``--k`` that has made
one forward pass. Memory is the **PSS** (proportional set size, /proc/PID/smaps_rollup) summed over
the workers: pages shared between processes count once in total, which RSS would count N times.
N bare workers (Python, torch, numpy, no model) are measured in the same run as the baseline
(their libraries' pages are shared N ways too), so ``model_pss`` (total − bare total at N) is what the models themselves cost. The driver that owns the
weights segment maps it too; its PSS share of those pages is added to the total, so θ counts
whole in both modes. Target: 8 workers of k=7 at
≤ 1.5× the model memory of one worker with shared weights (about 8× with copies).
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

import numpy as np

DESCRIPTION = "memory of N_I process workers of one model: a copy of θ each vs one shared copy per host"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--k", type=float, default=7.0, help="IMPALA ResNet width (default 7: ~11.7M parameters)")
    parser.add_argument("--workers", default=None, help="worker counts, comma-separated (default 1,4,8; quick 1,8)")


def _pss_bytes(pid: int | None) -> tuple[int, int]:
    """(PSS, RSS) of a process in bytes, from /proc/PID/smaps_rollup."""
    if pid is None:
        raise ValueError("the process has not started: it has no pid to measure")
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Pss", "Rss"):
                values[key] = int(rest.split()[0]) * 1024
    return values["Pss"], values["Rss"]


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


def _measure(factory: Any, n: int, segment: str | None = None) -> dict[str, Any]:
    from nonstop.inference.workers import ProcessPolicy

    workers: list[ProcessPolicy] = []
    try:
        for _ in range(n):
            workers.append(ProcessPolicy(factory))
        obs = np.zeros((84, 84), np.uint8)
        for w in workers:
            w.act(obs)  # the forward pass's activations are part of a worker's memory
        pss, rss = zip(*(_pss_bytes(w._process.pid) for w in workers))
        # the driver maps the weights too: its share of those pages is the rest of θ's cost
        driver = _mapping_pss_bytes(segment) if segment else 0
    finally:
        for w in workers:
            w.close()
    return {"n": n, "pss_total": int(sum(pss)) + driver, "rss_total": int(sum(rss)), "driver_weights_pss": driver}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    from nonstop.bench.common import parse_positive_list
    from nonstop.distributed.shared_params import make_shared_dqn_policy
    from nonstop.learning.dqn import DQNConfig, build_q_network, make_dqn_policy
    from nonstop.learning.weights import SharedWeights, flat_parameters

    counts = [int(n) for n in parse_positive_list(args.workers, "--workers")] if args.workers else (
        [1, 8] if args.quick else [1, 4, 8])  # fmt: skip
    cfg = DQNConfig.for_family("atari", k=args.k)
    obs_shape, space = (84, 84), gym.spaces.Discrete(18)
    model = build_q_network(obs_shape, 18, cfg)
    flat = flat_parameters(model)
    del model
    weights = SharedWeights.create(flat.size)
    try:
        weights.publish(flat)
        weights.epsilon = 0.0  # greedy: every act() is a forward pass
        # N bare workers share the libraries' pages N ways too: the baseline is measured per N
        bare = {n: _measure(_Bare, n)["pss_total"] for n in counts}
        modes = {
            "copies": partial(make_dqn_policy, obs_shape, space, cfg.to_dict(), weights, 0),
            "shared": partial(make_shared_dqn_policy, obs_shape, space, cfg.to_dict(), weights, 0),
        }
        rows = []
        for mode, factory in modes.items():
            for n in counts:
                m = _measure(factory, n, weights.name)
                m.update(mode=mode, model_pss=m["pss_total"] - bare[n])
                rows.append(m)
    finally:
        weights.unlink()
    mib = 2**20
    result: dict[str, Any] = {
        "k": args.k,
        "n_params": int(flat.size),
        "theta_mib": flat.nbytes / mib,
        "bare_workers_pss_mib": {str(n): b / mib for n, b in bare.items()},
        "rows": [{**r, "pss_total_mib": r["pss_total"] / mib, "rss_total_mib": r["rss_total"] / mib,
                  "model_pss_mib": r["model_pss"] / mib} for r in rows],  # fmt: skip
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

    t = Table(title=f"memory of N_I workers, k={result['k']:g} (|θ| = {result['theta_mib']:.1f} MiB; "
                    f"bare workers {', '.join(f'{n}: {b:.0f}' for n, b in result['bare_workers_pss_mib'].items())} MiB PSS)")  # fmt: skip
    for col in ("θ", "N_I", "PSS total (MiB)", "models' PSS (MiB)", "RSS total (MiB)"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(r["mode"], str(r["n"]), f"{r['pss_total_mib']:.0f}", f"{r['model_pss_mib']:.0f}", f"{r['rss_total_mib']:.0f}")
    Console().print(t)
    for key, value in result.items():
        if "ratio" in key or key.startswith("target"):
            print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
