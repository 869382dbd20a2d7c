"""Inference workers: N_I loops that read the latest observation, infer, and
submit, paced by a pure `Scheduler` (docs/design.md §2).

One worker loop, written as a timed process, runs on both clocks::

    wait start_delay (the initial stagger)
    loop:  wait take_delay()          # delays other workers pushed onto this one
           obs <- slot.read()         # the newest observation
           a, τ_θ <- policy(obs)      # measured (wall) or declared (latency policy)
           wait after_inference(τ_θ)  # Algorithm 1 pads to τ̂_θmax; others return 0
           queue.submit(a)

The arithmetic of those waits (the worker's own clock, tick alignment, the phase guard, a restarted
worker's phase) is in `nonstop.inference.pacing`, pure functions of numbers; this module is the
plumbing around them.

On the wall clock a worker is a thread (enough for latency policies, which
sleep) or a thread fronting a process (``backend="process"``, for real torch
models); on the virtual clock it is a simulated process and a declared latency
"takes" its time without sleeping. A worker whose policy raises dies; the
`InferencePool` restarts it and counts the restart, while the host covers the
gap with β.

Inference restarts at once after a submit (the loop does not wait for a fresh
observation), except when the newest observation is the very one this worker
just used, where it waits for the next tick instead of recomputing it. So a
sequential agent with τ_θ = k·τ_M acts every k ticks (inaction 1 − 1/k) and,
for non-integer ratios, realises inaction 1 − τ_M/τ_θ. On the wall clock,
staggered pools additionally align each start to a tick's publish
(``align_to_ticks``, see `InferencePool`), which rounds cycles up to whole ticks.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nonstop.inference import pacing
from nonstop.inference.inflight import due_tick_of
from nonstop.inference.phases import TickPhases
from nonstop.inference.processpolicy import ProcessPolicy
from nonstop.metrics.overhead import overhead_summary
from nonstop.realtime.clock import Clock, TimedProcess, Wake, stopwatch
from nonstop.realtime.deaths import Death, in_this_process, tell
from nonstop.realtime.host import Session
from nonstop.realtime.lifeline import PartFailed, RestartBudget

__all__ = ["InferencePool", "WorkerEvent", "ProcessPolicy"]

#: Virtual-clock priority that wakes a worker after the host's tick at the same instant
#: (the host runs at priority 1, workers at 0).
_AFTER_TICK = 2


@dataclass
class WorkerEvent:
    """Something that happened to a worker (death, restart), for the run's record."""

    time: float
    worker: int
    kind: str
    detail: str = ""


@dataclass
class _WorkerState:
    index: int
    handle: Any = None
    actions: int = 0
    deaths: int = 0
    killed: bool = False
    last_start: float | None = None  # when its latest inference started (the worker's phase)
    cycle: float | None = None  # time between its last two inference starts
    tau_thetas: list[float] = field(default_factory=list)
    #: τ_θ as the world sees it: from the start the schedule counts (a tick's publish, a grid slot)
    #: to the action in hand. On the wall clock it adds what τ_θ leaves out: the thread's wake-up
    #: lag before the call. The theory's N* = ⌈τ_θ/τ_M⌉ holds for this one (`nonstop bench nstar`).
    world_taus: list[float] = field(default_factory=list)
    #: per inference, the part of its world τ_θ outside the call: the thread's wake-up lag before it
    #: (and, after a declared latency, waking late from it)
    call_waits: list[float] = field(default_factory=list)
    generation: int = 0  # bumped when the index is (re)started by a resize: older loops of it exit


#: Most workers ``n_inference="auto"`` may grow to (threads or processes are not free).
AUTO_MAX_WORKERS = 512


