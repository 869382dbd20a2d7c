"""Scale past one machine (DESIGN §5): inference workers as Ray actors.

The host, its channels and the pure schedulers stay on the driver next to the env, so per-tick
traffic stays on one host; only each worker's forward pass runs in a Ray actor (`RayPolicy`),
which may live on any node of the cluster. Ray is an optional extra: ``pip install -e ".[ray]"``.
Nothing here imports Ray until it is used.
"""

from nonstop.distributed.backends import BACKENDS, BackendUnavailable, check_backend

__all__ = ["BACKENDS", "BackendUnavailable", "check_backend"]
