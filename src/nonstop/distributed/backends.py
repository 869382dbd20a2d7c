"""Where inference workers run, checked at the door (no Ray import unless ``ray`` is asked for).

* ``thread``  — threads of this process (latency policies: they sleep, they use no CPU);
* ``process`` — one process per worker on this machine (real torch models);
* ``ray``     — one Ray actor per worker, on any node of a Ray cluster (`nonstop.distributed.ray_backend`).

>>> check_backend("thread")
'thread'
>>> check_backend("gpu")
Traceback (most recent call last):
...
nonstop.distributed.backends.BackendUnavailable: unknown backend 'gpu': use one of thread, process, ray
"""

from __future__ import annotations

import socket

__all__ = [
    "BACKENDS",
    "LEARNER_BACKENDS",
    "BackendUnavailable",
    "check_backend",
    "check_learner_backend",
    "check_ray_address",
    "RAY_INSTALL_HINT",
]

BACKENDS = ("thread", "process", "ray")
#: where wall-clock learners run: spawned processes on this host, or Ray actors on any node
LEARNER_BACKENDS = ("process", "ray")
RAY_INSTALL_HINT = 'pip install -e ".[ray]" (or pip install ray)'


class BackendUnavailable(ValueError):
    """A backend that cannot run here: unknown, not installed, or a cluster that does not answer.

    A ``ValueError`` so the CLI prints it as one line, before any run directory exists."""


def check_backend(backend: str, *, ray_address: str | None = None, clock: str = "wall") -> str:
    """``backend`` if it can run here, else a one-line `BackendUnavailable` naming what to do.

    For ``ray``: Ray must be importable, the clock must be the wall clock (real remote calls do
    not mix with simulated time), and ``ray_address`` (``host:port`` of a running cluster; None
    or ``"local"`` starts a local Ray) must answer.
    """
    if backend not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend != "ray":
        if ray_address is not None:
            raise BackendUnavailable(
                f"--ray-address {ray_address!r} needs --backend ray or --learner-backend ray (got --backend {backend})"
            )
        return backend
    if clock != "wall":
        raise BackendUnavailable(
            "backend 'ray' runs real remote calls, which do not mix with the virtual clock: use --clock wall"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        raise BackendUnavailable(f"backend 'ray' needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    if ray_address not in (None, "local"):
        check_ray_address(ray_address)
    return backend


def check_learner_backend(
    backend: str, *, ray_address: str | None = None, clock: str = "wall", interaction: str = "staggered"
) -> str:
    """``backend`` for the learners if they can run there, else a one-line `BackendUnavailable`.

    >>> check_learner_backend("process")
    'process'
    >>> check_learner_backend("ray", clock="virtual")
    Traceback (most recent call last):
    ...
    nonstop.distributed.backends.BackendUnavailable: --learner-backend ray runs real remote calls, which do not mix with the virtual clock: use --clock wall
    """
    if backend not in LEARNER_BACKENDS:
        raise BackendUnavailable(f"unknown learner backend {backend!r}: use one of {', '.join(LEARNER_BACKENDS)}")
    if backend == "process":
        return backend
    if clock != "wall":
        raise BackendUnavailable(
            "--learner-backend ray runs real remote calls, which do not mix with the virtual clock: use --clock wall"
        )
    if interaction != "staggered":
        raise BackendUnavailable(
            f"--learner-backend ray runs the learners of a staggered run; --interaction {interaction} learns inside "
            "its own loop on this host: use --interaction staggered, or leave out --learner-backend"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        raise BackendUnavailable(
            f"--learner-backend ray needs Ray, which is not installed: {RAY_INSTALL_HINT}"
        ) from None
    if ray_address not in (None, "local"):
        check_ray_address(ray_address)
    return backend


def check_ray_address(address: str, *, timeout: float = 3.0) -> tuple[str, int]:
    """``(host, port)`` of a Ray cluster's GCS that accepts a connection, else `BackendUnavailable`.

    >>> check_ray_address("nonsense")
    Traceback (most recent call last):
    ...
    nonstop.distributed.backends.BackendUnavailable: --ray-address 'nonsense' is not HOST:PORT (the head's GCS address, e.g. 127.0.0.1:6379)
    """
    host, sep, port_text = str(address).removeprefix("ray://").rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BackendUnavailable(
            f"--ray-address {address!r} is not HOST:PORT (the head's GCS address, e.g. 127.0.0.1:6379)"
        )
    port = int(port_text)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise BackendUnavailable(
            f"no Ray cluster answers at {host}:{port} ({exc.strerror or exc}): start one with "
            f"`ray start --head --port {port}`, or leave out --ray-address to start a local Ray"
        ) from None
    return host, port
