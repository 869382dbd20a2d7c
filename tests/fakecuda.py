"""A fake of `nonstop.inference.cudaops.CudaOps` for machines without CUDA: streams, events, a memory pool
and graphs that record who called them, from which thread, on which stream; a "graph" captures a
function and each replay runs it again into the same output tensor, so a forward served by replays
answers as the real one does. ``oom_at``: capturing a batch of that size or more runs out of memory."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from nonstop.inference.cudaops import HostOps


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class FakeEvent:
    def __init__(self, n: int, timing: bool) -> None:
        self.n, self.timing, self.at, self.stream = n, timing, None, None


class FakeGraph:
    def __init__(self) -> None:
        self.fn: Callable[[], Any] | None = None
        self.out: Any = None
        self.replays = 0

    def replay(self) -> None:
        assert self.fn is not None, "replay before capture"
        self.replays += 1
        with torch.no_grad():
            self.out.copy_(self.fn())


class FakeCudaOps(HostOps):
    is_cuda = True  # type: ignore[misc]

    def __init__(self, oom_at: int | None = None) -> None:
        self.oom_at = oom_at
        self.log: list[tuple[str, ...]] = []
        self.graphs: list[tuple[int, Any, Any, str]] = []  # (size, pool, stream, thread)
        self.pinned_tensors: list[torch.Tensor] = []
        self._local = threading.local()
        self._n = itertools.count()
        self.default = FakeStream("default")

    def _say(self, *what: Any) -> None:
        self.log.append((threading.current_thread().name, *(str(w) for w in what)))

    def set_device(self) -> None:
        self._say("set_device")

    def stream(self) -> FakeStream:
        s = FakeStream(f"stream{next(self._n)}")
        self._say("stream", s)
        return s

    @contextlib.contextmanager
    def use_stream(self, stream: Any) -> Iterator[None]:
        was = getattr(self._local, "stream", None)
        self._local.stream = stream if stream is not None else was
        try:
            yield
        finally:
            self._local.stream = was

    def current_stream(self) -> Any:
        return getattr(self._local, "stream", None) or self.default

    def event(self, timing: bool = False) -> FakeEvent:
        return FakeEvent(next(self._n), timing)

    def record(self, event: Any, stream: Any = None) -> None:
        event.at, event.stream = time.perf_counter(), stream or self.current_stream()
        self._say("record", event.n, event.stream)

    def wait(self, event: Any, stream: Any = None) -> None:
        self._say("wait", event.n, stream or self.current_stream())

    def elapsed_s(self, start: Any, end: Any) -> float | None:
        return end.at - start.at

    def graph_pool(self) -> str:
        pool = f"pool{next(self._n)}"
        self._say("graph_pool", pool)
        return pool

    def graph(self) -> FakeGraph:
        return FakeGraph()

    def capture(self, graph: Any, pool: Any, stream: Any, fn: Callable[[], Any]) -> Any:
        with torch.no_grad():
            out = fn()
        size = int(out.shape[0])
        if self.oom_at is not None and size >= self.oom_at:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {size} MiB")
        self._say("capture", size, pool, stream)
        self.graphs.append((size, pool, stream, threading.current_thread().name))
        graph.fn, graph.out = fn, out
        return out

    def pinned(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        t = torch.empty(n, dtype=dtype)
        self.pinned_tensors.append(t)
        return t

    def synchronize(self) -> None:
        self._say("synchronize")

    def empty_cache(self) -> None:
        self._say("empty_cache")
