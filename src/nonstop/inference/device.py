"""The forward pass a batching server injects (docs/design.md §7), and where it runs.

Reading and placing ``--device``/``--dtype`` (`resolve_device`, `resolve_dtype`, `placement`, `to_device`,
`autocast`, `add_device_arguments`) is `nonstop.policies.placement`'s, below everything that builds a
model; this module re-exports it. `TorchForward` (`torch_forward`) turns a torch model into
the ``forward(batch) -> actions`` a `nonstop.inference.batching.BatchingServer` calls: the stacked
frames go to the device as bytes and are scaled by 1/255 there, the model runs under
``torch.inference_mode()`` (and autocast to the dtype when it is not fp32; channels-last memory for
frames on CUDA), and the argmax of each row comes back. With ``graph_sizes`` a batch is padded to the
next of those sizes, and on CUDA each size is captured once as a CUDA graph and replayed.
torch is imported when called.

>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
>>> forward = torch_forward(net, "cpu")
>>> forward(np.zeros((5, 2, 2), np.uint8)).shape
(5,)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

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

__all__ = ["resolve_device", "resolve_dtype", "parse_dtype", "DTYPES", "DEVICE_GRAMMAR", "uses_pinned", "to_device",
           "autocast", "frames_to_float", "padded_size", "TorchForward", "torch_forward", "placement", "parse_device",
           "default_graph_sizes", "add_device_arguments"]  # fmt: skip


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


class TorchForward:
    """``forward(batch) -> actions`` for a model mapping a float batch to ``(b, n)`` scores.

    The batch is the server's staging buffer: it is read, never kept or written. On CUDA it is copied
    into a pinned host buffer owned here (grown to the largest batch seen) and uploaded without
    blocking; cuDNN's benchmark mode is on, and frames use channels-last memory unless
    ``channels_last=False``. ``dtype`` (`resolve_dtype`) runs the model under autocast. ``graph_sizes``:
    a batch of ``b`` is padded with zero frames to the next of those sizes (`padded_size`), so a few
    shapes serve every ``b``; on CUDA (unless ``graphs=False``) each size is captured as a CUDA graph
    the first time it is needed and replayed after. ``refresh(model)`` runs before each batch: new
    weights reach the model there, once per version, copied into its parameters in place (so a
    captured graph sees them).

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    >>> f = TorchForward(net, "cpu", graph_sizes=(1, 8))
    >>> f(np.zeros((3, 2, 2), np.uint8)).shape, f.padded_batches
    ((3,), {8: 1})
    """

    def __init__(self, model: "torch.nn.Module", device: str = "cpu", *, dtype: str | None = None,
                 channels_last: bool | None = None, graph_sizes: Sequence[int] = (), graphs: bool | None = None,
                 refresh: Callable[["torch.nn.Module"], None] | None = None) -> None:  # fmt: skip
        import torch

        sizes = tuple(sorted({int(s) for s in graph_sizes}))
        if any(s < 1 for s in sizes):
            raise ValueError(f"graph_sizes must be batch sizes >= 1, got {tuple(graph_sizes)!r}")
        self.device, self.dtype = placement(device, dtype)
        cuda = self.device.type == "cuda"
        self.channels_last = cuda if channels_last is None else bool(channels_last)
        self.graph_sizes = sizes
        self.graphs = bool(cuda and sizes) if graphs is None else bool(graphs)
        if self.graphs and not cuda:
            raise ValueError(f"CUDA graphs need a CUDA device, got {self.device}: leave graphs out or use device='cuda'")
        if cuda:
            torch.backends.cudnn.benchmark = True  # the fastest algorithm per shape: the shapes are few
        self.model = model.to(self.device).eval()
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch accepts it; its stubs do not say so
        self.refresh = refresh
        #: batches padded, by the size they were padded to
        self.padded_batches: dict[int, int] = {}
        self._pinned: Any = None
        self._captured: dict[tuple[int, tuple[int, ...], str], tuple[Any, Any, Any]] = {}

    def describe(self) -> dict[str, Any]:
        """Where and how it runs, for a report."""
        return {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                "channels_last": self.channels_last, "graph_sizes": list(self.graph_sizes), "graphs": self.graphs,
                "graphs_captured": sorted({k[0] for k in self._captured})}  # fmt: skip

    def _upload(self, batch: np.ndarray) -> "torch.Tensor":
        import torch

        host = torch.from_numpy(np.ascontiguousarray(batch))
        if not uses_pinned(self.device):
            return host.to(self.device)
        if self._pinned is None or self._pinned.dtype != host.dtype or self._pinned.numel() < host.numel():
            self._pinned = torch.empty(host.numel(), dtype=host.dtype).pin_memory()
        staged = self._pinned[: host.numel()].view(host.shape)
        staged.copy_(host)
        return staged.to(self.device, non_blocking=True)

    def _scores(self, x: "torch.Tensor") -> "torch.Tensor":
        import torch

        x = frames_to_float(x)
        if self.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast(self.device, self.dtype, cache=not self.graphs):
            out = self.model(x)
        if out.ndim != 2 or out.shape[0] != x.shape[0]:
            raise ValueError(f"the model returned shape {tuple(out.shape)} for a batch of {x.shape[0]}: want (b, n) scores")
        return out

    def q_values(self, batch: np.ndarray) -> "torch.Tensor":
        """The model's ``(b, n)`` scores for ``batch``, as float32 on the host (no padding, no graph)."""
        import torch

        if self.refresh is not None:
            self.refresh(self.model)
        with torch.inference_mode():
            return self._scores(self._upload(batch)).float().cpu()

    def _graph(self, size: int, like: "torch.Tensor") -> tuple[Any, Any, Any]:
        import torch

        key = (size, tuple(like.shape[1:]), str(like.dtype))
        hit = self._captured.get(key)
        if hit is None:
            static_in = torch.zeros((size, *like.shape[1:]), dtype=like.dtype, device=self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side), torch.no_grad():
                for _ in range(3):  # warm: cuDNN's choice and the allocator settle before capture
                    self._scores(static_in)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(graph):
                static_out = self._scores(static_in).argmax(dim=1)
            hit = self._captured[key] = (graph, static_in, static_out)
        return hit

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        import torch

        b = int(batch.shape[0])
        if self.refresh is not None:
            self.refresh(self.model)
        size = padded_size(b, self.graph_sizes)
        if size != b:
            self.padded_batches[size] = self.padded_batches.get(size, 0) + 1
            batch = np.concatenate([batch, np.zeros((size - b, *batch.shape[1:]), batch.dtype)])
        if self.graphs and size in self.graph_sizes:
            x = self._upload(batch)
            graph, static_in, static_out = self._graph(size, x)
            static_in.copy_(x)
            graph.replay()
            return static_out[:b].cpu().numpy()
        with torch.inference_mode():
            return self._scores(self._upload(batch)).argmax(dim=1)[:b].cpu().numpy()


def torch_forward(model: "torch.nn.Module", device: str = "cpu", *, dtype: str | None = None,
                  channels_last: bool | None = None, graph_sizes: Sequence[int] = (),
                  refresh: Callable[["torch.nn.Module"], None] | None = None) -> TorchForward:  # fmt: skip
    """A `TorchForward` for ``model`` on ``device`` (CUDA graphs for ``graph_sizes`` where CUDA runs)."""
    return TorchForward(model, device, dtype=dtype, channels_last=channels_last, graph_sizes=graph_sizes,
                        refresh=refresh)  # fmt: skip


