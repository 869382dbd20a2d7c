"""Where a remote worker's τ_θ goes, and what made it longer than the model's quiet forward pass.

τ_θ as the world sees it (docs/design.md §5) is, per action, three parts in a row:

- the **wait before the call**: from the start the schedule counts (a tick's publish) to the call,
  spent in the driver's worker thread (waking late, aligning to the tick);
- the **forward pass in the actor**, as the actor times it, in the world;
- the **Ray call overhead**: the call's round trip less the actor's own time (serialising the
  observation, scheduling, sending the result back).

Against them stands the **quiet forward pass**: the same model timed in the same actor before the
world starts, alone, and with every actor computing at once (what the actors do to each other,
without the world). `tau_theta_parts` summarises each part; `diagnose` names the parts that made τ_θ
grow, with their figures, and says the machine is the limit only on its evidence: cores busy during
the world *and* the forward pass slower in the world than quiet. `cpu_use` turns two readings of
``/proc/stat`` into the cores busy between them. Pure functions of numbers.

>>> ms = 1e-3
>>> parts = tau_theta_parts(forward_world=[25 * ms] * 50, forward_quiet=[24 * ms] * 8, overhead=[6 * ms] * 50,
...                         overhead_quiet=[1.5 * ms] * 8, wait=[0.5 * ms] * 50, world=[31.5 * ms] * 50, tau_m=1 / 60)
>>> d = diagnose(parts, {"cores": 16, "busy_cores": 4.0, "idle_cores": 12.0}, target_met=False)
>>> [c["cause"] for c in d.causes], d.machine_limit
(['ray_call_overhead'], None)
>>> print(d.causes[0]["text"])
Ray call overhead: 6.00 ms p50 / 6.00 ms p99 per call (19% of τ_θ; 1.50 ms p50 quiet)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import numpy as np

__all__ = [
    "BUSY_IDLE_CORES",
    "FORWARD_INFLATED",
    "MIN_SHARE",
    "Diagnosis",
    "cpu_use",
    "diagnose",
    "parse_proc_stat",
    "part_summary",
    "tau_theta_parts",
]

#: The forward pass counts as slower in the world than quiet above this ratio of their means (noise below).
FORWARD_INFLATED: Final = 1.2
#: A part of τ_θ is named as a cause when it adds this fraction of the world's mean τ_θ or more.
MIN_SHARE: Final = 0.10
#: The machine's cores count as busy when fewer than this many stayed idle, on average, during the world.
BUSY_IDLE_CORES: Final = 1.0

_PARTS: Final = (
    "world",
    "forward_in_actor",
    "forward_quiet",
    "forward_together",
    "ray_overhead",
    "ray_overhead_quiet",
    "wait_before_call",
)


def part_summary(samples_s: Sequence[float] | np.ndarray, tau_m: float) -> dict[str, Any]:
    """One part's per-action samples (seconds): count, p50, p99, mean in ms, and the mean in ticks.

    >>> part_summary([0.010, 0.020, 0.030], 1 / 60)["mean_ms"], part_summary([], 1 / 60)["p50_ms"]
    (20.0, None)
    """
    if not (tau_m > 0 and math.isfinite(tau_m)):
        raise ValueError(f"tau_m must be a positive number of seconds, got {tau_m!r}")
    a = np.asarray(samples_s, dtype=float)
    if a.size == 0:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "mean_ms": None, "mean_ticks": None}
    p50, p99 = (float(v) * 1e3 for v in np.percentile(a, [50, 99]))
    return {
        "n": int(a.size),
        "p50_ms": p50,
        "p99_ms": p99,
        "mean_ms": float(a.mean()) * 1e3,
        "mean_ticks": float(a.mean()) / tau_m,
    }


def tau_theta_parts(
    *,
    world: Sequence[float],
    forward_world: Sequence[float],
    forward_quiet: Sequence[float],
    overhead: Sequence[float],
    wait: Sequence[float],
    tau_m: float,
    forward_together: Sequence[float] = (),
    overhead_quiet: Sequence[float] = (),
) -> dict[str, dict[str, Any]]:
    """Each part of τ_θ summarised (`part_summary`), keyed by part: ``world`` (τ_θ as the world
    sees it: wait + call), ``forward_in_actor`` (in the world), ``forward_quiet`` (the probe before
    the world, each actor alone), ``forward_together`` (the probe with every actor computing at
    once), ``ray_overhead`` (call round trip less the actor's time), ``ray_overhead_quiet`` (the
    probe's, alone) and ``wait_before_call``. Samples in seconds, one per action (or probe call)."""
    samples = {
        "world": world,
        "forward_in_actor": forward_world,
        "forward_quiet": forward_quiet,
        "forward_together": forward_together,
        "ray_overhead": overhead,
        "ray_overhead_quiet": overhead_quiet,
        "wait_before_call": wait,
    }
    return {name: part_summary(samples[name], tau_m) for name in _PARTS}


def parse_proc_stat(text: str) -> dict[int, tuple[int, int, int]]:
    """Per CPU, the jiffies ``(busy, idle, steal)`` since boot from the text of ``/proc/stat``
    (idle counts iowait; busy is user, nice, system, irq and softirq; guest time is in user already).

    >>> parse_proc_stat("cpu  9 0 9 9 0 0 0 0 0 0\\ncpu0 4 1 2 50 3 0 1 2 0 0\\nintr 1 2\\n")
    {0: (8, 53, 2)}
    """
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        f = [int(v) for v in rest.split()] + [0] * 8
        user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
        out[int(name[3:])] = (user + nice + system + irq + softirq, idle + iowait, steal)
    return out


def cpu_use(
    before: Mapping[int, tuple[int, int, int]], after: Mapping[int, tuple[int, int, int]], cpus: Sequence[int]
) -> dict[str, Any]:
    """The cores of ``cpus`` busy, stolen (by the hypervisor: not ours to use) and idle, on average,
    between two `parse_proc_stat` readings.

    >>> cpu_use({0: (0, 0, 0), 1: (0, 0, 0)}, {0: (90, 10, 0), 1: (20, 60, 20)}, [0, 1])
    {'cores': 2, 'busy_cores': 1.1, 'steal_cores': 0.2, 'idle_cores': 0.7, 'source': '/proc/stat'}
    """
    busy = steal = total = 0.0
    for cpu in cpus:
        if cpu not in before or cpu not in after:
            continue
        b, i, s = (a - z for a, z in zip(after[cpu], before[cpu]))
        busy, steal, total = busy + b, steal + s, total + b + i + s
    n = len(cpus)
    if total <= 0:
        return {"cores": n, "busy_cores": None, "steal_cores": None, "idle_cores": None, "source": "/proc/stat"}
    return {
        "cores": n,
        "busy_cores": round(n * busy / total, 3),
        "steal_cores": round(n * steal / total, 3),
        "idle_cores": round(n * (total - busy - steal) / total, 3),
        "source": "/proc/stat",
    }


class Diagnosis(NamedTuple):
    """What made τ_θ in the world longer than the quiet forward pass: ``causes`` (each a dict with
    ``cause``, its figures and a ``text``), and ``machine_limit``: a sentence only when the machine's
    measured load explains a missed target, else None."""

    causes: list[dict[str, Any]]
    machine_limit: str | None


def _mean(parts: Mapping[str, Mapping[str, Any]], name: str) -> float:
    value = parts.get(name, {}).get("mean_ms")
    return float(value) if value is not None else math.nan


def diagnose(
    parts: Mapping[str, Mapping[str, Any]],
    cpu: Mapping[str, Any],
    *,
    target_met: bool,
    cluster_note: str = "",
    actor_niceness: int = 0,
) -> Diagnosis:
    """Name each part that made the world's τ_θ (``parts``: `tau_theta_parts`) longer than the quiet
    forward pass by `MIN_SHARE` of it or more, largest first:

    - ``cpu_contention``: the forward pass in the actors is slower than quiet (by more than
      `FORWARD_INFLATED`) and fewer than `BUSY_IDLE_CORES` cores stayed idle (``cpu``: `cpu_use`);
    - ``actors_slow_each_other``: the same slowdown with cores idle, and the probe with every actor
      computing at once (no world) already shows it: the actors share physical cores (SMT siblings),
      caches or memory bandwidth;
    - ``forward_slower_in_world``: the same slowdown with cores idle, which the actors alone do not
      explain: not the machine's load (thread counts? the world's host or the driver on the actors'
      cores?);
    - ``ray_call_overhead``: the call's round trip outside the actor;
    - ``wait_before_call``: the driver's worker thread before the call.

    A missed target that no part explains gets ``unexplained``. ``machine_limit`` is set only for a
    missed target with ``cpu_contention`` among the causes (``cluster_note`` is added to it). Actors
    at a positive ``actor_niceness`` whose forward pass slowed are told how to run them at 0.

    >>> ms = 1e-3
    >>> busy = {"cores": 2, "busy_cores": 1.9, "idle_cores": 0.1}
    >>> parts = tau_theta_parts(forward_world=[36 * ms] * 9, forward_quiet=[24 * ms] * 9, overhead=[1 * ms] * 9,
    ...                         wait=[0.2 * ms] * 9, world=[37.2 * ms] * 9, tau_m=1 / 60)
    >>> d = diagnose(parts, busy, target_met=False)
    >>> [c["cause"] for c in d.causes]
    ['cpu_contention']
    >>> print(d.machine_limit)
    the machine is the limit: 0.1 of 2 cores idle during the world, and the forward pass in the actors took 36.00 ms mean in the world against 24.00 ms quiet on the same nodes (+50%, 32% of τ_θ): measure on one with free cores (or --ray-address a cluster)
    >>> [c["cause"] for c in diagnose(parts, {**busy, "idle_cores": 1.6}, target_met=False).causes]
    ['forward_slower_in_world']
    """
    world = _mean(parts, "world")
    if not (world > 0):
        return Diagnosis([], None)
    idle = cpu.get("idle_cores")
    load = (
        f"{float(idle):.1f} of {cpu.get('cores')} cores idle during the world"
        if idle is not None
        else "the machine's load unmeasured"
    )
    forward, how = _forward_cause(parts, world, cpu, load, actor_niceness)
    causes = ([forward] if forward else []) + _call_causes(parts, world, load)
    causes.sort(key=lambda c: -c["share_of_tau_theta"])
    if not target_met and not causes:
        fq = _mean(parts, "forward_quiet")
        causes.append(
            {
                "cause": "unexplained",
                "world_ms_mean": world,
                "quiet_ms_mean": fq,
                "text": f"τ_θ in the world ({world:.2f} ms mean) is the quiet forward pass ({fq:.2f} ms) plus no "
                "part large enough to name: the miss is not τ_θ's growth (the stagger? the model's size?)",
            }
        )
    limit = None
    if not target_met and any(c["cause"] == "cpu_contention" for c in causes):
        limit = (
            f"the machine is the limit: {load}, and {how}"
            + (f"; {cluster_note}" if cluster_note else "")
            + ": measure on one with free cores (or --ray-address a cluster)"
        )
    return Diagnosis(causes, limit)


def _forward_cause(
    parts: Mapping[str, Mapping[str, Any]], world: float, cpu: Mapping[str, Any], load: str, actor_niceness: int
) -> tuple[dict[str, Any] | None, str]:
    """The forward pass slower in the world than quiet, and why (the cause, and its figures in words);
    (None, "") when it is not slower by `FORWARD_INFLATED`."""
    fw, fq, ft = _mean(parts, "forward_in_actor"), _mean(parts, "forward_quiet"), _mean(parts, "forward_together")
    if not fw > FORWARD_INFLATED * fq:  # also when either is missing (NaN)
        return None, ""
    cores, idle = cpu.get("cores"), cpu.get("idle_cores")
    gain = fw - fq
    fig = {
        "forward_ms_mean": fw,
        "quiet_ms_mean": fq,
        "together_ms_mean": None if math.isnan(ft) else ft,
        "slower": fw / fq - 1,
        "share_of_tau_theta": gain / world,
        "idle_cores": idle,
        "cores": cores,
        "actor_niceness": actor_niceness,
    }
    how = (
        f"the forward pass in the actors took {fw:.2f} ms mean in the world against {fq:.2f} ms quiet on the "
        f"same nodes (+{fw / fq - 1:.0%}, {gain / world:.0%} of τ_θ)"
    )
    nice = (
        f"; the actors run at nice {actor_niceness}, behind every process of default priority (start the "
        "cluster with RAY_worker_niceness=0)"
        if actor_niceness > 0
        else ""
    )
    if idle is not None and float(idle) < BUSY_IDLE_CORES:
        return {"cause": "cpu_contention", **fig, "text": f"CPU contention: {how} with {load}{nice}"}, how
    if ft > FORWARD_INFLATED * fq and fw <= FORWARD_INFLATED * ft:
        text = (
            f"{how}, with {load}; computing at once without the world they took {ft:.2f} ms "
            f"(+{ft / fq - 1:.0%}): the actors share physical cores (SMT siblings?), caches or "
            f"memory bandwidth: fewer actors per node, or nodes with more cores{nice}"
        )
        return {"cause": "actors_slow_each_other", **fig, "text": text}, how
    if idle is None:
        text = f"{how}, with {load}: contention cannot be told from thread counts{nice}"
    else:
        text = (
            f"{how}, with {load}: not the machine's load, nor the actors on each other (thread "
            f"counts? the world's host or the driver on the actors' cores?){nice}"
        )
    return {"cause": "forward_slower_in_world", **fig, "text": text}, how


def _call_causes(parts: Mapping[str, Mapping[str, Any]], world: float, load: str) -> list[dict[str, Any]]:
    """The Ray call's round trip and the wait before it, each where it is `MIN_SHARE` of τ_θ or more."""
    causes: list[dict[str, Any]] = []
    over = parts.get("ray_overhead", {})
    if over.get("mean_ms") is not None and over["mean_ms"] / world >= MIN_SHARE:
        quiet = parts.get("ray_overhead_quiet", {}).get("p50_ms")
        text = (
            f"Ray call overhead: {over['p50_ms']:.2f} ms p50 / {over['p99_ms']:.2f} ms p99 per call "
            f"({over['mean_ms'] / world:.0%} of τ_θ" + (f"; {quiet:.2f} ms p50 quiet)" if quiet is not None else ")")
        )
        causes.append(
            {
                "cause": "ray_call_overhead",
                "p50_ms": over["p50_ms"],
                "p99_ms": over["p99_ms"],
                "quiet_p50_ms": quiet,
                "share_of_tau_theta": over["mean_ms"] / world,
                "text": text,
            }
        )
    wait = parts.get("wait_before_call", {})
    if wait.get("mean_ms") is not None and wait["mean_ms"] / world >= MIN_SHARE:
        causes.append(
            {
                "cause": "wait_before_call",
                "p50_ms": wait["p50_ms"],
                "p99_ms": wait["p99_ms"],
                "share_of_tau_theta": wait["mean_ms"] / world,
                "text": f"actions waited {wait['p50_ms']:.2f} ms p50 / {wait['p99_ms']:.2f} ms p99 in the driver's "
                f"worker thread before their call ({wait['mean_ms'] / world:.0%} of τ_θ, {load})",
            }
        )
    return causes
