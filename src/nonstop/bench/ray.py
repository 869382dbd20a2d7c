"""``nonstop bench ray``: what a Ray actor call costs a realtime agent, and what one actor per node
buys it (docs/design.md §5, issues 12 and 23). Baselines are measured in the same run.

1. **Overhead per action.** A k=1 IMPALA ResNet (84×84×1 frame, one torch thread) acts on a frame
   sent to it, back to back, in a Ray actor and in a process worker (`ProcessPolicy`, a pipe). The
   worker times its own forward pass; the rest of each round trip (serialisation, scheduling,
   transport) is the **overhead**, reported as p50/p99 in ms and in ticks at ``--tick-hz``.
2. **A model slower than a tick.** A width k is picked in this run so that the ResNet's forward
   pass takes about ``--forward-ticks`` ticks on one core (widths timed in a worker process,
   bracketing the target, then log-log interpolation rounded to 1/16 and timed, a few rounds), or
   fixed by ``--k``. It acts in a ``--tick-hz`` world (``theory/inaction``; the model computes on a
   fixed 84×84 frame): one process worker, against ``--actors-per-node`` Ray actors on each node of
   a ``--nodes``-node cluster, staggered by ``--scheduler`` (default `exp_time`; N_I = the actors).
   Reported: inaction fraction of each, τ_θ as the workers measured it (forward pass plus call),
   and the Ray calls' overhead. A full run adds the same number of process workers on this host,
   staggered the same way: the difference to the actors is what the Ray calls cost.
3. **Where the actors' τ_θ goes** (``tau_theta_parts``, per action, p50/p99/mean): the wait in the
   driver's worker thread before the call, the Ray call overhead, and the forward pass as the actor
   timed it, against the same actors timed quietly before the world starts (``--probe-calls``
   each, alone and then all at once), with the machine's CPU use during the world (``/proc/stat``).
   ``diagnosis`` names each part that made τ_θ grow, with its figure; ``machine_limit`` is set
   only when the cores were busy *and* the forward pass was slower than quiet
   (`nonstop.metrics.tau_parts.diagnose`).

By default the cluster is local (`local_cluster`: nodes of ``--actors-per-node`` CPUs each on
127.0.0.1), so its "nodes" share this machine's cores. ``--ray-address`` uses a running cluster.
"""

from __future__ import annotations

import argparse
import math
from contextlib import ExitStack
from functools import partial
from typing import Any

import numpy as np

from nonstop.bench.common import percentiles, run_sizes, size_help, usable_cores, verdict
from nonstop.metrics.tau_parts import Diagnosis, diagnose, part_summary, tau_theta_parts

DESCRIPTION = (
    "Ray actor vs process worker: per-action overhead (k=1 ResNet), and a 2-tick model on actors on each node, "
    "with its τ_θ broken down and diagnosed"
)

_QUICK = {"calls": 60, "seconds": 4.0, "passes": 4, "probe_calls": 8}
_FULL = {"calls": 600, "seconds": 30.0, "passes": 12, "probe_calls": 40}
_ENV = "theory/inaction"
_CALIBRATION_K = (1.0, 2.0, 3.0)  # widths timed to fit forward time ∝ k^b


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--calls", type=int, default=None, help=size_help("timed calls per backend (overhead)", "calls", _QUICK, _FULL)
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help=size_help("world seconds per configuration (2-tick model)", "seconds", _QUICK, _FULL),
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=None,
        help=size_help("timed forward passes per width (calibration)", "passes", _QUICK, _FULL),
    )
    parser.add_argument(
        "--forward-ticks",
        type=float,
        default=1.5,
        help="the slow model's forward pass, in ticks on one core (default 1.5: more than one tick, "
        "so one worker cannot act at every tick, and room below two for the call's overhead and "
        "jitter, so N_I = 2 can; at 1.8 the model took 2.3 ticks in the world on 16 vCPUs)",
    )
    parser.add_argument(
        "--k",
        type=float,
        default=None,
        help="the slow model's width, fixed (default: picked for --forward-ticks in each run, which varies "
        "with the machine's load: fix it to compare runs)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=2,
        help="nodes of the local cluster (or used of --ray-address's), --actors-per-node actors on each (default 2)",
    )
    parser.add_argument(
        "--actors-per-node",
        type=int,
        default=1,
        help="Ray actors of the slow model on each node, one CPU each (default 1; a local cluster's nodes "
        "get that many CPUs)",
    )
    parser.add_argument(
        "--probe-calls",
        type=int,
        default=None,
        help=size_help(
            "calls timing each actor before the world starts, alone and then all at once", "probe_calls", _QUICK, _FULL
        ),
    )
    parser.add_argument(
        "--scheduler",
        default="exp_time",
        choices=("exp_time", "max_time", "quantile_hold"),
        help="how the slow model's workers are staggered, in every configuration (default exp_time; on 2 "
        "cores quantile_hold took two processes from 30 %% to 10 %% inaction)",
    )
    parser.add_argument("--tick-hz", type=float, default=60.0, help="world rate (default 60)")
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="a running Ray cluster (default: start a local one of --nodes nodes)",
    )


