"""The learning core of a run: the algorithm's parameters, the replay, and the recorder that fills it.

Built before the world (the host's recorder writes the learner's seat into the replay), it owns
the shared memory that learners and inference workers read: `ReplayBuffer`, `TrainingState`
(master parameters, Adam moments, target network) and `SharedWeights` (the published version and
the algorithm's exploration figure, `Algorithm.exploration`). It knows the algorithm only through
`nonstop.learning.algos.Algorithm`. Its checkpoint state (flat vectors, whatever the algorithm) is the ``nonstop.train/1`` format's learning keys, unchanged since
that format was introduced, so runs written before the composition resume after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nonstop.experiment.run import Part
from nonstop.learning.optim import init_training
from nonstop.learning.learners import Learner, LearnerSettings, Segments
from nonstop.learning.inflight import in_flight_recorder
from nonstop.learning.replay import ReplayBuffer
from nonstop.learning.weights import SharedWeights, TrainingState

if TYPE_CHECKING:
    from nonstop.experiment.run import Run

__all__ = ["LearningCore"]


class LearningCore(Part):
    """Parameters, replay and recorder of a run; ``close`` unlinks their shared memory."""

    name = "learning"

    def __init__(self, run: "Run") -> None:
        import torch

        cfg, spec = run.cfg, run.spec
        #: what learns, and its settings (`TrainConfig.algo_settings`, resolved)
        self.algorithm = run.algorithm
        self.settings: Any = run.settings
        #: what the learner's network takes (the world's observation, widened under ``--agent-id``)
        self.obs_shape, self.action_space = spec.model_obs_shape, spec.action_space
        self.seed = cfg.seed
        self.device = cfg.device  # the learners' (`Learner`): their networks and batches live there
        torch.manual_seed(cfg.seed)
        if cfg.clock == "virtual":
            # everything shares this process: one torch thread each avoids oversubscribing
            # the cores that small networks cannot use anyway
            torch.set_num_threads(1)
        model = self.algorithm.build_model()
        n_params = sum(p.numel() for p in model.parameters())
        self._unlink: list[Any] = []
        try:
            self.replay = ReplayBuffer.create(
                capacity=self.settings.replay_capacity,
                obs_shape=spec.obs_shape,  # the world's frames; the agent's id is added as it samples
                dtype=spec.obs_space.dtype,
                action_shape=self.algorithm.action_shape,
                agent_id=spec.agent_id,
                landing_states=self.algorithm.needs_landing_states,  # BPQL's critic: each action's own state
            )
            self._unlink.append(self.replay.unlink)
            self.state = TrainingState.create(n_params)
            self._unlink.append(self.state.unlink)
            self.weights = SharedWeights.create(n_params)
            self._unlink.append(self.weights.unlink)
        except BaseException:
            self.close()
            raise
        init_training(model, self.state, self.weights)
        self.weights.exploration = self.algorithm.exploration(0, self.state.params)
        history = max(256, 4 * math.ceil(run.latency.max_hint / spec.tau_m) + 64)
        #: ``--delay-aware``: the learner's pool's action buffer, which the recorder reads (None: off)
        self.inflight, self.recorder = in_flight_recorder(
            run.spec.inflight_k,
            self.action_space,
            self.replay,
            gamma=self.settings.gamma,
            history=history,
            action_start=self.algorithm.action_start,
            framing=self.algorithm.reward_framing,
        )
        #: whether `load_state_dict` found the replay in the checkpoint
        self.replay_restored = False
        #: called before the host's parameters are read (a learner that keeps them elsewhere writes them back)
        self._host_syncs: list[Callable[[], None]] = []
        #: (updates, transitions written) when the run stopped, for `summary` (the shared memory is gone by then)
        self._end_counts: tuple[int, int] | None = None

    def add_host_sync(self, sync: Callable[[], None]) -> None:
        """Have ``sync()`` bring the host's `TrainingState` and `SharedWeights` up to date before they are
        read here (a checkpoint, a self-play snapshot): a device learner writes its newest version back."""
        self._host_syncs.append(sync)

    def sync_host(self) -> None:
        for sync in self._host_syncs:
            sync()

    def learner(self, i: int) -> Learner:
        """Learner ``i`` of this run (each with its own sampling seed)."""
        settings = LearnerSettings(self.obs_shape, self.action_space, self.settings, device=self.device)
        return Learner(i, settings, Segments(self.state, self.weights, self.replay), seed=self.seed * 7 + i)

    def current_params(self) -> np.ndarray:
        """One whole published version of the parameters, even while learners publish."""
        self.sync_host()
        params = np.empty(self.weights.n_params, np.float32)
        self.weights.read_into(params)
        return params

    # ------------------------------------------------------------------ the part's hooks
    def notes(self, run: "Run") -> list[str]:
        """What this run's budget cannot reach, said before the first tick: fewer transitions than
        learning starts at (a one-seat world writes at most one a tick), a schedule that outlasts it."""
        ticks = math.ceil(run.cfg.seconds / run.tau_m)
        starts = self.settings.learning_starts
        lines = []
        if run.seats is None and ticks < starts:
            lines.append(
                f"this run's {ticks:,} ticks give at most {ticks:,} transitions, fewer than the {starts:,} learning "
                f"waits for: it will make no update; --learning-starts {max(2, self.settings.batch_size, ticks // 10):,} "
                f"(or a longer --seconds) lets it learn"
            )
        return lines + self.algorithm.budget_notes(ticks)

    def stop(self) -> None:
        if not self.state.closed:  # what `summary` says of a run that never learned, read before the unlink
            self._end_counts = (int(self.state.updates), int(self.replay.transitions_written))

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        if self._end_counts is None or self._end_counts[0] != 0:
            return {}
        written = self._end_counts[1]
        starts = max(self.settings.learning_starts, 2)
        if written < starts:
            why = (
                f"the replay got {written:,} transitions, fewer than the {starts:,} learning starts at: lower "
                f"--learning-starts or raise --seconds"
            )
        else:
            why = f"the replay held {written:,} transitions (learning starts at {starts:,}) but no learner updated"
        return {"no_updates_reason": why}

    def before_slice(self, run: "Run") -> None:
        # the figure follows the run's ticks (an annealed ε, resumes included) or θ (a learned α)
        self.weights.exploration = self.algorithm.exploration(run.env_ticks, self.state.params)

    def close(self) -> None:
        while self._unlink:
            self._unlink.pop()()

    def state_dict(self, *, include_replay: bool) -> dict[str, Any]:
        import torch

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.array(a, copy=True))

        self.sync_host()
        state = self.state
        snap: dict[str, Any] = {
            "updates": state.updates,
            "target_version": state.target_version // 2 * 2,
            "params": t(self.current_params()),
            "adam_m": t(state.adam_m),
            "adam_v": t(state.adam_v),
            "target": t(state.target),
        }
        if include_replay:  # taken while the host may write: see ReplayBuffer.snapshot
            snap["replay"] = {name: torch.from_numpy(a) for name, a in self.replay.snapshot().items()}
        return snap

    def load_state_dict(self, snap: dict[str, Any]) -> None:
        state = self.state
        for name, into in (
            ("params", state.params),
            ("adam_m", state.adam_m),
            ("adam_v", state.adam_v),
            ("target", state.target),
        ):
            src = snap[name].numpy()
            if src.shape != state.params.shape:
                raise ValueError(f"checkpoint {name} has {src.shape[0]} numbers, this model {state.params.shape[0]}")
            into[:] = src
        state.restore_counts(updates=int(snap["updates"]), target_version=int(snap["target_version"]))
        self.weights.publish(state.params)
        replay = snap.get("replay")
        if replay is not None and replay["frames"].shape == self.replay.frames.shape:
            self.replay.restore({name: tensor.numpy() for name, tensor in replay.items()})
            self.replay_restored = True
        else:
            # learners pace themselves by updates per transition: count only the updates made
            # on this (empty) replay, or they would wait for as many transitions as all earlier updates
            state.mark_update_base(int(snap["updates"]))
            self.replay_restored = False
