"""The forward pass a batching server injects (docs/design.md §7), and where it runs.

Reading and placing ``--device``/``--dtype`` (`resolve_device`, `resolve_dtype`, `placement`, `to_device`,
`autocast`, `add_device_arguments`) is `nonstop.policies.placement`'s, below everything that builds a
model; this module re-exports it. `TorchForward` (`torch_forward`) turns a torch model into
the ``forward(batch) -> actions`` a `nonstop.inference.batching.BatchingServer` calls: the stacked
frames go to the device as bytes and are scaled by 1/255 there, the model runs under
``torch.inference_mode()`` (through a copy of its weights in the serving dtype, recast once per version;
channels-last memory on CUDA), and the argmax of each row comes back. With ``graph_sizes`` a batch is
padded to the next of those sizes, and on CUDA every size is captured as a CUDA graph before serving
(`TorchForward.prepare`) and replayed.
torch is imported when called.

>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
>>> forward = torch_forward(net, "cpu")
>>> forward(np.zeros((5, 2, 2), np.uint8)).shape
(5,)
"""

from __future__ import annotations

import copy
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nonstop.inference.cudaops import HostOps, device_ops, is_out_of_memory

from nonstop.policies.placement import (  # re-exported: placement is the policies' (below inference)
    DEVICE_GRAMMAR,
    DTYPES,
    add_device_arguments,
    autocast,
    parse_device,
    parse_dtype,
    placement,
    resolve_device,
    resolve_dtype,
    to_device,
    uses_pinned,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "resolve_device",
    "resolve_dtype",
    "parse_dtype",
    "DTYPES",
    "DEVICE_GRAMMAR",
    "uses_pinned",
    "to_device",
    "autocast",
    "frames_to_float",
    "padded_size",
    "TorchForward",
    "torch_forward",
    "placement",
    "parse_device",
    "default_graph_sizes",
    "add_device_arguments",
    "GraphOutOfMemory",
    "BatchTiming",
    "bind_flat",
    "flat_parameters",
]


def default_graph_sizes(device: "str | torch.device", max_batch: int) -> tuple[int, ...]:
    """The batch sizes a server captures as CUDA graphs: powers of two up to ``max_batch`` (and it) on
    CUDA, none elsewhere (padding buys nothing without a graph).

    >>> default_graph_sizes("cuda", 24), default_graph_sizes("cpu", 24)
    ((1, 2, 4, 8, 16, 24), ())
    """
    if str(device).split(":")[0] != "cuda":
        return ()
    sizes = {1 << i for i in range(max(1, int(max_batch)).bit_length()) if 1 << i <= max_batch}
    return tuple(sorted(sizes | {int(max_batch)}))


def frames_to_float(x: "torch.Tensor") -> "torch.Tensor":
    """A batch as the model takes it, laid out as the DQN learner lays it (`nonstop.learning.dqn`):
    ``uint8`` scaled by 1/255 where ``x`` is (the device: the host sends bytes); ``(b, H, W)`` gets a
    channel axis, ``(b, H, W, C)`` with ``C <= 4`` becomes ``(b, C, H, W)``; other dtypes are cast."""
    if x.dtype != _uint8():
        return x.float()
    x = x.float().div_(255.0)
    if x.ndim == 3:
        return x.unsqueeze(1)
    if x.ndim == 4 and x.shape[-1] <= 4 < x.shape[1]:
        return x.permute(0, 3, 1, 2)
    return x


def _uint8() -> Any:
    import torch

    return torch.uint8


def padded_size(b: int, sizes: Sequence[int]) -> int:
    """The smallest of ``sizes`` that holds ``b`` (``b`` itself when none does: run as it is).

    >>> padded_size(3, (1, 4, 16)), padded_size(4, (1, 4, 16)), padded_size(20, (1, 4, 16))
    (4, 4, 20)
    """
    return min((s for s in sizes if s >= b), default=b)


class GraphOutOfMemory(ValueError):
    """The device ran out of memory capturing the CUDA graph of a batch size: one line naming that size
    and the largest one that fits (None: not even the smallest)."""

    def __init__(self, size: int, fits: int | None) -> None:
        self.size, self.fits = int(size), fits
        hint = (
            f"the largest batch that fits is {fits} (use --max-batch {fits})"
            if fits is not None
            else "not even the smallest batch size fits: a smaller model (--k) or another device"
        )
        super().__init__(f"out of device memory capturing the CUDA graph for a batch of {size}: {hint}")