# ----------------------------------------------------------------------------- the model


class _ResNetPolicy:
    """An IMPALA ResNet of width ``k`` as a policy: a forward pass on the observation when it is an
    84×84 frame, else on a fixed frame. ``timed``: the action is ``(action, forward seconds)``."""

    def __init__(self, n_actions: int, k: float, seed: int = 0, timed: bool = False) -> None:
        import torch

        from nonstop.policies.models import impala_resnet

        torch.manual_seed(seed)
        torch.set_num_threads(1)
        self.n, self.timed = int(n_actions), timed
        self.model = impala_resnet(k, 18, 1, input_hw=84).eval()
        self.frame = torch.from_numpy(np.random.default_rng(seed).integers(0, 255, (1, 1, 84, 84), dtype=np.uint8))
        self.act(np.zeros(1))  # the first pass allocates: not part of any measured call

    def act(self, obs: np.ndarray) -> Any:
        import torch

        from nonstop.policies.base import Decision
        from nonstop.realtime.clock import stopwatch

        t0 = stopwatch()
        frame = torch.from_numpy(np.asarray(obs)).reshape(1, 1, 84, 84) if np.size(obs) == 84 * 84 else self.frame
        with torch.inference_mode():
            action = int(self.model(frame.float().div_(255.0)).argmax()) % self.n
        return Decision((action, stopwatch() - t0) if self.timed else action)


def _resnet_policy(n_actions: int, k: float, seed: int, timed: bool) -> _ResNetPolicy:
    """Module-level factory (picklable into a process or an actor)."""
    return _ResNetPolicy(n_actions, k, seed, timed)


class _ForwardTimer:
    """A worker that times widths: ``act((k, passes))`` is the median forward time of width ``k``
    (one torch thread, after one untimed pass), as the worker processes will run it."""

    def act(self, obs: tuple[float, int]) -> Any:
        from nonstop.policies.base import Decision
        from nonstop.realtime.clock import stopwatch

        k, passes = obs
        policy = _ResNetPolicy(18, k)
        times = []
        for _ in range(passes):
            t0 = stopwatch()
            policy.act(np.zeros(1))
            times.append(stopwatch() - t0)
        return Decision(float(np.median(times)))


def pick_k(target_s: float, passes: int, *, tolerance: float = 0.1, rounds: int = 4) -> dict[str, Any]:
    """The width whose forward pass takes about ``target_s`` (within ``tolerance``) in a worker
    process on one core. Forward time grows with k: the widths timed so far bracket the target
    (doubling k until one is slower), and each round times the log-log interpolation between the
    bracket's ends (rounded to 1/16), for at most ``rounds`` rounds."""
    from nonstop.inference.workers import ProcessPolicy

    timer = ProcessPolicy(_ForwardTimer)

    def timed(k: float) -> float:
        if k not in times:
            times[k] = timer.act((k, passes)).action  # type: ignore[arg-type]  # this worker's "observation" is (k, passes)
        return times[k]

    times: dict[float, float] = {}
    try:
        for k in _CALIBRATION_K:
            timed(float(k))
        while max(times.values()) < target_s and max(times) < 64:
            timed(max(times) * 2)
        for _ in range(rounds):
            below = [k for k, t in times.items() if t < target_s]
            above = [k for k, t in times.items() if t >= target_s]
            if not below or not above:
                break  # even the narrowest is too slow, or the widest too fast: the nearest is the answer
            lo, hi = max(below), min(above)
            frac = math.log(target_s / times[lo]) / math.log(times[hi] / times[lo]) if times[hi] > times[lo] else 0.5
            k = round(math.exp(math.log(lo) + frac * math.log(hi / lo)) * 16) / 16
            if k in times or abs(timed(k) / target_s - 1) <= tolerance:
                break
        best = min(times, key=lambda k: abs(math.log(times[k] / target_s)))
    finally:
        timer.close()
    ks = np.array(sorted(times))
    b = float(np.polyfit(np.log(ks), np.log([times[k] for k in ks]), 1)[0]) if ks.size > 1 else float("nan")
    return {"k": best, "forward_s": times[best], "calibration": {f"{k:g}": times[k] for k in ks}, "exponent": b}


