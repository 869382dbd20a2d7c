"""The ``device`` learner backend (``--learner-backend device``): one learner whose parameters, Adam
moments and target network live on ``--device``, on either clock (`nonstop.learning.devicelearner`).

The run's `DeviceStatePart` holds the device's `DeviceTrainingState`: built by whoever needs it first
(the batching server's weights refresh, or the learners), uploaded once from the host's `TrainingState`
(after a resume has restored it), and written back to the host only when someone reads the host's copy:
the run's `LearningCore` calls it before a checkpoint or a self-play snapshot (`add_host_sync`), and
the learners' stop writes it at the end of the run.

Where the new weights go: the batching server of this process (``--backend batched`` or
``batched_process``) copies θ from the device state once per version (`DeviceRefresh`: a device copy,
no host memory in between). Workers that read `SharedWeights` (``--backend thread`` or ``process``)
get each version published there by the learner: one host copy a version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nonstop.experiment.run import Part
from nonstop.experiment.registry import constraint

if TYPE_CHECKING:
    import torch

    from nonstop.experiment.run import Run
    from nonstop.learning.devicelearner import DeviceLearners, DeviceTrainingState
    from nonstop.realtime.lifeline import RestartBudget

__all__ = ["device_learners", "device_state_of", "DeviceStatePart", "DeviceRefresh"]


class DeviceStatePart(Part):
    """The run's device training state as a part: its report in ``summary.json`` under ``device_learner``."""

    name = "device_state"

    def __init__(self, dstate: "DeviceTrainingState", run: "Run") -> None:
        self.dstate = dstate
        self._state, self._weights = run.state, run.weights

    def sync_host(self) -> None:
        """Write the device's newest version to the host's `TrainingState` and `SharedWeights` (if newer)."""
        if not self._state.closed:
            self.dstate.to_host(self._state, self._weights)

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        return {"device_learner": self.dstate.report()}


def device_state_of(run: "Run") -> "DeviceTrainingState":
    """The run's device training state, uploaded from the host's the first time it is asked for."""
    from nonstop.learning.devicelearner import DeviceTrainingState

    part = run.part("device_state")
    if part is None:
        part = DeviceStatePart(DeviceTrainingState.from_host(run.state, run.cfg.device), run)
        run.parts.append(part)  # appended: a start loop in progress only calls its no-op start
        run.learning.add_host_sync(part.sync_host)
    return part.dstate


class DeviceRefresh:
    """The batching server's weights refresh where the learner is on the device: before a batch, θ is
    copied into the server's model once per version (`DeviceTrainingState.copy_into`)."""

    def __init__(self, dstate: "DeviceTrainingState") -> None:
        self.dstate = dstate
        self.version = -1
        #: the versions the model took, in order (a test reads that the server follows each one)
        self.loaded: list[int] = []

    def __call__(self, model: "torch.nn.Module") -> bool:
        """Whether a new version was copied (the forward recasts its serving copy only then)."""
        if self.dstate.version == self.version:
            return False
        self.version = self.dstate.copy_into(model)
        self.loaded.append(self.version)
        return True


def device_learners(run: "Run", budget: "RestartBudget") -> "DeviceLearners":
    """One learner on ``--device`` (N_L = 1: `TrainConfig` refuses more), on the run's clock."""
    from nonstop.experiment.backends import learner_settings, segments_of
    from nonstop.learning.devicelearner import DeviceLearner, DeviceLearners

    cfg = run.cfg
    learner = DeviceLearner(
        learner_settings(run),
        device_state_of(run),
        segments_of(run),
        seed=cfg.seed * 7,  # learner 0's sampling seed, as on the host
        publish_host=not constraint("policy_backend", cfg.inference_backend).takes_device_weights,
    )
    tau_l = cfg.tau_l if cfg.tau_l is not None else run.tau_m
    return DeviceLearners(
        learner, run.world.clock, run.tau_m, tau_l=tau_l, mode=cfg.learner_mode, restart_budget=budget
    )
