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

import multiprocessing as mp
import threading
import traceback
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nonstop.inference import pacing
from nonstop.inference.inflight import due_tick_of
from nonstop.inference.phases import TickPhases
from nonstop.metrics.overhead import overhead_summary
from nonstop.policies.memory import DEFAULT_MIN_FREE, check_min_free
from nonstop.realtime.clock import Clock, TimedProcess, Wake, stopwatch
from nonstop.realtime.deaths import Death, exit_cause, in_this_process, tell
from nonstop.realtime.host import Session
from nonstop.realtime.lifeline import PartFailed, RestartBudget, hold_lifeline, reap

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

    ``align_to_ticks`` (default: on for staggered schedulers on the wall clock, off otherwise)
    starts each inference at a tick's publish: one the scheduler would start up to a quarter tick
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
        restart: bool = True,
        max_restarts: int = 100,
        restart_budget: RestartBudget | None = None,
        align_to_ticks: bool | None = None,
        seat: int | str | None = None,
        inflight: Any = None,
        say: Callable[[str], None] = tell,
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
        self.restart = restart
        if align_to_ticks is not None and not isinstance(align_to_ticks, bool):
            raise TypeError(f"align_to_ticks must be a bool or None, got {align_to_ticks!r}")
        # default: on for staggered workers on the wall clock (see the class docstring)
        # (a scheduler that frees its workers places starts on the tick grid itself)
        # (a clock that needs no margin past a publish wakes exactly: nothing to align against)
        staggered = scheduler.name not in ("sequential", "unstaggered") and not self.frees_workers
        wakes_late = self.clock.real(pacing.alignment_margin(session.tau_m)) > 0
        self.align_to_ticks = (staggered if align_to_ticks is None else align_to_ticks) and wakes_late
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
        self._say = say
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
        policy = self._policies.get(i)
        if policy is None:
            policy = self._policies[i] = self.policy_factory(i)
        tau_m, grace, origin = self.session.tau_m, clock.tick_grace, self.session.origin
        # what differs between the clocks is theirs: the margins a real wake-up needs are none on the
        # virtual clock (`Clock.real`), and a wait there ends exactly on time (`Clock.resync`)
        guard = clock.real(pacing.phase_guard_width(tau_m))
        next_margin = clock.real(pacing.NEXT_OBSERVATION_MARGIN)
        align = self.align_to_ticks
        margin, window = pacing.alignment_margin(tau_m), 0.25 * tau_m
        phases = self._phases
        timed = clock.timed_call(policy)  # a policy that waits as a timed process on this clock (a batching lane)

        def wait_until(target: float, wake: Wake | None = None) -> Generator[Wake, float, float]:
            return clock.resync(target, (yield target if wake is None else wake), tau_m)

        def after_tick(deadline: float, counted: float) -> Generator[Wake, float, float]:
            # the host first makes that tick's observation; the worker's time is then ``counted``
            return (yield from wait_until(counted, (self._tick_event(deadline) + next_margin, _AFTER_TICK)))

        # every worker of a pool counts its initial stagger from the same instant, however long
        # its thread took to start (70 threads take ~5 ticks to spawn on a busy 2-core machine)
        t = clock.now() if start_at is None else start_at
        if first:
            start = sched.start_delay(i)  # the initial stagger
            if start > 0:
                t = yield from wait_until(t + start)
        elif resume_at is not None:
            sched.take_delay(i)  # delays owed to the dead worker are void: it resumes its old phase
            t = yield from wait_until(resume_at)
        last_seq = -1
        while not self._stop.is_set():
            if i >= sched.n_workers or state.generation != generation:
                return  # retired by a resize (or superseded by a newer loop of this index)
            # 1. wait the delays other workers' new maxima pushed onto this one (on aligned ticks
            # Algorithms 1 and 2 hold phases instead: step 2 waits for this worker's tick)
            wait = sched.take_delay(i, now=t)
            if wait > 0 and phases is None:
                t = yield from wait_until(t + wait)
            if self.frees_workers and (deadline := pacing.deadline_at(t, origin, tau_m, grace)) is not None:
                t = yield from after_tick(deadline, t)  # a start on a deadline reads that tick's observation
            # 2. read the newest observation (on a tick's publish, when aligned)
            latest = slot.read()
            if align:
                aligned, must_wait = pacing.align_start(t, latest.time, tau_m, margin=margin, window=window)
                if phases is not None:  # not before this worker's next tick of the cycle
                    tick = latest.tick + round((aligned - margin - latest.time) / tau_m)
                    if (ahead := phases.next_start(i, tick) - tick) > 0:
                        aligned, must_wait = aligned + ahead * tau_m, True
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
            obs, decision_key = self._inflight_obs(latest, i)
            if state.killed:
                state.killed = False
                raise RuntimeError(f"worker {i} killed")
            # 3. infer: τ_θ measured (wall) or declared (virtual)
            started = t
            if state.last_start is not None:
                state.cycle = started - state.last_start
            state.last_start = started
            t0 = stopwatch()
            if timed is not None:  # a request lane of a batching server waits for its batch (queue + batch)
                decision = yield from timed(obs, latest.tick)
                t = clock.now()
                tau_theta = t - started
            else:
                decision = policy.act(obs)
                # measured compute (none of the virtual clock's time) plus a declared latency
                tau_theta = clock.real(stopwatch() - t0) + decision.latency
                t = started + tau_theta
                self._inflight_known(decision_key, latest, decision.action, t)  # before a declared latency's wait
                if decision.latency > 0:  # a declared latency is waited out (measured compute has passed)
                    t = yield from wait_until(t)
            if timed is not None:
                self._inflight_known(decision_key, latest, decision.action, t)
            # as the world sees it: plus a late wake-up's lag (real time: none on the virtual clock)
            world_tau = tau_theta + clock.real(max(0.0, clock.now() - started - tau_theta))
            state.world_taus.append(world_tau)
            state.call_waits.append(world_tau - tau_theta)
            # 4. the scheduler's rule: Algorithm 1 pads the cycle to τ̂_θmax; the others return 0
            pad = sched.after_inference(i, tau_theta)
            if phases is not None:  # the rule's estimate in whole ticks: this inference's aligned cycle
                phases.record(pacing.aligned_cycle_ticks(tau_theta, tau_m, margin=margin, window=window))
            if self.frees_workers:
                # the scheduler holds the action, not the worker: a timer submits it at its
                # release slot while this worker starts its next inference at once
                self._inflight_due(decision_key, latest, t + pad)
                self._hold(state, decision.action, latest, tau_theta, t, pad)
                continue
            if pad > 0:
                t = yield from wait_until(t + pad)
            if self._stop.is_set():
                return
            # 5. submit (never a hair before a deadline where wake-ups jitter: `pacing.phase_guard`)
            if (guarded := pacing.phase_guard(t, latest.time, tau_m, guard)) != t:
                t = yield from wait_until(guarded)
            self._inflight_due(decision_key, latest, t)
            queue.submit(
                decision.action,
                obs_tick=latest.tick,
                episode=latest.episode,
                worker=i,
                tau_theta=tau_theta,
                submit_time=t,
            )
            state.actions += 1
            state.tau_thetas.append(tau_theta)
            if self.resizable:
                self._maybe_resize(anchor=i)
            if (deadline := pacing.deadline_at(t, origin, tau_m, grace)) is not None:
                # Submitted on a deadline: the host processes that tick `grace` later. Let it,
                # then read the observation it publishes, as a real agent restarting at once
                # would; `t` stays put, so the next inference still counts from the submit.
                t = yield from after_tick(deadline, t)

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

    def _hold(self, state: _WorkerState, action: Any, latest: Any, tau_theta: float, t: float, pad: float) -> None:
        """A scheduler that frees its workers: the action computed at ``t`` is submitted ``pad``
        later by a timer (and, for an episode's catch-up, a copy earlier)."""
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
            may = self.restart and state.deaths <= self.max_restarts
            within = not may or self.budget is None or self.budget.spend(now)
            why = ""
            if may and within:
                self._spawn(state, first=False)
                self.events.append(WorkerEvent(now, state.index, "restarted"))
            else:
                state.handle = _Dead()
                why = "restarts are off" if not self.restart else f"it died {state.deaths} times"
                budget = self.budget  # set whenever `within` is False
                if self.restart and not within and self.failure is None and budget is not None:
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