def time_k(k: float, passes: int) -> dict[str, Any]:
    """`pick_k`'s answer for a width given, not searched: ``k``'s forward time in a worker process."""
    from nonstop.inference.workers import ProcessPolicy

    timer = ProcessPolicy(_ForwardTimer)
    try:
        forward = float(timer.act((k, passes)).action)  # type: ignore[arg-type]  # this worker's "observation" is (k, passes)
    finally:
        timer.close()
    return {"k": k, "forward_s": forward, "calibration": {f"{k:g}": forward}, "exponent": None}


# ----------------------------------------------------------------------------- 1. overhead per action


def _overhead(policy: Any, calls: int, tau_m: float) -> dict[str, Any]:
    """Back-to-back calls with a fresh 84×84 frame each: round trip, forward pass, and the rest."""
    from nonstop.realtime.clock import stopwatch

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (8, 84, 84), dtype=np.uint8)
    for i in range(3):  # warm: connections, the actor's first calls
        policy.act(frames[i])
    trips, forwards = [], []
    for i in range(calls):
        t0 = stopwatch()
        decision = policy.act(frames[i % len(frames)])
        trips.append(stopwatch() - t0)
        forwards.append(decision.action[1])
    over = np.maximum(np.array(trips) - np.array(forwards), 0.0)
    ms = percentiles(over, 1e3)
    return {
        "calls": calls,
        "forward_ms_p50": float(np.median(forwards) * 1e3),
        "round_trip_ms_p50": float(np.median(trips) * 1e3),
        "overhead_ms": {"p50": ms["p50"], "p99": ms["p99"], "max": ms["max"]},
        "overhead_ticks": {"p50": ms["p50"] / 1e3 / tau_m, "p99": ms["p99"] / 1e3 / tau_m},
    }


# ----------------------------------------------------------------------------- 2. the slow model


def _cpu_reading() -> dict[int, tuple[int, int, int]] | None:
    """This machine's CPU jiffies per CPU (`parse_proc_stat`), or None where there is no /proc/stat."""
    from nonstop.metrics.tau_parts import parse_proc_stat

    try:
        with open("/proc/stat") as f:
            return parse_proc_stat(f.read())
    except OSError:
        return None


def _cpu_between(
    before: dict[int, tuple[int, int, int]] | None, after: dict[int, tuple[int, int, int]] | None
) -> dict[str, Any]:
    """The cores this process may use, busy and idle on average between two readings (`cpu_use`);
    without /proc/stat, the 1-minute load average stands in for the busy cores."""
    import os

    from nonstop.metrics.tau_parts import cpu_use

    cores = usable_cores()
    if before is not None and after is not None:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else sorted(after)
        return cpu_use(before, after, cpus)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is None:
        return {"cores": cores, "busy_cores": None, "steal_cores": None, "idle_cores": None, "source": None}
    return {
        "cores": cores,
        "busy_cores": round(min(load, cores), 3),
        "steal_cores": None,
        "idle_cores": round(max(0.0, cores - load), 3),
        "source": "loadavg",
    }


