"""What drives the learner's seat (the registry's ``driver`` entries, chosen by ``interaction``).

* `StaggeredDriver` — N_I inference workers under a scheduler (Algorithm 1 or 2, quantile hold,
  auto) act while N_L learners update asynchronously; nothing learning does ever delays an action.
* `SequentialDriver` — the paper's two sequential baselines, one loop that infers and learns in
  turn: ``infer_then_learn`` (acts every τ_θ + τ_L) and ``learn_then_infer`` (learns, then acts on
  the observation read before learning, so each action is τ_L + τ_θ stale; Travnik et al.).

Where the workers' policies and the learners run is not decided here: the run's policy and
learner backends are (`nonstop.experiment.registry`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final

from nonstop.experiment.run import Part
from nonstop.experiment.registry import lookup
from nonstop.learning.learners import apply
from nonstop.realtime.clock import TimedProcess, Wake
from nonstop.realtime.tickcolumns import SOURCE_AGENT

if TYPE_CHECKING:
    from nonstop.experiment.run import Run

__all__ = ["StaggeredDriver", "SequentialDriver", "InferencePart", "LearnersPart", "SequentialLearningAgent"]

_AFTER_TICK: Final = 2  # virtual priority: wake after the host's tick at the same instant
_NEXT_OBSERVATION: Final = 2e-4  # on the wall clock, how long after a deadline its observation is surely out


class InferencePart(Part):
    """An `InferencePool` driving one seat: N_I workers, each with a policy from ``policy(i)``."""

    def __init__(
        self,
        name: str,
        policy: Callable[[int], Any],
        n_inference: int | str,
        *,
        seat: str | None,
        mark_start: bool = False,
        inflight: Any = None,
    ) -> None:
        self.name, self.policy, self.n_inference, self.seat = name, policy, n_inference, seat
        self.mark_start = mark_start
        self.inflight = inflight  # the learner's action buffer (--delay-aware), else None
        self.pool: Any = None
        self._fed = 0  # tick-log rows shown to a scheduler that learns from rewards
        self._next_feed = 0.0

    def start(self, run: "Run") -> None:
        from nonstop.inference.workers import InferencePool

        from nonstop.experiment.seating import scheduler

        rule = scheduler(run.cfg, self.n_inference)  # its name, or built with the run's scheduler settings
        n_inference = None if not isinstance(rule, str) else self.n_inference
        self.pool = InferencePool(
            run.world,
            self.policy,
            rule,
            n_inference=n_inference,
            restart_budget=run.restart_budget(),
            seat=self.seat,
            inflight=self.inflight,
        )
        self.pool.start()
        if self.mark_start:  # the world ticked (β) while the workers started: the summary says how long
            run.world.annotate("agents_started_at_tick", int(run.world.slot.read().tick))

    def before_slice(self, run: "Run") -> None:
        self._show_rewards(run)

    def _show_rewards(self, run: "Run") -> None:
        """Show a scheduler that learns from rewards (``observe_reward``: `fill` fits the cost of delay,
        p_minimax, to them) each new tick of the log: its reward, and the applied action's delay (None
        on β's ticks). Only the first seat's columns are read (the learner's in a solo or self-play
        run); on the wall clock the log is read as far as it reached disk, at most every 2 s of its
        time (the virtual clock's log is whole at every slice: `Clock.real` of 2 s is none)."""
        scheduler = self.pool.scheduler if self.pool is not None else None
        if scheduler is None or not scheduler.learns_from_rewards:
            return
        if self.seat is not None and run.world.seat_index(self.seat) != 0:
            return
        clock = run.world.clock
        if clock.now() < self._next_feed:
            return
        self._next_feed = clock.now() + clock.real(2.0)
        observe = scheduler.observe_reward
        try:
            log = run.world.tick_log
        except RuntimeError:  # a wall-clock world that streams no log: nothing to show until it stops
            return
        fed = self._fed
        new = len(log) - fed
        if new <= 0:
            return
        rewards, sources, delays = (log.tail(c, new) for c in ("reward", "source", "delay"))
        for reward, source, delay in zip(rewards.tolist(), sources.tolist(), delays.tolist()):
            observe(reward, int(delay) if source == SOURCE_AGENT and delay >= 1 else None)
        self._fed = fed + new

    @property
    def failure(self) -> BaseException | None:  # type: ignore[override]  # the pool's, read when asked
        return getattr(self.pool, "failure", None)

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()

    close = stop

    def processes(self) -> int:
        return self.n_inference if isinstance(self.n_inference, int) else 1

    def deaths(self) -> list[Any]:
        return list(getattr(self.pool, "deaths", []))


class LearnersPart(Part):
    """The run's N_L learners, built by the learner backend the config names."""

    name = "learners"

    def __init__(self) -> None:
        self.learners: Any = None

    def start(self, run: "Run") -> None:
        self.learners = lookup("learners", run.cfg.learner_placement)(run, run.restart_budget())
        try:
            self.learners.start()
        except BaseException:
            self.learners.stop()
            raise

    @property
    def failure(self) -> BaseException | None:  # type: ignore[override]  # the learners', read when asked
        return getattr(self.learners, "failure", None)

    def stop(self) -> None:
        if self.learners is not None:
            self.learners.stop()

    close = stop

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        return {} if self.learners is None else {"learners": self.learners.report()}

    def deaths(self) -> list[Any]:
        return list(getattr(self.learners, "deaths", []))

    def processes(self) -> int:
        return int(getattr(self.learners, "local_processes", 0))


def StaggeredDriver(run: "Run", *, seat: str | None) -> list[Part]:
    """Staggered workers on ``seat`` and the asynchronous learners beside them."""
    policy = lookup("policy_backend", run.cfg.inference_backend)
    return [
        InferencePart(
            "pool",
            lambda i: policy(run, i),
            run.n_inference,
            seat=seat,
            mark_start=True,
            inflight=run.learning.inflight,
        ),
        LearnersPart(),
    ]


def SequentialDriver(run: "Run", *, seat: str | None) -> list[Part]:
    """One loop that infers and learns in turn, in the order the config's ``interaction`` names."""
    return [SequentialPart(seat)]


class SequentialPart(Part):
    name = "agent"

    def __init__(self, seat: str | None) -> None:
        self.seat = seat
        self.agent: SequentialLearningAgent | None = None

    def start(self, run: "Run") -> None:
        self.agent = SequentialLearningAgent(run, order=run.cfg.interaction, tau_l=run.cfg.tau_l or 0.0)
        self.agent.start()

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()

    close = stop

    def processes(self) -> int:
        return 1


class SequentialLearningAgent:
    """The paper's two sequential baselines: one loop that infers and learns in turn."""

    def __init__(self, run: "Run", *, order: str, tau_l: float) -> None:
        self.run, self.order, self.tau_l = run, order, tau_l
        self.policy = lookup("policy_backend", run.cfg.inference_backend)(run, 0)
        self.learner = run.learning.learner(0)
        self._stop = False
        self._stopped = threading.Event()
        self.handle: Any = None

    def start(self) -> "SequentialLearningAgent":
        # on the wall clock a thread that sleeps, never spins (it shares the GIL); on the virtual one, simulated
        self.handle = self.run.world.clock.for_threads(self._stopped).spawn(self._loop(), name="sequential-agent")
        return self

    def stop(self) -> None:
        self._stop = True
        self._stopped.set()
        if self.handle is not None:
            self.handle.finish(timeout=10)
        close = getattr(self.policy, "close", None)  # a process-backed policy: reap its process
        if close is not None:
            close()

    def _learn(self, t: float) -> Generator[Wake, float, float]:  # a timed process's part; returns its time
        learner, run, clock = self.learner, self.run, self.run.world.clock
        out = learner.gradient() if learner.ready else None
        if out is not None:
            apply(run.state, run.weights, out[0], out[1], learner.rule)
        # an update takes what it took (the wall clock's time; none of the virtual clock's), then ``tau_l``;
        # with none given, τ_M stands in for an update the virtual clock cannot measure
        t = _caught_up(clock, t) + (
            self.tau_l if self.tau_l > 0 else clock.unmeasured(run.tau_m if out is not None else 0.0)
        )
        if t > clock.now():
            yield t
        return _caught_up(clock, t)

    def _loop(self) -> TimedProcess:
        from nonstop.realtime.clock import stopwatch

        world = self.run.world
        clock, slot, queue, tau_m = world.clock, world.slot, world.queue, world.tau_m
        t, last_seq = clock.now(), -1
        origin, grace = world.origin, clock.tick_grace
        timed = clock.timed_call(self.policy)  # a request lane of a batching server waits for its batch
        while not self._stop:
            # on a tick's deadline: let the host process that tick first, then read what it
            # publishes, as a real loop finishing just then would (`t` itself stays put)
            k = round((t - origin) / tau_m)
            due = origin + k * tau_m + grace  # the host's own expression for this tick's time
            if abs(t - (due - grace)) <= grace and clock.now() < due:
                yield (due, _AFTER_TICK)
            latest = slot.read()
            if latest.seq == last_seq:  # already acted on this one: wait for the next tick (its publish, where real)
                t = latest.time + tau_m
                yield (t + grace + clock.real(_NEXT_OBSERVATION), _AFTER_TICK)
                t = _caught_up(clock, t)
                continue
            last_seq = latest.seq
            if self.order == "learn_then_infer":
                t = yield from self._learn(t)
            started = t
            t0 = stopwatch()
            if timed is not None:
                decision = yield from timed(latest.obs, latest.tick)
                t = clock.now()
            else:
                decision = self.policy.act(latest.obs)
                t = started + clock.real(stopwatch() - t0) + decision.latency  # measured (wall) plus declared
                if t > clock.now():
                    yield t
            t = _caught_up(clock, t)
            queue.submit(
                decision.action,
                obs_tick=latest.tick,
                episode=latest.episode,
                worker=0,
                tau_theta=t - started,
                submit_time=t,
            )
            if self.order == "infer_then_learn":
                t = yield from self._learn(t)


def _caught_up(clock: Any, t: float) -> float:
    """A loop's own time ``t`` after a wait: the clock's now where time is real (the wait and the work
    took what they took), ``t`` itself on the virtual clock (exact sums of declared times)."""
    return t + clock.real(clock.now() - t)