def _resolve_scheduler(scheduler: Any, n_inference: int | str | None) -> Any:
    """A scheduler instance from an instance, or from a name and ``n_inference`` (an int or
    ``"auto"``: the `AutoScheduler`, starting from one worker and growing online)."""
    from nonstop.inference.schedulers import Scheduler, make_scheduler

    if isinstance(scheduler, Scheduler):
        if n_inference is not None and n_inference != scheduler.n_workers:
            raise ValueError(f"n_inference={n_inference!r} contradicts the scheduler's n_workers={scheduler.n_workers}")
        return scheduler
    if not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be a Scheduler or a scheduler name, got {type(scheduler).__name__}")
    if isinstance(n_inference, str):
        if n_inference != "auto":
            raise ValueError(f"n_inference must be a positive int or 'auto', got {n_inference!r}")
        if scheduler != "auto":
            raise ValueError(
                f"n_inference='auto' sizes the pool online, which only the 'auto' scheduler does; "
                f"got scheduler {scheduler!r} (pass an int, or scheduler='auto')"
            )
        return make_scheduler("auto", 1, max_workers=AUTO_MAX_WORKERS)
    if n_inference is None:
        n_inference = 1 if scheduler in ("sequential", "auto") else None
        if n_inference is None:
            raise ValueError(f"scheduler {scheduler!r} needs n_inference (an int, or 'auto' with scheduler='auto')")
    return make_scheduler(scheduler, n_inference)