def _act_in_world(make_policy: Any, n_workers: int, scheduler: str, seconds: float, tick_hz: float) -> dict[str, Any]:
    """``n_workers`` of ``make_policy(i)`` acting in a wall-clock world for ``seconds`` after they
    are all up; the tick-log figures over that window, the machine's CPU use during it, and the
    world's τ_θ per action with its wait before the call (``_samples``: the seconds, for
    `tau_theta_parts`; not part of the JSON)."""
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.host import Session

    with Session(_ENV, clock="wall", seed=0, tick_hz=tick_hz) as world:
        tau_m = world.tau_m
        pool = InferencePool(world, make_policy, scheduler, n_inference=n_workers).start()  # returns once all are up
        try:
            world.run_for(0.5)  # half a second to settle the stagger
            start, before = int(world.slot.read().tick), _cpu_reading()
            world.run_for(seconds)
            end, after = int(world.slot.read().tick), _cpu_reading()
        finally:
            pool.stop()
    s = world.tick_log.summary(warmup_ticks=start, end_tick=end)
    taus = np.array([t for w in pool.workers for t in w.tau_thetas]) / tau_m
    out = {
        "n_workers": n_workers,
        "scheduler": scheduler,
        "ticks": end - start,
        "inaction_fraction": float(s["inaction_fraction"]),
        "tau_i_mean_ticks": s.get("tau_i_mean_ticks"),
        "delay_mean_ticks": s.get("delay_mean_ticks"),
        "tau_theta_ticks": {"mean": float(taus.mean()), "p99": float(np.percentile(taus, 99))} if taus.size else None,
        "cpu": _cpu_between(before, after),
        "_samples": {
            "world": [t for w in pool.workers for t in w.world_taus],
            "wait": [t for w in pool.workers for t in w.call_waits],
        },
    }
    overhead = world.tick_log.meta.get("workers", {}).get("remote_overhead_s")
    if overhead is not None:
        out["remote_overhead_ticks"] = {"p50": overhead["p50_ticks"], "p99": overhead["p99_ticks"]}
    return out


def _quiet_probe(policies: list[Any], obs: Any, calls: int) -> dict[str, list[float]]:
    """The actors timed before the world starts, on the world's kind of observation: each called back
    to back, alone (``forward``, ``overhead``: its in-actor times and call overheads, seconds), then
    all at once, each from a thread of its own (``together``: in-actor times). Their records are
    emptied after, so that what they record next is the world's."""
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, list[float]] = {"forward": [], "overhead": [], "together": []}

    def calls_on(policy: Any) -> None:
        for _ in range(calls):
            policy.act(obs)

    for policy in policies:
        for _ in range(2):  # warm: the actor's first calls
            policy.act(obs)
        del policy.compute_s[:], policy.overhead_s[:]
        calls_on(policy)
        out["forward"] += policy.compute_s
        out["overhead"] += policy.overhead_s
        del policy.compute_s[:], policy.overhead_s[:]
    if len(policies) > 1:
        with ThreadPoolExecutor(len(policies)) as pool:
            list(pool.map(calls_on, policies))
        for policy in policies:
            out["together"] += policy.compute_s
            del policy.compute_s[:], policy.overhead_s[:]
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.distributed.backends import check_backend

    sizes = run_sizes(args, _QUICK, _FULL)
    calls, seconds, passes, probe_calls = (
        int(sizes["calls"]),
        float(sizes["seconds"]),
        int(sizes["passes"]),
        int(sizes["probe_calls"]),
    )
    _check_numbers(args)
    check_backend("ray", ray_address=args.ray_address, clock="wall")  # Ray installed, the address answers
    from nonstop.realtime.clock import stopwatch

    tau_m = 1.0 / args.tick_hz
    result: dict[str, Any] = {"tick_hz": args.tick_hz, "env": _ENV, "scheduler": args.scheduler}
    phases: dict[str, float] = {}  # wall seconds of each part of the run
    t0 = stopwatch()

    # the slow model's width, timed on this core before anything else runs
    slow = pick_k(args.forward_ticks * tau_m, passes) if args.k is None else time_k(args.k, passes)
    result["slow_model"] = {
        "k": slow["k"],
        "forward_ms": slow["forward_s"] * 1e3,
        "forward_ticks": slow["forward_s"] / tau_m,
        "target_ticks": args.forward_ticks if args.k is None else None,
        "calibration_ms": {k: t * 1e3 for k, t in slow["calibration"].items()},
        "time_exponent": slow["exponent"],
    }
    phases["calibration"] = stopwatch() - t0

    with ExitStack() as stack:
        result["cluster"] = _cluster(stack, args)
        n_actors = min(args.nodes, result["cluster"]["nodes"]) * args.actors_per_node
        phases["cluster_start"] = stopwatch() - t0 - sum(phases.values())
        result["overhead"] = _overheads(calls, tau_m)  # 1. overhead per action, k=1
        phases["overhead"] = stopwatch() - t0 - sum(phases.values())
        # 2. the slow model at tick_hz: one process, then --actors-per-node actors on each node
        made, quiet = _slow_worlds(stack, args, result, slow["k"], n_actors, seconds, probe_calls)
        phases["worlds"] = stopwatch() - t0 - sum(phases.values())
    result["phase_s"] = {**phases, "total": stopwatch() - t0}
    _split_tau_theta(result, made, quiet, tau_m)
    ray_inaction = result["ray_actor_per_node"]["inaction_fraction"]
    one_inaction = result["one_process"]["inaction_fraction"]
    result["meets_target"] = {
        # issue 12: the 2-tick model acts at every tick (inaction <= 1 %) on one actor per node, where one process cannot
        "actor_per_node_acts_every_tick": bool(ray_inaction <= 0.01 and one_inaction > 0.01),
    }
    found = diagnose_result(result, n_actors, local=args.ray_address is None)
    result["diagnosis"], result["machine_limit"] = found.causes, found.machine_limit
    return result