@dataclass(frozen=True, slots=True)
class BatchTiming:
    """What one call of a `TorchForward` took: ``size`` the padded size it ran at, ``host_s`` host wall
    time (frames in to actions back), ``device_s`` the device's own time between two CUDA events (None
    off CUDA), ``measurable`` False where the call captured a graph (its time is no replay's)."""

    size: int
    host_s: float
    device_s: float | None
    measurable: bool


_FLATS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def bind_flat(model: "torch.nn.Module") -> "torch.Tensor | None":
    """Make ``model``'s parameters views into one flat tensor (``parameters()`` order, values kept) and
    return it: a new version then crosses into the model as one flat copy (`flat_parameters`). None for a
    model without parameters, or whose parameters differ in dtype or device (left as they are)."""
    import torch

    params = list(model.parameters())
    if not params or len({(p.dtype, p.device) for p in params}) != 1:
        return None
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        offset = 0
        for p in params:
            p.data = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
    _FLATS[model] = flat
    return flat


def flat_parameters(model: "torch.nn.Module") -> "torch.Tensor | None":
    """The flat tensor `bind_flat` bound ``model``'s parameters to, if they are still its views in order."""
    flat = _FLATS.get(model)
    if flat is None:
        return None
    offset, base, size = 0, flat.data_ptr(), flat.element_size()
    for p in model.parameters():
        if p.data_ptr() != base + offset * size or not p.is_contiguous():
            return None
        offset += p.numel()
    return flat if offset == flat.numel() else None


