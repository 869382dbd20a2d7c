"""N_L learners as Ray actors, on any node (docs/design.md §3, §5): ``--learner-backend ray``.

What stays on the driver, next to the env: the replay (shared memory, filled by the host's
recorder), the master parameters with their Adam moments (`TrainingState`) and the published
weights (`SharedWeights`). What travels::

    driver                                         learner actor i (any node)
    ------                                         --------------------------
    batch_i <- Algorithm.sample(replay, B)         # DCAC: runs of consecutive transitions
    (v, θ_v ref) <- WeightBroadcast.current()      # θ_v put once into the object store
    ------------- batch_i, v, θ_v ref ------------>  θ <- θ_v (fetched only when v is new)
                                                     g_i <- ∇ loss(batch_i) at θ_v       # Algorithm.backward
    <------------- g_i, loss, v ------------------
    apply g_i to the master (apply_gradient), in the mode's order; publish θ_{v+1}

One dispatcher thread on the driver keeps a gradient in flight per learner and applies the
results, so the mode is an order of application:

* ``round_robin`` (Langford et al., *Slow learners are fast*): in the fixed cyclic order 0, 1, …,
  N_L−1, 0, … while the other learners keep computing; every gradient is applied (none
  overwritten: updates applied == gradients returned) and each is at most N_L − 1 updates
  stale. A learner with no gradient in flight (paused by ``updates_per_transition``, or being
  restarted) has its turn skipped, as `LearnerProcesses` skips a dead learner's.
* ``hogwild``: each gradient is applied as soon as it returns, in no set order (the master is
  one copy on the driver, so updates are serialised there; what Hogwild gives up — order — is
  given up here too).
* ``parallel``: all learners compute on the same version, the driver averages their gradients
  and applies one large-batch update per round.

A learner actor that dies (killed, out of memory, its node removed) loses only the gradient it
was computing (counted as ``lost``). The dispatcher sees the death at once, even of a learner with
nothing in flight (paused, or before learning starts: it is asked where it runs every
`_PING_EVERY` s), says so in one line (``say``: stderr by default) naming the learner, where it ran
and the error, and starts a fresh actor on a live node while the restart budget allows; a restarted
actor that does not answer within ``start_timeout`` counts as one more death. Past the budget the
learner is not restarted and the run ends with `PartFailed` (its message says which learners are
left, none when every one died): a run never goes on acting on frozen weights as if it trained.
Weights reach inference actors through the same `WeightBroadcast` (one put per version, shared by
both).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from nonstop.distributed.backends import BackendUnavailable
from nonstop.distributed.ray_backend import WeightBroadcast, _placement, _ray, overhead_summary, pinned_to
from nonstop.learning.algos import AlgoConfig, algorithm_of
from nonstop.learning.learners import LearnerSettings, Segments, apply, ready_to_learn, updates_ahead
from nonstop.realtime.clock import WallClock, stopwatch
from nonstop.realtime.deaths import Death
from nonstop.realtime.lifeline import PartFailed, RestartBudget

__all__ = ["RayLearners"]
_POLL: Final = 0.02  # seconds between checks of the stop flag while waiting on a result
_PING_EVERY: Final = 0.5  # seconds between liveness checks of a learner with no gradient in flight


def _to_stderr(line: str) -> None:
    print(f"nonstop: {line}", file=sys.stderr, flush=True)


def _cause(exc: BaseException) -> str:
    """Why a learner's actor died, in one line: Ray's own cause (killed by ``ray.kill``, its worker
    exited, out of memory) rather than its generic first line; the learner's own error if its
    gradient raised.

    >>> _cause(TimeoutError("its restarted actor did not start within 120 s"))
    'TimeoutError: its restarted actor did not start within 120 s'
    """
    inner = getattr(exc, "cause", None)  # a RayTaskError: what the gradient raised
    if isinstance(inner, BaseException) and inner is not exc:
        return _cause(inner)
    base = getattr(type(exc), "BASE_ERROR_MSG", None)  # an ActorDiedError: the cause follows its fields
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("\t")]
    told = [ln for ln in lines if ln != base] or lines
    text = f"{type(exc).__name__}: {told[0].rstrip('.')}" if told else type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"


class _LearnerActor:
    """One learner's networks, in its actor's process; it computes gradients, never applies them."""

    def __init__(self, obs_shape: tuple[int, ...], action_space: Any, cfg: AlgoConfig, torch_threads: int) -> None:
        import torch

        from nonstop.learning.algos import algorithm_of

        torch.set_num_threads(torch_threads)
        self.algo = algorithm_of(cfg, obs_shape, action_space)
        self.online = self.algo.build_model().train()
        self.target = self.algo.build_model().eval()
        self.version = self.target_version = -1
        self.computed = 0  # gradients returned by this actor (the driver checks none was lost)

    def where(self) -> tuple[str, int]:
        return _ray().get_runtime_context().get_node_id(), os.getpid()

    def gradient(
        self, batch: Any, version: int, params: list[Any], target_version: int, target: list[Any]
    ) -> tuple[np.ndarray, float, int, float]:
        """The algorithm's gradient of ``batch`` at version ``version``; the parameters (and the
        target network) are fetched from the object store only when their version is new."""
        from nonstop.learning.optim import flat_gradient
        from nonstop.learning.weights import load_flat

        t0 = stopwatch()
        ray = _ray()
        if version != self.version:
            load_flat(self.online, ray.get(params[0]))
            self.version = version
        if target_version != self.target_version:
            load_flat(self.target, ray.get(target[0]))
            self.target_version = target_version
        loss = float(self.algo.backward(self.online, self.target, batch))
        grad = flat_gradient(self.online)
        self.computed += 1
        return grad, loss, version, stopwatch() - t0

    def count(self) -> int:
        return self.computed


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = _ray().remote(_LearnerActor)
    return _ACTOR_CLASS


class _InFlight:
    """One gradient call: its Ray reference, the update count it was computed after, when it left."""

    __slots__ = ("ref", "updates_at", "sent")

    def __init__(self, ref: Any, updates_at: int, sent: float) -> None:
        self.ref, self.updates_at, self.sent = ref, updates_at, sent


class RayLearners:
    """N_L learner actors driven from this process, with `LearnerProcesses`' interface
    (``start``, ``stop``, ``kill``, ``report``, ``failure``, ``restarts``).

    Needs a connected Ray (`ray_session`). ``broadcast`` is the run's `WeightBroadcast` (the
    inference actors' too, when they run on Ray); ``num_cpus`` is what each actor reserves.
    After ``stop``: ``applied`` updates were applied by this object, ``gradients`` returned and
    ``lost`` died with their actor or were in flight at the stop; in ``round_robin`` and
    ``hogwild`` every returned gradient is applied, so ``applied == gradients``.
    """

    def __init__(
        self,
        settings: LearnerSettings,
        segments: Segments,
        *,
        broadcast: WeightBroadcast,
        restart_budget: RestartBudget | None = None,
        clock: Any = None,
        start_timeout: float = 120.0,
        tau_m: float = 1 / 60,
        say: Callable[[str], None] | None = None,
    ) -> None:
        if not isinstance(broadcast, WeightBroadcast):
            raise TypeError(f"broadcast must be the run's WeightBroadcast, got {type(broadcast).__name__}")
        n_learners, seed, n_actions = settings.n_learners, settings.seed, settings.action_space
        self.n, self.mode = n_learners, settings.mode
        #: ``n_actions``: the action space (or n of a Discrete one); ``cfg``: the algorithm's config
        self.obs_shape, self.n_actions, self.cfg = settings.obs_shape, n_actions, settings.cfg
        self.state, self.weights, self.replay = segments
        self.broadcast = broadcast
        num_cpus, torch_threads, weights = settings.num_cpus, settings.torch_threads, segments.weights
        #: the algorithm, here for how it draws a batch (DCAC: runs of consecutive transitions)
        self.algo = algorithm_of(self.cfg, self.obs_shape, n_actions)
        self.rule = self.algo.update_rule()  # how the gradients are applied (`nonstop.learning.optim`)
        self.num_cpus, self.torch_threads, self.start_timeout, self.tau_m = (
            num_cpus,
            torch_threads,
            start_timeout,
            tau_m,
        )
        #: learner i's own random stream for its batches (sampled here, on the replay's host)
        self.rngs = [np.random.default_rng(None if seed is None else seed * 1000 + i) for i in range(n_learners)]
        self.budget = restart_budget if restart_budget is not None else RestartBudget()
        self._clock = clock if clock is not None else WallClock(spin=0.0)
        #: where a learner's death (and its restart, or why not) is told at once, one line each
        self._say = say if say is not None else _to_stderr
        self.actors: list[Any] = [None] * n_learners
        self._nodes: list[str | None] = [None] * n_learners  # the node each actor is pinned to
        self.where: list[tuple[str, int] | None] = [None] * n_learners
        self.restarts = [0] * n_learners
        self.events: list[tuple[float, int, str]] = []
        self.failure: PartFailed | None = None
        #: every learner death, for the run's summary (each is said at once: ``say``)
        self.deaths: list[Death] = []
        self.applied = self.gradients = self.lost = 0
        self.received = [0] * n_learners  # gradients returned by learner i's current actor
        self.dropped_at_stop = [0] * n_learners  # its gradients in flight when the learners stopped
        #: gradients each actor had computed when the learners stopped (None: dead, or no answer)
        self.actor_counts: list[int | None] = [None] * n_learners
        self.applied_by: list[int] = []  # which learner's gradient each update applied (round_robin, hogwild)
        self.max_staleness = 0  # updates applied between a gradient's version and its own update
        #: per gradient, the time from its send to its receipt outside the actor's compute: transfers,
        #: queueing, and in round_robin the wait for its turn
        self.outside_s: list[float] = []
        self._in_flight: list[_InFlight | None] = [None] * n_learners
        self._probe: list[Any] = [None] * n_learners  # a restarted actor's `where` call, until it answers
        self._spawned_at = [0.0] * n_learners  # when each actor was started (stopwatch): a restart has a deadline
        self._ping: list[Any] = [None] * n_learners  # an idle actor's `where` call: is it still alive?
        self._pinged_at = [0.0] * n_learners
        self._turn = 0
        self._target: tuple[int, list[Any]] = (-1, [])
        self._target_flat = np.empty(weights.n_params, np.float32)
        self._stop = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # what ended the dispatcher, if not a stop
        self.alive: int | None = None  # learners whose actor was alive at the stop (None: not stopped)

    # ------------------------------------------------------------------ actors
    def _spawn(self, i: int, exclude: frozenset[str] = frozenset()) -> Any:
        """Learner ``i``'s actor, pinned to the least filled live node (not one of ``exclude``)."""
        self._give_back(i)
        self._nodes[i] = node = _placement.take(self.num_cpus, exclude)
        self._spawned_at[i], self._ping[i] = stopwatch(), None
        actor = (
            _actor_class()
            .options(num_cpus=self.num_cpus, scheduling_strategy=pinned_to(node), max_restarts=0)
            .remote(self.obs_shape, self.n_actions, self.cfg, self.torch_threads)
        )
        self.actors[i] = actor
        return actor

    def _give_back(self, i: int) -> None:
        node, self._nodes[i] = self._nodes[i], None
        if node is not None:
            _placement.give_back(node, self.num_cpus)

    def start(self) -> "RayLearners":
        ray = _ray()
        if not ray.is_initialized():
            raise RuntimeError("RayLearners needs a connected Ray: use nonstop.distributed.ray_backend.ray_session()")
        probes = [self._spawn(i).where.remote() for i in range(self.n)]
        try:
            self.where = list(ray.get(probes, timeout=self.start_timeout))
        except Exception as exc:
            self._kill_all()
            raise RuntimeError(
                f"{self.n} Ray learner actors did not all start within {self.start_timeout:g}s: {exc}"
            ) from exc
        self._thread = threading.Thread(target=self._dispatch, name="nonstop-ray-learners", daemon=True)
        self._thread.start()
        return self

    def kill(self, i: int) -> None:
        """Kill learner ``i``'s actor as a fault would (tests and drills): its gradient in flight is lost."""
        if not 0 <= i < self.n:
            raise ValueError(f"no learner {i}; learners are 0..{self.n - 1}")
        _ray().kill(self.actors[i], no_restart=True)

    def _kill_all(self) -> None:
        ray = _ray()
        for i, actor in enumerate(self.actors):
            self._give_back(i)
            if actor is None:
                continue
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead, or Ray already shut down
                pass

    def _where_text(self, i: int) -> str:
        where = self.where[i]
        return "not started yet" if where is None else f"pid {where[1]} on node {where[0][:8]}"

    def _died(self, i: int, exc: BaseException) -> None:
        """Learner ``i``'s actor died (or its gradient raised): count it, say so at once, and restart it
        within the budget, else stop the learners and fail the run (`PartFailed`)."""
        try:
            _ray().kill(self.actors[i], no_restart=True)  # one that raised is alive: it goes too
        except Exception:
            pass
        why, now = _cause(exc), self._clock.now()
        head = f"Ray learner {i} ({self._where_text(i)}) died: {why}"
        self._lose(i, why)
        # a node that died before the actor could start there: the next goes elsewhere
        unplaced = self._nodes[i] if isinstance(exc, _ray().exceptions.ActorUnschedulableError) else None
        if not self.budget.spend(now):
            deaths = sum(self.restarts) + 1
            return self._give_up(
                i, head, why, f"{deaths} death{'s' * (deaths > 1)}, more than {self.budget.describe()}"
            )
        self.restarts[i] += 1
        try:  # not awaited: until it answers, its turns pass and the other learners go on
            self._probe[i] = self._spawn(i, frozenset({unplaced} if unplaced else ())).where.remote()
        except BackendUnavailable as lost:  # no live node left that can hold a learner
            return self._give_up(i, head, why, f"no live node can hold it: {lost}")
        self._record(i, why, now, restarted=True)
        self.where[i] = None
        self.events.append((now, i, "restarted"))
        self._say(f"{head}; restarting it (restart {self.restarts[i]} of it; {self.budget.describe()} allowed)")

    def _record(self, i: int, why: str, now: float, *, restarted: bool, why_not: str = "") -> None:
        """Keep learner ``i``'s death for the run's summary (its line is said where it is seen)."""
        self.deaths.append(
            Death(
                f"Ray learner {i}",
                self._where_text(i),
                why,
                restarted=restarted,
                budget_left=self.budget.left(now),
                budget=self.budget.describe(),
                why_not=why_not,
                time=now,
            )
        )

    def _lose(self, i: int, why: str) -> None:
        """Count learner ``i``'s death: its gradient in flight is lost, its calls forgotten."""
        self.lost += self._in_flight[i] is not None
        self._in_flight[i] = self._ping[i] = self._probe[i] = None
        self.received[i] = 0
        self.events.append((self._clock.now(), i, f"died ({why})"))

    def _give_up(self, i: int, head: str, why: str, why_not: str) -> None:
        """Learner ``i`` cannot be restarted: the run stops, and its reason says whether any learner is left."""
        self._record(i, why, self._clock.now(), restarted=False, why_not=why_not)
        self.actors[i] = None
        self.events.append((self._clock.now(), i, "gave up"))
        self._say(f"{head}; not restarted ({why_not}): the run stops")
        others = self._dead_too(timeout=1.0)
        left = [j for j in range(self.n) if self.actors[j] is not None]
        if left:
            self.failure = PartFailed(
                f"{head}; not restarted ({why_not}), so the run stops ({len(left)} of {self.n} learners left)"
            )
        else:
            too = f" (learner{'s' * (len(others) > 1)} {', '.join(map(str, others))} died too)" if others else ""
            self.failure = PartFailed(f"no Ray learner is left{too}: {head}; not restarted ({why_not})")

    def _dead_too(self, timeout: float) -> list[int]:
        """The other learners found dead now (a call to each fails within ``timeout`` s; one busy
        computing counts as alive), each counted and said; the run stops, so none is restarted."""
        ray = _ray()
        self._stop.wait(0.25)  # deaths of one cause (a node lost, every actor killed) land together
        calls: dict[int, Any] = {}
        for j, actor in enumerate(self.actors):
            if actor is not None:
                calls[j] = self._probe[j] if self._probe[j] is not None else actor.where.remote()
        if not calls:
            return []
        done, _ = ray.wait(list(calls.values()), num_returns=len(calls), timeout=timeout)
        dead = []
        for j, ref in calls.items():
            if ref not in done:
                continue  # busy computing: alive as far as anyone knows
            try:
                ray.get(ref)
            except ray.exceptions.RayError as exc:
                why = _cause(exc)
                self._say(f"Ray learner {j} ({self._where_text(j)}) died: {why}; not restarted: the run stops")
                self._record(j, why, self._clock.now(), restarted=False, why_not="the run stops")
                self._lose(j, why)
                self.actors[j] = None
                dead.append(j)
        return dead

    def _watch(self) -> None:
        """See a death at once, not at the learner's next batch: every idle actor (nothing in flight:
        paused, or before learning starts) is asked where it runs every `_PING_EVERY` s; a restarted
        actor that has not answered within ``start_timeout`` counts as dead."""
        ray, now = _ray(), stopwatch()
        for i, actor in enumerate(self.actors):
            if actor is None or self.failure is not None:
                continue
            if self._probe[i] is not None:
                if now - self._spawned_at[i] > self.start_timeout and not ray.wait([self._probe[i]], timeout=0)[0]:
                    self._died(i, TimeoutError(f"its restarted actor did not start within {self.start_timeout:g} s"))
                continue
            if self._in_flight[i] is not None:  # its gradient's own result will say
                self._ping[i] = None
                continue
            ping = self._ping[i]
            if ping is None:
                if now - self._pinged_at[i] >= _PING_EVERY:
                    self._ping[i], self._pinged_at[i] = actor.where.remote(), now
            elif ray.wait([ping], timeout=0)[0]:
                self._ping[i] = None
                try:
                    ray.get(ping)
                except ray.exceptions.RayError as exc:
                    self._died(i, exc)

    # ------------------------------------------------------------------ one gradient
    def _target_ref(self) -> tuple[int, list[Any]]:
        """The target network in the object store, put once per target version."""
        version = self.state.target_version
        if version != self._target[0]:
            for _ in range(100):
                got = self.state.read_target_into(self._target_flat)  # a seqlock read: None if a sync overlapped it
                if got is not None:
                    self._target = (got, [_ray().put(self._target_flat.copy())])
                    break
        return self._target

    def _in_flight_count(self) -> int:
        return sum(f is not None for f in self._in_flight)

    def _may_send(self) -> bool:
        return ready_to_learn(self.replay, self.cfg) and not updates_ahead(
            self.state, self.replay, self.cfg, in_flight=self._in_flight_count() if self.mode != "parallel" else 0
        )

    def _send(self, i: int, weights: tuple[int, float, list[Any]] | None = None) -> bool:
        """Sample learner ``i``'s next batch here and send it, with the newest version, to its actor."""
        batch = self.algo.sample(self.replay, self.cfg.batch_size, self.rngs[i])
        if batch is None:
            return False
        version, _, refs = weights if weights is not None else self.broadcast.current()
        target_version, target_refs = self._target_ref()
        ref = self.actors[i].gradient.remote(batch, version, refs, target_version, target_refs)
        self._in_flight[i] = _InFlight(ref, self.state.updates, stopwatch())
        return True

    def _up(self, i: int) -> bool:
        """Whether learner ``i`` has a started actor (a restarted one counts once it has answered)."""
        if self.actors[i] is None:
            return False
        probe = self._probe[i]
        if probe is None:
            return True
        ray = _ray()
        if not ray.wait([probe], timeout=0)[0]:
            return False
        self._probe[i] = None
        try:
            self.where[i] = ray.get(probe)
        except ray.exceptions.RayError as exc:  # died, never placed (its node gone), out of memory
            self._died(i, exc)
            return False
        return True

    def _receive(self, i: int) -> tuple[np.ndarray, float, int] | None:
        """Learner ``i``'s gradient (None: its actor died, already counted and handled)."""
        ray, flight = _ray(), self._in_flight[i]
        assert flight is not None
        try:
            grad, loss, _version, compute = ray.get(flight.ref)
        except ray.exceptions.RayError as exc:  # its actor died, or its gradient raised
            self._died(i, exc)
            return None
        self._in_flight[i] = None
        self.gradients += 1
        self.received[i] += 1
        self.outside_s.append(max(0.0, stopwatch() - flight.sent - compute))
        # a received array may be read-only (Ray deserialises without a copy): Adam reads it only, but
        # torch warns on a read-only buffer
        return np.require(grad, np.float32, ["C", "W"]), loss, flight.updates_at

    def _apply(self, i: int, grad: np.ndarray, loss: float, updates_at: int) -> None:
        self.max_staleness = max(self.max_staleness, self.state.updates - updates_at)
        apply(self.state, self.weights, grad, loss, self.rule)
        self.applied += 1
        self.applied_by.append(i)

    def _wait(self, refs: list[Any], num_returns: int = 1) -> list[Any]:
        """The first ``num_returns`` of ``refs`` that are done, polling so a stop is seen within _POLL."""
        ray = _ray()
        while not self._stop.is_set():
            done, _ = ray.wait(refs, num_returns=num_returns, timeout=_POLL)
            if len(done) >= num_returns:
                return done
        return []

    def _wait_turn(self, i: int, mine: Any) -> bool:
        """Wait for learner ``i``'s gradient (``mine``: its turn is next), handling meanwhile the death
        of any other learner whose call failed: told now, not when its own turn comes round (a cycle
        of N_L gradients of a large model takes seconds). False: stopping, or the run failed."""
        ray = _ray()
        returned: set[int] = set()  # others whose gradient came back well: their turns will take it
        while not self._stop.is_set() and self.failure is None:
            others = {f.ref: j for j, f in enumerate(self._in_flight) if f is not None and j != i and j not in returned}
            done, _ = ray.wait([mine, *others], num_returns=1, timeout=_POLL)
            if any(ref == mine for ref in done):
                return True
            for ref in done:
                j = others[ref]
                try:
                    ray.get(ref, timeout=0)
                    returned.add(j)
                except ray.exceptions.RayError as exc:  # its actor died: count it, restart it (or stop)
                    self._died(j, exc)
        return False

    # ------------------------------------------------------------------ the dispatcher
    def _dispatch(self) -> None:
        step = {"round_robin": self._round_robin_step, "hogwild": self._hogwild_step, "parallel": self._parallel_step}[
            self.mode
        ]
        next_watch = 0.0
        try:
            while not self._stop.is_set() and self.failure is None:
                if stopwatch() >= next_watch:
                    self._watch()
                    next_watch = stopwatch() + _POLL
                    continue
                if not step():
                    self._stop.wait(0.002)  # nothing to do yet: no batch, or ahead of the transitions
        except BaseException as exc:  # a dispatcher that died ends the run, with its cause
            self.error = exc
            self.failure = PartFailed(f"the Ray learners' dispatcher failed: {type(exc).__name__}: {exc}")

    def _fill(self) -> None:
        for i in range(self.n):
            # a restarted actor gets its first batch once it has started: sent earlier, the gradient
            # would wait out the start (seconds) and arrive many versions stale
            if self._in_flight[i] is None and self._up(i) and self._may_send():
                self._send(i)

    def _round_robin_step(self) -> bool:
        self._fill()
        if not self._in_flight_count():
            return False
        i = self._turn % self.n
        self._turn += 1
        flight = self._in_flight[i]
        if flight is None:
            return True  # nothing of learner i's to apply (paused, or restarting): its turn passes
        if not self._wait_turn(i, flight.ref):
            return False  # stopping, or the run failed meanwhile
        out = self._receive(i)
        if out is not None:
            self._apply(i, *out)
        return True

    def _hogwild_step(self) -> bool:
        self._fill()
        refs = {f.ref: i for i, f in enumerate(self._in_flight) if f is not None}
        if not refs:
            return False
        for ref in self._wait(list(refs)):
            i = refs[ref]
            out = self._receive(i)
            if out is not None:
                self._apply(i, *out)
        return True

    def _parallel_step(self) -> bool:
        if not self._may_send():
            return False
        weights = self.broadcast.current()  # one version for the whole round
        sent = [i for i in range(self.n) if self._up(i) and self._send(i, weights)]
        if not sent:
            return False
        self._wait([f.ref for f in (self._in_flight[i] for i in sent) if f is not None], num_returns=len(sent))
        if self._stop.is_set():
            return False
        outs = [(i, out) for i in sent if (out := self._receive(i)) is not None]
        if outs:
            grad = np.mean([g for _, (g, _, _) in outs], axis=0).astype(np.float32)
            loss = float(np.mean([part for _, (_, part, _) in outs]))
            self._apply(-1, grad, loss, outs[0][1][2])  # -1: every learner's average
        return True

    # ------------------------------------------------------------------ the end
    def stop(self, timeout: float = 10.0) -> None:
        """Stop the dispatcher (a gradient still in flight is dropped and counted in ``lost``) and
        release the actors. Idempotent (a run quiesces, then tears down)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        self.dropped_at_stop = [int(f is not None) for f in self._in_flight]
        self.lost += sum(self.dropped_at_stop)
        self._in_flight = [None] * self.n
        # each actor's own count, queued behind its last gradient call: received + dropped_at_stop, for
        # a learner whose actor lived (the check that nothing computed went missing)
        ray = _ray()
        for i, actor in enumerate(self.actors):
            try:
                self.actor_counts[i] = ray.get(actor.count.remote(), timeout=2.0) if actor is not None else None
            except ray.exceptions.GetTimeoutError:  # not answering (starting, or stuck): no count
                self.actor_counts[i] = None
            except ray.exceptions.RayError as exc:  # died since the dispatcher last looked: said, not restarted
                why = _cause(exc)
                self._say(f"Ray learner {i} ({self._where_text(i)}) died: {why}; found as the learners stopped")
                self._record(i, why, self._clock.now(), restarted=False, why_not="found as the learners stopped")
                self._lose(i, why)
                self.actors[i] = None
            except Exception:  # Ray itself gone: no count
                self.actor_counts[i] = None
        self.alive = sum(actor is not None for actor in self.actors)
        self._kill_all()

    @property
    def loss(self) -> float:
        return self.state.loss

    def report(self) -> dict[str, Any]:
        return {
            "n_learners": self.n,
            "mode": self.mode,
            "backend": "ray",
            "restarts": list(self.restarts),
            "events": [(round(t, 3), i, what) for t, i, what in self.events],
            "alive_at_stop": self.alive,  # learners whose actor was alive when they stopped
            "failure": None if self.failure is None else str(self.failure),
            "applied": self.applied,
            "gradients": self.gradients,
            "lost": self.lost,
            "max_staleness": self.max_staleness,
            "outside_compute_s": overhead_summary(self.outside_s, self.tau_m),
        }