def _check_numbers(args: argparse.Namespace) -> None:
    for name in ("forward_ticks", "tick_hz") + (("k",) if args.k is not None else ()):
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    for name in ("nodes", "actors_per_node"):
        value = getattr(args, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 1, got {value!r}")


def _cluster(stack: ExitStack, args: argparse.Namespace) -> dict[str, Any]:
    """A local cluster of ``--nodes`` (``--actors-per-node`` CPUs each), or the session of
    ``--ray-address``, held open by ``stack``; what it is."""
    from nonstop.distributed.ray_backend import local_cluster, ray_session

    per_node = args.actors_per_node
    if args.ray_address is None:
        cluster = stack.enter_context(local_cluster(args.nodes, num_cpus=per_node))
        return {"local": True, "nodes": args.nodes, "cpus_per_node": per_node, "address": cluster.address}
    ray = stack.enter_context(ray_session(args.ray_address))
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return {"local": False, "nodes": len(alive), "address": args.ray_address}


def _overheads(calls: int, tau_m: float) -> dict[str, Any]:
    """Per action, outside the forward pass of a k=1 ResNet: a process policy and a Ray actor."""
    from nonstop.distributed.ray_backend import RayPolicy
    from nonstop.inference.workers import ProcessPolicy

    overhead: dict[str, Any] = {"k": 1}
    factory = partial(_resnet_policy, 18, 1.0, 0, True)
    for name, make in (
        ("process", lambda: ProcessPolicy(factory)),
        ("ray", lambda: RayPolicy(factory, num_cpus=1)),
    ):
        policy = make()
        try:
            overhead[name] = _overhead(policy, calls, tau_m)
        finally:
            policy.close()
    return overhead


def _slow_worlds(
    stack: ExitStack,
    args: argparse.Namespace,
    result: dict[str, Any],
    k: float,
    n_actors: int,
    seconds: float,
    probe_calls: int,
) -> tuple[list[Any], dict[str, Any]]:
    """The slow model (width ``k``) acting in the world at --tick-hz: one process, (full runs) as many
    processes on this host as there are actors, then the Ray actors; each world's figures go into
    ``result``. Returns the actors the world used and their quiet probe."""
    from nonstop.distributed.ray_backend import RayPolicy
    from nonstop.envs import make_env
    from nonstop.inference.workers import ProcessPolicy

    probe = make_env(_ENV)
    n_actions = int(probe.action_space.n)  # type: ignore[attr-defined]  # Boxing: Discrete(18)
    obs = probe.reset(seed=0)[0]  # the quiet probe sends what the world will
    probe.close()
    slow_factory = partial(_resnet_policy, n_actions, k, 0, False)
    result["one_process"] = _act_in_world(
        lambda i: ProcessPolicy(slow_factory), 1, args.scheduler, seconds, args.tick_hz
    )
    if not args.quick:  # the same staggering without Ray, on this host's cores: what the calls themselves cost
        result["processes_on_this_host"] = _act_in_world(
            lambda i: ProcessPolicy(slow_factory), n_actors, args.scheduler, seconds, args.tick_hz
        )
    # the actors start first (the least filled node each: actors_per_node per node), and each is
    # timed quietly, alone, before the world starts; the world's workers take them over
    actors = RayPolicy.start_many([slow_factory] * n_actors, num_cpus=1)
    made: list[Any] = []
    for policy in actors:
        stack.callback(policy.close)
    quiet = _quiet_probe(actors, obs, probe_calls)

    def actor(i: int) -> Any:
        fresh = i >= len(actors) or any(p is actors[i] for p in made)  # a restart builds a new one
        policy = RayPolicy(slow_factory, num_cpus=1) if fresh else actors[i]
        made.append(policy)
        return policy

    world = _act_in_world(actor, n_actors, args.scheduler, seconds, args.tick_hz)
    world["actors_per_node"] = args.actors_per_node
    world["nodes_used"] = len({str(p.node_id) for p in made})
    result["ray_actor_per_node"] = world
    return made, quiet


def _split_tau_theta(result: dict[str, Any], made: list[Any], quiet: dict[str, Any], tau_m: float) -> None:
    """Each world's wait before a call, and the Ray actors' τ_θ split into its parts, into ``result``."""
    samples = {
        name: result[name].pop("_samples")
        for name in ("one_process", "processes_on_this_host", "ray_actor_per_node")
        if name in result
    }
    for name, sample in samples.items():
        result[name]["wait_before_call"] = part_summary(sample["wait"], tau_m)
    result["tau_theta_parts"] = tau_theta_parts(
        world=samples["ray_actor_per_node"]["world"],
        wait=samples["ray_actor_per_node"]["wait"],
        forward_world=[t for p in made for t in p.compute_s],
        overhead=[t for p in made for t in p.overhead_s],
        forward_quiet=quiet["forward"],
        forward_together=quiet["together"],
        overhead_quiet=quiet["overhead"],
        tau_m=tau_m,
    )
    result["ray_actor_per_node"]["actor_niceness"] = sorted({p.niceness for p in made if p.niceness is not None})


def diagnose_result(result: dict[str, Any], n_actors: int, *, local: bool) -> Diagnosis:
    """`diagnose` on this run's Ray actors: their τ_θ parts and the machine's CPU use during their
    world. A local cluster with fewer cores than its actors + 2 (the world's host, the driver's calls)
    says so beside a machine limit; on its own it is no evidence of one.

    >>> ms = 1e-3
    >>> parts = tau_theta_parts(world=[40 * ms] * 9, forward_world=[36 * ms] * 9, forward_quiet=[24 * ms] * 9,
    ...                         overhead=[3 * ms] * 9, wait=[1 * ms] * 9, tau_m=1 / 60)
    >>> r = {"meets_target": {"acts": False}, "tau_theta_parts": parts,
    ...      "ray_actor_per_node": {"cpu": {"cores": 2, "busy_cores": 1.8, "idle_cores": 0.2}}}
    >>> print(diagnose_result(r, 2, local=True).machine_limit)  # doctest: +ELLIPSIS
    the machine is the limit: 0.2 of 2 cores idle ...; this local cluster's 2 actors share 2 cores with the world's host and the driver (it needs 4): ...
    """
    cpu = result["ray_actor_per_node"].get("cpu") or {}
    cores = cpu.get("cores") or usable_cores()
    note = (
        f"this local cluster's {n_actors} actors share {cores} cores with the world's host and the driver "
        f"(it needs {n_actors + 2})"
        if local and cores < n_actors + 2
        else ""
    )
    nice = max(result["ray_actor_per_node"].get("actor_niceness") or [0])
    return diagnose(
        result["tau_theta_parts"],
        cpu,
        target_met=all(result["meets_target"].values()),
        cluster_note=note,
        actor_niceness=nice,
    )


def render(result: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    console.print(_overhead_table(result))
    console.print(_worlds_table(result))
    console.print(_parts_table(result))
    cpu = result["ray_actor_per_node"].get("cpu") or {}
    if cpu.get("idle_cores") is not None:
        console.print(
            f"CPU during the actors' world: {cpu['busy_cores']:.2f} of {cpu['cores']} cores busy, "
            f"{cpu['idle_cores']:.2f} idle ({cpu['source']})",
            markup=False,
        )
    ok = result["meets_target"]["actor_per_node_acts_every_tick"]
    console.print(
        f"one actor per node acts at every tick (inaction ≤ 1 %) where one process cannot: {verdict(ok, result.get('quick', False))}"
    )
    for cause in result.get("diagnosis") or []:
        console.print(f"- {cause['text']}", markup=False)
    if result.get("machine_limit"):
        console.print(result["machine_limit"], style="yellow", markup=False)


def _overhead_table(result: dict[str, Any]) -> Any:
    """Per action, outside the forward pass: process against Ray actor."""
    from rich.table import Table

    hz = result["tick_hz"]
    t = Table(title=f"per-action overhead outside the forward pass, k=1 ResNet, ticks at {hz:g} Hz")
    for col in (
        "backend",
        "forward p50 (ms)",
        "round trip p50 (ms)",
        "overhead p50 (ms)",
        "p99 (ms)",
        "p50 (ticks)",
        "p99 (ticks)",
    ):
        t.add_column(col, justify="right")
    for name in ("process", "ray"):
        r = result["overhead"][name]
        t.add_row(
            name,
            f"{r['forward_ms_p50']:.2f}",
            f"{r['round_trip_ms_p50']:.2f}",
            f"{r['overhead_ms']['p50']:.2f}",
            f"{r['overhead_ms']['p99']:.2f}",
            f"{r['overhead_ticks']['p50']:.3f}",
            f"{r['overhead_ticks']['p99']:.3f}",
        )
    return t


def _worlds_table(result: dict[str, Any]) -> Any:
    """The slow model in the world: one process, processes on this host, one Ray actor per node."""
    from rich.table import Table

    hz = result["tick_hz"]
    slow = result["slow_model"]
    t = Table(
        title=f"k={slow['k']:g} ResNet: forward {slow['forward_ms']:.1f} ms = {slow['forward_ticks']:.2f} ticks on one core, "
        f"acting at {hz:g} Hz, staggered by {result['scheduler']}"
    )
    for col in ("configuration", "N_I", "inaction", "τ_θ mean (ticks)", "τ_I mean (ticks)"):
        t.add_column(col, justify="right")
    for name, label in (
        ("one_process", "one process"),
        ("processes_on_this_host", "processes on this host"),
        ("ray_actor_per_node", "one Ray actor per node"),
    ):
        if name not in result:
            continue
        r = result[name]
        tau = r["tau_theta_ticks"]["mean"] if r.get("tau_theta_ticks") else float("nan")
        t.add_row(
            label,
            str(r["n_workers"]),
            f"{r['inaction_fraction']:.1%}",
            f"{tau:.2f}",
            f"{r['tau_i_mean_ticks'] or float('nan'):.2f}",
        )
    return t


def _parts_table(result: dict[str, Any]) -> Any:
    """The Ray actors' τ_θ in the world split into its parts, beside the quiet probe's."""
    from rich.table import Table

    parts = result["tau_theta_parts"]
    per_node = result["ray_actor_per_node"].get("actors_per_node", 1)
    t = Table(title=f"τ_θ of the Ray actors ({per_node} per node) in the world, per action, and quiet before it")
    for col in ("part", "n", "p50 ms", "p99 ms", "mean ms", "mean ticks", "of τ_θ"):
        t.add_column(col, justify="right")
    world = parts["world"]["mean_ms"]
    for name, label in (
        ("world", "τ_θ (world)"),
        ("wait_before_call", "  wait before call"),
        ("ray_overhead", "  Ray overhead"),
        ("forward_in_actor", "  forward in actor"),
        ("forward_quiet", "forward quiet, alone"),
        ("forward_together", "forward quiet, together"),
        ("ray_overhead_quiet", "Ray overhead quiet"),
    ):
        r = parts[name]
        if not r["n"]:
            continue
        share = (
            f"{r['mean_ms'] / world:.0%}"
            if world and name in ("wait_before_call", "ray_overhead", "forward_in_actor")
            else ""
        )
        t.add_row(
            label,
            str(r["n"]),
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['mean_ms']:.2f}",
            f"{r['mean_ticks']:.2f}",
            share,
        )
    return t
