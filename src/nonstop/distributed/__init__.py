"""Scale past one machine (docs/design.md §5): inference workers and learners as Ray actors.

The host, its channels and the pure schedulers stay on the driver next to the env, so per-tick
traffic stays on one host; only each worker's forward pass runs in a Ray actor (`RayPolicy`),
which may live on any node of the cluster; with ``--learner-backend ray`` the learners'
gradients are computed in Ray actors too (`ray_learners.RayLearners`). Ray is an optional
extra: ``pip install -e ".[ray]"``. Nothing here imports Ray until it is used.
"""

from nonstop.distributed.backends import (
    BACKENDS,
    LEARNER_BACKENDS,
    BackendUnavailable,
    check_backend,
    check_learner_backend,
)

__all__ = ["BACKENDS", "LEARNER_BACKENDS", "BackendUnavailable", "check_backend", "check_learner_backend"]