def _policy_process(conn: Any, factory: Callable[[], Any], torch_threads: int | None, trim_above: int | None) -> None:
    import signal

    from nonstop.policies.memory import WorkingSetRelease

    hold_lifeline()  # a model process never outlives the pool that asked for it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    if torch_threads is not None:  # None: a policy with no model here (a remote lane) never imports torch
        try:
            import torch

            torch.set_num_threads(torch_threads)
        except ImportError:
            pass
    policy = factory()
    release = WorkingSetRelease(trim_above)
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            break
        try:
            conn.send(("ok", policy.act(msg)))
        except Exception:
            conn.send(("error", traceback.format_exc()))
        release.after_pass()  # the decision is out: the pass's working set goes back in the background
    release.close()


class ProcessPolicy:
    """A policy running in its own process (real models: one torch thread per
    process by default, so N_I processes use N_I cores, not N_I × all cores).

    ``factory`` must be picklable (a module-level function or a
    ``functools.partial`` of one). ``act`` ships the observation over a pipe
    (~100 µs, small next to a model's inference) and returns its `Decision`.
    After each pass the process hands its forward pass's working set back to the OS when it
    holds more than ``trim_above`` bytes free (`nonstop.policies.memory`; None: never), so N
    workers sharing one θ do not also keep N working sets. ``torch_threads=None``: the process never
    imports torch (a policy without a model, a `nonstop.inference.lanering.RemoteLane`).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        torch_threads: int | None = 1,
        start_timeout: float = 120.0,
        trim_above: int | None = DEFAULT_MIN_FREE,
        wait: bool = True,
    ) -> None:
        check_min_free(trim_above, "trim_above")  # at the door, not in the child
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_policy_process, args=(child, factory, torch_threads, trim_above), name="nonstop-policy", daemon=True
        )
        self._process.start()
        child.close()
        self.start_timeout = start_timeout
        self._ready = False
        self._lost = False  # its pipe closed under `act`: the process is dead or dying
        if wait:
            self.wait_started()

    def wait_started(self, timeout: float | None = None) -> "ProcessPolicy":
        """Block until the process has built its policy (``timeout``: ``start_timeout``). With
        ``wait=False`` N processes start together (`InferencePool.start` waits for all of them after
        spawning all): on N cores about one start's time, not N. A failed start stops the process
        and raises."""
        if self._ready:
            return self
        timeout = self.start_timeout if timeout is None else timeout
        try:
            if not self._conn.poll(timeout):
                raise TimeoutError(f"policy process did not start within {timeout:g}s")
            self._conn.recv()
        except (EOFError, OSError) as exc:
            self.close()
            raise RuntimeError(f"policy process {self._process.pid} died while building its policy") from exc
        except TimeoutError:
            self.close()
            raise
        self._ready = True
        return self

    def act(self, obs: np.ndarray) -> Any:
        if not self._ready:
            self.wait_started()
        try:
            self._conn.send(obs)
            kind, payload = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            self._lost = True
            raise RuntimeError(f"policy process {self._process.pid} died") from exc
        if kind == "error":
            raise RuntimeError(f"policy raised in its process:\n{payload}")
        return payload

    @property
    def pid(self) -> int | None:
        """The model process's pid."""
        return self._process.pid

    def exit_cause(self, wait: float = 1.0) -> str | None:
        """What ended the model process (`nonstop.realtime.deaths.exit_cause`): None while it runs; for
        one whose pipe closed (`act` saw it die), up to ``wait`` seconds for the kernel to finish its exit."""
        if not self._lost and self._process.is_alive():
            return None
        self._process.join(wait)
        code = self._process.exitcode
        return None if code is None else exit_cause(code)

    def kill(self) -> None:
        self._process.kill()

    def close(self) -> None:
        try:
            if self._process.is_alive():
                self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        reap(self._process, timeout=2)
        self._conn.close()
