"""The CUDA calls of the serving path and the device learner, in one place (docs/gpu.md).

`TorchForward` (`nonstop.inference.device`) and the device learner (`nonstop.learning.devicelearner`)
make every stream, event, graph and device call through an ops object: `CudaOps` on a CUDA device,
`HostOps` (every call a no-op) elsewhere. A test passes a fake with the same methods, so the order of
those calls (the device set in each thread, a capture on the server's own stream in thread-local
mode from one shared pool, the server waiting on the learner's version event) is checked on a
machine without CUDA. torch is imported when called.

The rules the serving path keeps (each named where it is kept):

* the device is set (``torch.cuda.set_device``) in every thread that touches ``cuda:N`` before its
  first CUDA call (`CudaOps.set_device`: the server's thread, the learner's thread, the builder's);
* the server's forward passes, uploads and captures run on a stream of the server's own
  (`CudaOps.stream`), never the default stream; the device learner runs on another;
* a new version crosses from the learner's stream to the server's by an event the server's stream
  waits on (`wait`), and the learner's next write waits on the event the server's copy recorded;
* graphs are captured with ``capture_error_mode="thread_local"`` from one memory pool shared by every
  size (`graph_pool`, `capture`): another thread's allocation during a capture is not an error.

>>> ops = HostOps()
>>> ops.stream() is None and ops.event() is None, ops.is_cuda
(True, False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import torch

__all__ = ["HostOps", "CudaOps", "device_ops", "is_out_of_memory", "VersionHandoff", "ieee_fp32"]


class HostOps:
    """The ops of a device without streams (the CPU): every call does nothing, pinned memory is plain."""

    is_cuda: Final[bool] = False

    def set_device(self) -> None:
        """Make this ops' device the current one in the calling thread."""

    def stream(self) -> Any:
        return None

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def current_stream(self) -> Any:
        return None

    def event(self, timing: bool = False) -> Any:
        return None

    def record(self, event: Any, stream: Any = None) -> None:
        """Record ``event`` on ``stream`` (the current stream when None)."""

    def wait(self, event: Any, stream: Any = None) -> None:
        """Make ``stream`` (the current one when None) wait for ``event``."""

    def elapsed_s(self, start: Any, end: Any) -> float | None:
        """Seconds between two recorded timing events (None without events)."""
        return None

    def graph_pool(self) -> Any:
        return None

    def graph(self) -> Any:
        raise RuntimeError("CUDA graphs need a CUDA device")

    def capture(self, graph: Any, pool: Any, stream: Any, fn: Callable[[], Any]) -> Any:
        """Capture ``fn()`` into ``graph`` on ``stream`` from ``pool``; returns its (static) output, which
        each ``graph.replay()`` rewrites."""
        raise RuntimeError("CUDA graphs need a CUDA device")

    def pinned(self, n: int, dtype: "torch.dtype") -> "torch.Tensor":
        import torch

        return torch.empty(n, dtype=dtype)

    def synchronize(self) -> None:
        """Wait for every stream of the device."""

    def empty_cache(self) -> None:
        """Give the allocator's cached blocks back (after an out-of-memory)."""


class CudaOps(HostOps):
    """The real calls for ``device`` (a ``torch.device`` of type cuda, index resolved)."""

    is_cuda: Final[bool] = True  # type: ignore[misc]  # the CUDA case of HostOps' flag

    def __init__(self, device: "torch.device") -> None:
        import torch

        self.device = device if device.index is not None else torch.device("cuda", torch.cuda.current_device())

    def set_device(self) -> None:
        import torch

        torch.cuda.set_device(self.device)

    def stream(self) -> Any:
        import torch

        return torch.cuda.Stream(self.device)

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        import torch

        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def current_stream(self) -> Any:
        import torch

        return torch.cuda.current_stream(self.device)

    def event(self, timing: bool = False) -> Any:
        import torch

        return torch.cuda.Event(enable_timing=timing)

    def record(self, event: Any, stream: Any = None) -> None:
        event.record(stream if stream is not None else self.current_stream())

    def wait(self, event: Any, stream: Any = None) -> None:
        (stream if stream is not None else self.current_stream()).wait_event(event)

    def elapsed_s(self, start: Any, end: Any) -> float | None:
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3

    def graph_pool(self) -> Any:
        import torch

        return torch.cuda.graph_pool_handle()

    def graph(self) -> Any:
        import torch

        return torch.cuda.CUDAGraph()

    def capture(self, graph: Any, pool: Any, stream: Any, fn: Callable[[], Any]) -> Any:
        import torch

        with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
            return fn()

    def pinned(self, n: int, dtype: "torch.dtype") -> "torch.Tensor":
        import torch

        return torch.empty(n, dtype=dtype).pin_memory()

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)

    def empty_cache(self) -> None:
        import torch

        torch.cuda.empty_cache()


def device_ops(device: "torch.device") -> HostOps:
    """`CudaOps` for a CUDA device, `HostOps` for any other."""
    return CudaOps(device) if device.type == "cuda" else HostOps()


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the device running out of memory (torch's error, or its message)."""
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


class VersionHandoff:
    """Weights written on one stream (a learner's) and read on others (a server's copy, a checkpoint's
    snapshot), ordered by events rather than by sharing a stream: a writer records ``written`` after each
    version and, before its next write, waits for every reader's last read; a reader waits for
    ``written`` before it reads and records its own event after. Everything a no-op off CUDA.

    >>> h = VersionHandoff(HostOps()); h.before_write(); h.after_write(); h.before_read(); h.after_read("server")
    """

    def __init__(self, ops: HostOps) -> None:
        self.ops = ops
        self.written = ops.event()
        self._reads: dict[str, Any] = {}

    def before_write(self) -> None:
        """On the writer's stream: wait until every reader is done with the last version."""
        for event in tuple(self._reads.values()):
            self.ops.wait(event)

    def after_write(self) -> None:
        """On the writer's stream: a new version is written."""
        if self.written is not None:
            self.ops.record(self.written)

    def before_read(self) -> None:
        """On a reader's stream: wait for the newest version to be written."""
        if self.written is not None:
            self.ops.wait(self.written)

    def after_read(self, reader: str) -> None:
        """On a reader's stream: ``reader`` is done reading (the writer's next write waits for it)."""
        event = self._reads.get(reader)
        if event is None:
            event = self._reads[reader] = self.ops.event()
        if event is not None:
            self.ops.record(event)


@contextlib.contextmanager
def ieee_fp32() -> Any:
    """fp32 as IEEE fp32 inside: TF32 off for cuDNN's convolutions and CUDA's matmuls (a reference to
    compare a lower precision with, or a gradient to compare across devices), restored after.

    >>> import torch
    >>> with ieee_fp32():
    ...     torch.backends.cudnn.allow_tf32
    False
    """
    import torch

    was = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = was