class TorchForward:
    """``forward(batch) -> actions`` for a model mapping a float batch to ``(b, n)`` scores.

    The batch is the server's staging buffer: it is read, never kept or written. The model given is the
    **fp32 master**: its parameters are bound to one flat vector (`bind_flat`), so a new version is one
    flat copy. It serves through a **serving copy** in ``dtype`` (bf16 by default on CUDA; channels-last
    frames and weights on CUDA unless ``channels_last=False``), recast from the master once per version
    (``weight_casts`` counts it), not by autocast on every pass; with fp32 and no channels-last the master
    serves itself. ``refresh(model)`` runs before each batch and writes new weights into the master in
    place; it returns False when nothing changed (anything else: the serving copy is recast).

    On CUDA (through ``ops``, `nonstop.inference.cudaops`; a test passes a fake): the device is set in
    every thread that calls in, every pass, upload and capture runs on a stream of its own
    (``self.stream``), and ``graph_sizes`` are captured as CUDA graphs — all at once by `prepare` (what a
    `BatchingServer` calls on its thread before serving), in thread-local mode from one shared memory
    pool; a size that runs out of memory raises `GraphOutOfMemory`. A batch of ``b`` is padded to the
    next of ``graph_sizes`` (`padded_size`) on the device: its frames are copied once, from the host
    buffer straight into the graph's input. `staging` hands out pinned host buffers: a server that
    stacks its frames there is uploaded from them with no other host copy (``host_copies`` counts the
    batches that needed one). ``last`` is the last call's `BatchTiming`; ``offset`` is added to each action.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    >>> f = TorchForward(net, "cpu", graph_sizes=(1, 8))
    >>> f(np.zeros((3, 2, 2), np.uint8)).shape, f.padded_batches, f.last.size
    ((3,), {8: 1}, 8)
    """

    def __init__(
        self,
        model: "torch.nn.Module",
        device: str = "cpu",
        *,
        dtype: str | None = None,
        channels_last: bool | None = None,
        graph_sizes: Sequence[int] = (),
        refresh: Callable[["torch.nn.Module"], Any] | None = None,
        ops: HostOps | None = None,
        offset: int = 0,
    ) -> None:
        import torch

        sizes = tuple(sorted({int(s) for s in graph_sizes}))
        if any(s < 1 for s in sizes):
            raise ValueError(f"graph_sizes must be batch sizes >= 1, got {tuple(graph_sizes)!r}")
        self.device, self.dtype = placement(device, dtype)
        self.ops = ops if ops is not None else device_ops(self.device)
        self.ops.set_device()  # cuda:N: before any CUDA call of this thread
        cuda = self.ops.is_cuda
        self.channels_last = self.device.type == "cuda" if channels_last is None else bool(channels_last)
        self.graph_sizes = sizes
        self.graphs = bool(cuda and sizes)  # off CUDA the sizes only pad (what a graph would run at)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # the fastest algorithm per shape: the shapes are few
        self.model = model.to(self.device).eval()
        bind_flat(self.model)
        self.serving = self._serving_copy()
        self.refresh = refresh
        self.offset = int(offset)
        #: batches padded, by the size they were padded to
        self.padded_batches: dict[int, int] = {}
        #: times the serving copy was recast from the master; batches copied on the host before upload
        self.weight_casts = 0
        self.host_copies = 0
        self.last: BatchTiming | None = None
        self.stream = self.ops.stream()
        self._pool: Any = None
        self._pinned: Any = None
        self._stagings: list[tuple[Any, np.ndarray]] = []
        self._captured: dict[tuple[int, tuple[int, ...], str], tuple[Any, Any, Any]] = {}
        self._sync_serving()

    def _serving_copy(self) -> "torch.nn.Module":
        import torch

        if self.dtype == torch.float32 and not self.channels_last:
            return self.model
        serving = copy.deepcopy(self.model).to(dtype=self.dtype)
        if self.channels_last:
            serving = serving.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch accepts it; its stubs do not say so
        _FLATS.pop(serving, None)
        return serving.eval()

    def _sync_serving(self) -> None:
        """The serving copy takes the master's weights (a cast per tensor, once per version)."""
        import torch

        if self.serving is self.model:
            return
        with torch.no_grad():
            for dst, src in zip(self.serving.parameters(), self.model.parameters()):
                dst.copy_(src)
            for dbuf, sbuf in zip(self.serving.buffers(), self.model.buffers()):
                dbuf.copy_(sbuf)
        self.weight_casts += 1

    def _refresh(self) -> None:
        if self.refresh is None:
            return
        with self.ops.use_stream(self.stream):
            if self.refresh(self.model) is not False:
                self._sync_serving()

    def bind_thread(self) -> None:
        """Set the device in the calling thread (a server's thread calls it before serving)."""
        self.ops.set_device()

    def describe(self) -> dict[str, Any]:
        """Where and how it runs, for a report."""
        import torch

        return {
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "serving_dtype": str(next(self.serving.parameters(), torch.empty(0, dtype=self.dtype)).dtype).removeprefix(
                "torch."
            ),
            "channels_last": self.channels_last,
            "graph_sizes": list(self.graph_sizes),
            "graphs": self.graphs,
            "graphs_captured": sorted({k[0] for k in self._captured}),
            "weight_casts": self.weight_casts,
            "own_stream": self.stream is not None,
        }

    def staging(self, rows: int, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A host buffer ``(rows, *shape)`` of ``dtype`` in pinned memory (on CUDA) that this forward
        uploads from with no other copy: where a server stacks its batches."""
        import torch

        like = torch.from_numpy(np.empty(0, dtype))
        tensor = self.ops.pinned(int(rows) * int(np.prod(shape, dtype=np.int64)), like.dtype).view(int(rows), *shape)
        array = tensor.numpy()
        self._stagings.append((tensor, array))
        return array

    def _host(self, batch: np.ndarray) -> "torch.Tensor":
        """The batch as a host tensor to upload: a view of a staging buffer when it lies in one, else copied
        into this forward's pinned buffer (on CUDA), else as it is."""
        import torch

        for tensor, array in self._stagings:
            if (
                batch.dtype == array.dtype
                and batch.shape[1:] == array.shape[1:]
                and batch.flags.c_contiguous
                and batch.ctypes.data == array.ctypes.data
            ):
                return tensor[: batch.shape[0]]
        host = torch.from_numpy(np.ascontiguousarray(batch))
        if not self.ops.is_cuda:
            return host
        if self._pinned is None or self._pinned.dtype != host.dtype or self._pinned.numel() < host.numel():
            self._pinned = self.ops.pinned(host.numel(), host.dtype)
        staged = self._pinned[: host.numel()].view(host.shape)
        staged.copy_(host)
        self.host_copies += 1
        return staged

    def _upload(self, batch: np.ndarray) -> "torch.Tensor":
        return self._host(batch).to(self.device, non_blocking=self.ops.is_cuda)

    def _scores(self, x: "torch.Tensor") -> "torch.Tensor":
        import torch

        x = frames_to_float(x)
        if x.dtype != self.dtype and x.is_floating_point() and self.serving is not self.model:
            x = x.to(self.dtype)
        if self.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        out = self.serving(x)
        if out.ndim != 2 or out.shape[0] != x.shape[0]:
            raise ValueError(
                f"the model returned shape {tuple(out.shape)} for a batch of {x.shape[0]}: want (b, n) scores"
            )
        return out

    def q_values(self, batch: np.ndarray) -> "torch.Tensor":
        """The model's ``(b, n)`` scores for ``batch``, as float32 on the host (no padding, no graph)."""
        import torch

        self._refresh()
        with self.ops.use_stream(self.stream), torch.inference_mode():
            return self._scores(self._upload(batch)).float().cpu()

    def _capture(self, size: int, shape: tuple[int, ...], dtype: "torch.dtype") -> tuple[Any, Any, Any]:
        """Capture the graph of one batch size on this forward's stream, from the shared pool."""
        import torch

        key = (size, shape, str(dtype))
        if self._pool is None:
            self._pool = self.ops.graph_pool()
        with self.ops.use_stream(self.stream), torch.no_grad():
            static_in = torch.zeros((size, *shape), dtype=dtype, device=self.device)
            for _ in range(3):  # warm: cuDNN's choice and the allocator settle before capture
                self._scores(static_in)
            graph = self.ops.graph()
            static_out = self.ops.capture(graph, self._pool, self.stream, lambda: self._scores(static_in).argmax(dim=1))
        hit = self._captured[key] = (graph, static_in, static_out)
        return hit

    def prepare(self, example: np.ndarray) -> list[int]:
        """Capture the graph of every one of ``graph_sizes`` now, smallest first, for observations like
        ``example`` (one observation); returns the sizes captured. `GraphOutOfMemory` names the size that
        did not fit and the largest that did. A no-op without graphs."""
        import torch

        self.ops.set_device()
        if not self.graphs:
            return []
        self._refresh()
        shape, dtype = tuple(example.shape), torch.from_numpy(np.empty(0, example.dtype)).dtype
        done: list[int] = []
        for size in self.graph_sizes:
            if (size, shape, str(dtype)) in self._captured:
                continue
            try:
                self._capture(size, shape, dtype)
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                self.ops.empty_cache()
                fits = max((k[0] for k in self._captured if k[0] < size), default=None)
                raise GraphOutOfMemory(size, fits) from None
            done.append(size)
        self.ops.synchronize()
        return done

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        import torch

        t0 = time.perf_counter()
        b = int(batch.shape[0])
        self._refresh()
        size = padded_size(b, self.graph_sizes)
        if size != b:
            self.padded_batches[size] = self.padded_batches.get(size, 0) + 1
        host = self._host(batch)
        captured = False
        ops = self.ops
        start, end = ops.event(timing=True), ops.event(timing=True)
        if self.graphs and size in self.graph_sizes:
            key = (size, tuple(host.shape[1:]), str(host.dtype))
            hit = self._captured.get(key)
            if hit is None:  # not prepared for: captured now, and this call is no replay's measure
                hit, captured = self._capture(size, key[1], host.dtype), True
            graph, static_in, static_out = hit
            with ops.use_stream(self.stream), torch.no_grad():
                ops.record(start)
                static_in[:b].copy_(host, non_blocking=True)  # the one copy: host buffer to the graph's input
                if b < size:
                    static_in[b:].zero_()
                graph.replay()
                ops.record(end)
                out = static_out[:b].cpu()
        else:
            with ops.use_stream(self.stream), torch.inference_mode():
                ops.record(start)
                x = host.to(self.device, non_blocking=ops.is_cuda)
                if size != b:
                    x = torch.cat([x, x.new_zeros((size - b, *x.shape[1:]))])
                out = self._scores(x).argmax(dim=1)[:b]
                ops.record(end)
                out = out.cpu()
        device_s = ops.elapsed_s(start, end) if start is not None else None
        self.last = BatchTiming(size, time.perf_counter() - t0, device_s, not captured)
        actions = out.numpy()
        return actions + self.offset if self.offset else actions


def torch_forward(
    model: "torch.nn.Module",
    device: str = "cpu",
    *,
    dtype: str | None = None,
    channels_last: bool | None = None,
    graph_sizes: Sequence[int] = (),
    refresh: Callable[["torch.nn.Module"], Any] | None = None,
    offset: int = 0,
) -> TorchForward:
    """A `TorchForward` for ``model`` on ``device`` (CUDA graphs for ``graph_sizes`` where CUDA runs)."""
    return TorchForward(
        model, device, dtype=dtype, channels_last=channels_last, graph_sizes=graph_sizes, refresh=refresh, offset=offset
    )