class InferencePool:
    """Runs ``n_workers`` inference workers against a started `Session`.

    ``policy_factory(worker_index)`` builds each worker's policy (one object per
    worker, so stateful or process-backed policies never share). ``scheduler``
    is a `nonstop.inference.schedulers.Scheduler`, or its name with
    ``n_inference`` (N_I: an int, or ``"auto"`` with the ``auto`` scheduler).

    ``max_restarts``: how often each worker is restarted after it dies (0: never); past it the worker
    stays dead and β covers it, and ``restart_budget`` caps the restarts of the whole pool.

    ``align_to_ticks`` (on for staggered schedulers on the wall clock, off otherwise) starts each inference at a tick's publish: one the scheduler would start up to a quarter tick
    into a tick counts as started at that tick's publish (the next waits are aimed from there),
    one due later waits for the next observation (it would compute on the same, older one
    anyway). Every cycle is then a whole number of ticks and every worker's action arrives at the
    same phase of a tick, just after a deadline for an integer τ_θ, where a late wake-up cannot
    push it across the next deadline: jitter up to most of a tick costs no inaction. Without it
    the spacing τ_θ/N_I spreads arrivals across the tick, and those landing just before a deadline
    turn wake-up jitter into inaction.

    Aligned, Algorithms 1 and 2 space their workers by phase, not by their relative waits: the
    rule's estimate in whole ticks is a cycle C, and each worker starts on its own tick of it,
    ``⌊i·C/N⌋`` from a common origin, re-spaced absolutely when C changes
    (`nonstop.inference.phases`). Their relative spacing τ̂/N snapped to ticks unevenly: 5.4
    ticks (a 6-tick cycle) left one tick in six to β at N = 6..9; by phase N = 6 covers them all.

    With an `AutoScheduler` the pool sizes itself online: after every submit it
    asks ``target_workers(τ_M)`` (⌈τ̄_θ/τ_M⌉ with hysteresis) and, when that
    differs from N_I, resizes the cycle anchored on the worker that just
    submitted, starting new workers or retiring the highest-numbered ones
    (each finishes the inference it is running). Every change is an event
    (``"grew"``/``"shrank"``).

    ``seat`` (a seat world, docs/design.md §4b): the seat (name or index) this pool plays; it reads that
    seat's slot and submits to its queue, so each seat has its own pool (scheduler, N_I, latency
    policy). Its report is noted in the tick log's meta as ``workers:<seat>``.

    >>> from nonstop.inference.schedulers import make_scheduler
    >>> from nonstop.policies import ConstantPolicy, LatencyPolicy, Constant
    >>> with Session("theory/inaction", clock="virtual", seed=0) as world:
    ...     policy = lambda i: LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(3 / 60))
    ...     pool = InferencePool(world, policy, make_scheduler("max_time", 3)).start()
    ...     world.run_for(2.0)
    >>> s = world.tick_log.summary(warmup_ticks=10)
    >>> (s["inaction_ticks"], s["delay_max_ticks"])
    (0, 3)
    """

    def __init__(
        self,
        session: Session,
        policy_factory: Callable[[int], Any],
        scheduler: Any,
        *,
        n_inference: int | str | None = None,
        max_restarts: int = 100,
        restart_budget: RestartBudget | None = None,
        seat: int | str | None = None,
        inflight: Any = None,
    ) -> None:
        if not session.slots:  # the channels exist from start() on
            raise RuntimeError("start the session before the inference pool")
        #: the seat index this pool plays (0: the first seat, or the only one)
        self.seat = 0 if seat is None else session.seat_index(seat)
        self._seat_name = None if seat is None else (session.seats or ["agent_0"])[self.seat]
        if not callable(policy_factory):
            raise TypeError("policy_factory must be a callable: worker index -> Policy")
        self.session = session
        self.clock: Clock = session.clock
        self.policy_factory = policy_factory
        self.scheduler = scheduler = _resolve_scheduler(scheduler, n_inference)
        # grid schedulers start one inference per tick: just after its publish (on the virtual clock,
        # which needs no margin, at the deadline: the loop then waits for that tick's observation)
        scheduler.bind(
            period=session.tau_m, origin=session.origin + self.clock.real(pacing.alignment_margin(session.tau_m))
        )
        self.frees_workers = scheduler.frees_workers
        #: episode catch-up copies (`QuantileHoldScheduler.early_release`): only into a ``latest``
        #: queue, where applying one decision twice is holding a control; never into a command stream
        self._copies_allowed = self.frees_workers and getattr(session.queues[self.seat], "mode", "latest") == "latest"
        self.early_copies = 0
        self.resizable = scheduler.resizable
        self._resize_lock = threading.Lock()
        # aligned: staggered workers on the wall clock (see the class docstring)
        # (a scheduler that frees its workers places starts on the tick grid itself)
        # (a clock that needs no margin past a publish wakes exactly: nothing to align against)
        staggered = scheduler.name not in ("sequential", "unstaggered") and not self.frees_workers
        wakes_late = self.clock.real(pacing.alignment_margin(session.tau_m)) > 0
        self.align_to_ticks = staggered and wakes_late
        # Algorithms 1 and 2 where starts align to ticks: each worker on its phase of a whole-tick cycle
        rule = scheduler.tick_rule
        self._phases = TickPhases(scheduler.n_workers, rule) if rule is not None and self.align_to_ticks else None
        self.max_restarts = max_restarts
        #: restarts of the whole pool within a window of clock time (None: only ``max_restarts`` per
        #: worker, after which that worker stays dead and β covers it); past it, `failure` is set
        #: and the run that owns the pool ends with it
        self.budget = restart_budget
        self.failure: PartFailed | None = None
        self.events: list[WorkerEvent] = []
        #: every worker death, each said at once on stderr (``say``) when the supervisor sees it
        self.deaths: list[Death] = []
        self._say = tell  # every death is said at once on stderr
        self.workers = [_WorkerState(i) for i in range(scheduler.n_workers)]
        self._stop = threading.Event()
        #: the clock the workers, their timers and the supervisor run on: the session's, as threads
        #: that never spin (they share the GIL) and wake when the pool stops (`Clock.for_threads`)
        self._timing = self.clock.for_threads(interrupt=self._stop)
        self._monitor: Any = None
        self._policies: dict[int, Any] = {}
        self._overhead_s: list[float] = []  # remote policies (Ray): per-action time outside the forward pass
        #: the actions in flight (`nonstop.inference.inflight.ActionBuffer`, ``--delay-aware``): each
        #: decision is recorded with its due tick and each policy sees them beside the observation
        self.inflight = inflight

    # ------------------------------------------------------------------ the loop
    def _loop(
        self, state: _WorkerState, first: bool, resume_at: float | None = None, start_at: float | None = None
    ) -> TimedProcess:
        """One worker (the module docstring's loop; the paper's Algorithms 1 and 2 decide the waits
        through the scheduler). The timing arithmetic is in `nonstop.inference.pacing`; ``t`` is the
        worker's own notion of now (`Clock.resync`), so its timings never drift."""
        clock, sched = self.clock, self.scheduler
        slot, queue = self.session.slots[self.seat], self.session.queues[self.seat]
        i, generation = state.index, state.generation
        policy = self._worker_policy(i)
        tau_m, grace, origin, guard, next_margin, margin, window = self._pacing_constants()
        align, phases = self.align_to_ticks, self._phases
        timed = clock.timed_call(policy)  # a policy that waits as a timed process on this clock (a batching lane)
        wait_until, after_tick = self._waits(next_margin)
        begin, record_world_tau, submit = self._begin_inference, self._record_world_tau, self._submit_now
        inflight_obs, inflight_known = self._inflight_obs, self._inflight_known
        stopped, frees = self._stop.is_set, self.frees_workers  # bound once: a pass looks up no method nor flag
        t = yield from self._first_wait(i, first, resume_at, start_at, wait_until)
        last_seq = -1
        while not stopped():
            if i >= sched.n_workers or state.generation != generation:
                return  # retired by a resize (or superseded by a newer loop of this index)
            # 1. wait the delays other workers' new maxima pushed onto this one (aligned: step 2 holds phases)
            wait = sched.take_delay(i, now=t)
            if wait > 0 and phases is None:
                t = yield from wait_until(t + wait)
            if frees and (deadline := pacing.deadline_at(t, origin, tau_m, grace)) is not None:
                t = yield from after_tick(deadline, t)  # a start on a deadline reads that tick's observation
            # 2. read the newest observation (on a tick's publish, when aligned)
            latest = slot.read()
            if align:
                aligned, must_wait = _aligned_start(t, latest, i, phases, tau_m, margin, window)
                if must_wait:  # before the observation is out, or too late into a tick: the next publish
                    t = yield from wait_until(aligned)
                    latest = slot.read()
                else:
                    t = aligned  # counts as started at the publish it follows
            if latest.seq == last_seq:  # this worker already acted on it: wait for the next tick
                deadline = latest.time + tau_m
                t = yield from after_tick(deadline, deadline + next_margin)
                continue
            last_seq = latest.seq
            obs, decision_key = inflight_obs(latest, i)
            # 3. infer: τ_θ measured (wall) or declared (virtual)
            started = begin(state, t)
            t0 = stopwatch()
            if timed is not None:  # a request lane of a batching server waits for its batch (queue + batch)
                decision = yield from timed(obs, latest.tick)
                t = clock.now()
                tau_theta = t - started
                inflight_known(decision_key, latest, decision.action, t)
            else:
                decision = policy.act(obs)
                # measured compute (none of the virtual clock's time) plus a declared latency
                tau_theta = clock.real(stopwatch() - t0) + decision.latency
                t = started + tau_theta
                inflight_known(decision_key, latest, decision.action, t)  # before a declared latency's wait
                if decision.latency > 0:  # a declared latency is waited out (measured compute has passed)
                    t = yield from wait_until(t)
            record_world_tau(state, started, tau_theta)
            # 4. the scheduler's rule: Algorithm 1 pads the cycle to τ̂_θmax; the others return 0
            pad = sched.after_inference(i, tau_theta)
            if phases is not None:  # the rule's estimate in whole ticks: this inference's aligned cycle
                phases.record(pacing.aligned_cycle_ticks(tau_theta, tau_m, margin=margin, window=window))
            if frees:
                # the scheduler holds the action: a timer submits it while this worker starts its next inference
                self._hold(state, decision.action, latest, tau_theta, t, pad, decision_key)
                continue
            if pad > 0:
                t = yield from wait_until(t + pad)
            if stopped():
                return
            # 5. submit (never a hair before a deadline where wake-ups jitter: `pacing.phase_guard`)
            if (guarded := pacing.phase_guard(t, latest.time, tau_m, guard)) != t:
                t = yield from wait_until(guarded)
            submit(queue, state, decision.action, latest, tau_theta, t, decision_key)
            if (deadline := pacing.deadline_at(t, origin, tau_m, grace)) is not None:
                # Submitted on a deadline: the host processes that tick `grace` later. Let it, then read the
                # observation it publishes, as a real agent would; `t` stays put (the next τ_θ counts from here).
                t = yield from after_tick(deadline, t)

    def _pacing_constants(self) -> tuple[float, float, float, float, float, float, float]:
        """τ_M, the clock's tick grace, the origin, and the margins a worker's waits keep: the phase guard's
        width, past a tick's publish, the alignment margin and its window. What differs between the clocks is
        theirs: the margins a real wake-up needs are none on the virtual clock (`Clock.real`)."""
        clock, tau_m = self.clock, self.session.tau_m
        guard = clock.real(pacing.phase_guard_width(tau_m))
        next_margin = clock.real(pacing.NEXT_OBSERVATION_MARGIN)
        return (
            tau_m,
            clock.tick_grace,
            self.session.origin,
            guard,
            next_margin,
            pacing.alignment_margin(tau_m),
            0.25 * tau_m,
        )

    def _begin_inference(self, state: _WorkerState, t: float) -> float:
        """Note an inference starting at ``t`` (the worker's phase and cycle); a killed worker dies here."""
        if state.killed:
            state.killed = False
            raise RuntimeError(f"worker {state.index} killed")
        if state.last_start is not None:
            state.cycle = t - state.last_start
        state.last_start = t
        return t

    def _record_world_tau(self, state: _WorkerState, started: float, tau_theta: float) -> None:
        """τ_θ as the world sees it: plus a late wake-up's lag (real time: none on the virtual clock)."""
        clock = self.clock
        world_tau = tau_theta + clock.real(max(0.0, clock.now() - started - tau_theta))
        state.world_taus.append(world_tau)
        state.call_waits.append(world_tau - tau_theta)

    def _submit_now(
        self, queue: Any, state: _WorkerState, action: Any, latest: Any, tau_theta: float, t: float, key: Any
    ) -> None:
        """Submit worker ``state``'s action computed on ``latest`` at ``t``, count it, and let an auto pool resize."""
        self._inflight_due(key, latest, t)
        queue.submit(
            action, obs_tick=latest.tick, episode=latest.episode, worker=state.index, tau_theta=tau_theta, submit_time=t
        )
        state.actions += 1
        state.tau_thetas.append(tau_theta)
        if self.resizable:
            self._maybe_resize(anchor=state.index)

    def _worker_policy(self, i: int) -> Any:
        """Worker ``i``'s policy: the one it had (a restart keeps it where it survived), else a new one."""
        policy = self._policies.get(i)
        if policy is None:
            policy = self._policies[i] = self.policy_factory(i)
        return policy

    def _waits(self, next_margin: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """A worker's two waits on the session's clock: until a time, and until just after a tick."""
        clock, tau_m = self.clock, self.session.tau_m

        def wait_until(target: float, wake: Wake | None = None) -> Generator[Wake, float, float]:
            return clock.resync(target, (yield target if wake is None else wake), tau_m)

        def after_tick(deadline: float, counted: float) -> Generator[Wake, float, float]:
            # the host first makes that tick's observation; the worker's time is then ``counted``
            return (yield from wait_until(counted, (self._tick_event(deadline) + next_margin, _AFTER_TICK)))

        return wait_until, after_tick

    def _first_wait(
        self, i: int, first: bool, resume_at: float | None, start_at: float | None, wait_until: Callable[..., Any]
    ) -> Generator[Wake, float, float]:
        """Worker ``i``'s time as its loop starts: after its initial stagger, or, restarted, at its old phase."""
        # every worker of a pool counts its initial stagger from the same instant, however long
        # its thread took to start (70 threads take ~5 ticks to spawn on a busy 2-core machine)
        t = self.clock.now() if start_at is None else start_at
        if first:
            start = self.scheduler.start_delay(i)  # the initial stagger
            if start > 0:
                t = yield from wait_until(t + start)
        elif resume_at is not None:
            self.scheduler.take_delay(i)  # delays owed to the dead worker are void: it resumes its old phase
            t = yield from wait_until(resume_at)
        return t

    # ------------------------------------------------------------------ the actions in flight
    def _inflight_obs(self, latest: Any, worker: int) -> tuple[Any, Any]:
        """What the policy sees of ``latest`` (with ``inflight``: the observation and the buffer at its
        tick) and the key its decision is recorded under."""
        if self.inflight is None:
            return latest.obs, None
        return self.inflight.augment(latest.obs, tick=latest.tick, episode=latest.episode), (
            worker,
            latest.episode,
            latest.tick,
        )

    def _inflight_known(self, key: Any, latest: Any, action: Any, submit_at: float) -> None:
        if key is not None:
            due = latest.tick + due_tick_of(submit_at, origin=latest.time, tau_m=self.session.tau_m)
            self.inflight.decided(key, obs_tick=latest.tick, episode=latest.episode, action=action, due_tick=due)

    def _inflight_due(self, key: Any, latest: Any, submit_at: float) -> None:
        if key is not None:
            self.inflight.moved(key, latest.tick + due_tick_of(submit_at, origin=latest.time, tau_m=self.session.tau_m))

    def _hold(
        self, state: _WorkerState, action: Any, latest: Any, tau_theta: float, t: float, pad: float, key: Any
    ) -> None:
        """A scheduler that frees its workers: the action computed at ``t`` is submitted ``pad``
        later by a timer (and, for an episode's catch-up, a copy earlier)."""
        self._inflight_due(key, latest, t + pad)
        state.tau_thetas.append(tau_theta)
        if self._copies_allowed:
            # episode catch-up: a copy fills a tick the new episode's grid has not reached
            early = self.scheduler.early_release(state.index, latest.episode)
            if early is not None:
                self.early_copies += 1
                self._release_at(t + early, action, latest, state, tau_theta, copy=True)
        self._release_at(t + pad, action, latest, state, tau_theta)
        if self.resizable:
            self._maybe_resize(anchor=state.index)

    def _release_at(
        self, when: float, action: Any, latest: Any, state: _WorkerState, tau_theta: float, copy: bool = False
    ) -> None:
        """Submit ``action`` (computed on ``latest``) at ``when``, without holding its worker
        (``copy``: an episode catch-up copy, not counted as a new action of the worker)."""

        def release() -> None:
            if not self._stop.is_set():
                self._submit(action, latest, state, tau_theta, when, copy)

        # a release a hair before a deadline goes just past it where wake-ups jitter (`pacing.phase_guard`)
        tau_m = self.session.tau_m
        at = pacing.phase_guard(when, self.session.origin, tau_m, self.clock.real(pacing.phase_guard_width(tau_m)))
        self._timing.call_at(at, release, isolate=True)

    def _submit(
        self, action: Any, latest: Any, state: _WorkerState, tau_theta: float, when: float, copy: bool = False
    ) -> None:
        self.session.queues[self.seat].submit(
            action,
            obs_tick=latest.tick,
            episode=latest.episode,
            worker=state.index,
            tau_theta=tau_theta,
            submit_time=when,
        )
        if not copy:
            state.actions += 1

    def _maybe_resize(self, anchor: int) -> None:
        """Grow or shrink N_I to the auto scheduler's recommendation, right after ``anchor``
        submitted (the scheduler places new workers relative to it)."""
        sched = self.scheduler
        with self._resize_lock:
            if self._stop.is_set():
                return
            old, new = sched.n_workers, sched.target_workers(self.session.tau_m)
            if new == old or anchor >= old:
                return
            sched.resize(new, anchor=anchor)
            self.events.append(
                WorkerEvent(self.clock.now(), anchor, "grew" if new > old else "shrank", f"{old}->{new}")
            )
            for m in range(old, new):
                if m < len(self.workers):
                    state = self.workers[m]
                    state.generation += 1  # a retired loop still finishing its inference exits
                    state.last_start = state.cycle = None
                else:
                    state = _WorkerState(m)
                    self.workers.append(state)
                self._spawn(state, first=True)

    @property
    def n_inference(self) -> int:
        """N_I now (it changes under the auto scheduler)."""
        return self.scheduler.n_workers

    def _tick_event(self, deadline: float) -> float:
        """Virtual time at which the host processes the tick due at ``deadline``
        (the same float expression the host uses, so the two compare equal)."""
        return pacing.nearest_deadline(deadline, self.session.origin, self.session.tau_m) + self.clock.tick_grace

    # ------------------------------------------------------------------ supervision
    def _spawn(self, state: _WorkerState, first: bool, start_at: float | None = None) -> None:
        resume_at = None
        cycle = state.cycle or 0.0  # > 0 once known: every start follows the previous by an inference or a tick
        if not first and state.last_start is not None and cycle > 0 and not self.frees_workers:
            # re-take the dead worker's place in the stagger
            resume_at = pacing.restart_phase(self.clock.now(), state.last_start, cycle)
            state.last_start = None
        process = self._loop(state, first, resume_at, start_at)
        state.handle = self._timing.spawn(process, name=f"worker-{state.index}", isolate=True)

    def start(self) -> "InferencePool":
        # build every policy first: a model process takes seconds to start, and a
        # worker should begin acting when the pool starts, not minutes of β later. Policies
        # built not waiting (`ProcessPolicy`/`RayPolicy` with wait=False) start together and
        # are waited for here, all of them, before any worker's stagger begins
        try:
            for state in self.workers:
                if state.index not in self._policies:
                    self._policies[state.index] = self.policy_factory(state.index)
            for policy in list(self._policies.values()):
                started = getattr(policy, "wait_started", None)
                if callable(started):
                    started()
        except BaseException:
            for policy in self._policies.values():
                self._release(policy)
            self._policies.clear()
            raise
        start_at = self.clock.now()
        for state in self.workers:
            self._spawn(state, first=True, start_at=start_at)
        self._monitor = self._timing.spawn(self._supervise(), name="supervisor", priority=2)
        return self

    def _check(self) -> None:
        for state in self.workers[: self.scheduler.n_workers]:  # retired workers ended on purpose
            handle = state.handle
            if isinstance(handle, _Dead):
                continue  # given up on: counted once, not again at every check
            error = handle.error
            if handle.alive or self._stop.is_set():
                continue
            state.deaths += 1
            detail = "".join(traceback.format_exception_only(error)).strip() if error else "exited"
            now = self.clock.now()
            self.events.append(WorkerEvent(now, state.index, "died", detail))
            policy = self._policies.pop(state.index, None)
            where, cause = _where_and_cause(policy, detail)
            self._release(policy)
            may = state.deaths <= self.max_restarts
            within = not may or self.budget is None or self.budget.spend(now)
            why = ""
            if may and within:
                self._spawn(state, first=False)
                self.events.append(WorkerEvent(now, state.index, "restarted"))
            else:
                state.handle = _Dead()
                why = "restarts are off" if self.max_restarts == 0 else f"it died {state.deaths} times"
                budget = self.budget  # set whenever `within` is False
                if not within and self.failure is None and budget is not None:
                    deaths = sum(w.deaths for w in self.workers)
                    why = f"the pool's workers died {deaths} times, more than {budget.describe()}"
                    self.failure = PartFailed(f"inference worker {state.index} kept dying: {why} (last: {detail})")
                    why += ": the run stops"
                self.events.append(WorkerEvent(now, state.index, "gave up", f"not restarted: {why}"))
            seat = "" if self._seat_name is None else f" of seat {self._seat_name}"
            death = Death(
                f"inference worker {state.index}{seat}",
                where,
                cause,
                restarted=not why,
                budget_left=None if self.budget is None else self.budget.left(now),
                budget="" if self.budget is None else self.budget.describe(),
                why_not=why,
                time=now,
            )
            self.deaths.append(death)
            self._say(death.line())

    def _supervise(self) -> TimedProcess:
        tau_m = self.session.tau_m
        while not self._stop.is_set():
            yield self._timing.now() + tau_m
            # not in the middle of a resize, which appends workers (no handle yet) or revives
            # retired ones (an exited thread's handle) before it starts them
            with self._resize_lock:
                self._check()

    def kill(self, worker: int) -> None:
        """Kill one worker as a fault would (tests and chaos drills)."""
        if not 0 <= worker < len(self.workers):
            raise ValueError(f"no worker {worker}; workers are 0..{len(self.workers) - 1}")
        policy = self._policies.get(worker)
        kill = getattr(policy, "kill", None)
        if callable(kill):  # ProcessPolicy, RayPolicy
            kill()  # the next act() fails: the worker dies like a crashed model process or actor
        else:
            self.workers[worker].killed = True  # dies at its next observation

    def stop(self) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.finish(timeout=2)
        self._timing.close()  # its timers: held actions not yet released stay unreleased
        for state in self.workers:
            h = state.handle
            # prompt: `_stop` interrupts their waits; one stuck inside a policy's act() is said, not piled up
            if h is not None and not h.finish(timeout=5):
                self.events.append(WorkerEvent(self.clock.now(), state.index, "stuck", "did not stop within 5 s"))
        for policy in self._policies.values():
            self._release(policy)
        self._policies.clear()
        self.session.annotate("workers" if self._seat_name is None else f"workers:{self._seat_name}", self.report())

    def _release(self, policy: Any) -> None:
        """Close a policy the pool is done with, keeping its remote-overhead samples."""
        if policy is None:
            return
        self._overhead_s.extend(getattr(policy, "overhead_s", ()))
        close = getattr(policy, "close", None)
        if close is not None:
            close()

    def report(self) -> dict[str, Any]:
        return {
            "n_workers": self.scheduler.n_workers,
            "workers_started": len(self.workers),
            "scheduler": self.scheduler.name,
            "actions": [w.actions for w in self.workers],
            "early_copies": self.early_copies,
            "deaths": [w.deaths for w in self.workers],
            "events": [(e.time, e.worker, e.kind, e.detail) for e in self.events],
            "tau_theta_mean_s": float(np.mean([t for w in self.workers for t in w.tau_thetas]))
            if any(w.tau_thetas for w in self.workers)
            else None,
            **self._world_taus(),
            **self._remote_overhead(),
            # Algorithms 1 and 2 on aligned ticks: the whole-tick cycle the workers hold phases of
            **({"tick_cycle": self._phases.cycle} if self._phases is not None else {}),
            # what a scheduler that tunes itself chose (fill: the cost of delay it fitted, its plan and cap)
            **self.scheduler.report(),
        }

    def _world_taus(self) -> dict[str, Any]:
        taus = [t for w in self.workers for t in w.world_taus]
        if not taus:
            return {}
        return {"tau_theta_world_mean_s": float(np.mean(taus)), "tau_theta_world_max_s": float(np.max(taus))}

    def _remote_overhead(self) -> dict[str, Any]:
        samples = self._overhead_s + [t for p in self._policies.values() for t in getattr(p, "overhead_s", ())]
        if not samples and not any(hasattr(p, "overhead_s") for p in self._policies.values()):
            return {}
        return {"remote_overhead_s": overhead_summary(samples, self.session.tau_m)}

    def __enter__(self) -> "InferencePool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _aligned_start(
    t: float, latest: Any, i: int, phases: TickPhases | None, tau_m: float, margin: float, window: float
) -> tuple[float, bool]:
    """Where worker ``i``'s inference due at ``t`` starts, aligned to a tick's publish (`pacing.align_start`)
    and, with ``phases``, not before this worker's next tick of the cycle; and whether it must wait for it."""
    start = pacing.align_start(t, latest.time, tau_m, margin=margin, window=window)
    if phases is not None:
        tick = latest.tick + round((start[0] - margin - latest.time) / tau_m)
        if (ahead := phases.next_start(i, tick) - tick) > 0:
            return start[0] + ahead * tau_m, True
    return start


def _where_and_cause(policy: Any, detail: str) -> tuple[str, str]:
    """Where a dead worker's policy ran and what ended it: a model process's pid and its exit (a signal,
    an exit code), else this process's thread and the error its loop raised."""
    pid = getattr(policy, "pid", None)
    if not isinstance(pid, int):
        return in_this_process(), detail
    node = getattr(policy, "node_id", None)  # a Ray actor: its node, and the error Ray gave
    where = f"pid {pid}" if not isinstance(node, str) else f"pid {pid} on node {node[:8]}"
    ended = policy.exit_cause() if callable(getattr(policy, "exit_cause", None)) else None
    return where, detail if ended is None else ended


class _Dead:
    """A worker given up on."""

    alive = False
    error = None

    def finish(self, timeout: float | None = None) -> bool:
        return True


# ----------------------------------------------------------------------------- process backend
