"""The device a batching server's model runs on, and the forward pass it injects (docs/design.md §7).

`resolve_device` reads ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when there is one) and refuses a
CUDA request that this machine's torch cannot serve, in one line naming what it found.
`torch_forward` turns a torch model into the ``forward(batch) -> actions`` a
`nonstop.inference.batching.BatchingServer` calls: the stacked frames go to the device, ``uint8``
frames are scaled by 1/255 there (the host never holds a float copy), the model runs under
``torch.inference_mode()`` and the argmax of each row comes back. torch is imported when called.

>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
>>> forward = torch_forward(net, "cpu")
>>> forward(np.zeros((5, 2, 2), np.uint8)).shape
(5,)
>>> str(resolve_device("auto")) in ("cpu", "cuda:0")
True
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device", "torch_forward"]

_DEVICE = re.compile(r"^(cpu|auto|cuda)(?::(\d+))?$")


def resolve_device(device: str = "auto") -> "torch.device":
    """``cpu``, ``cuda`` (the current CUDA device), ``cuda:N`` or ``auto`` (``cuda`` if torch sees one,
    else ``cpu``) as a ``torch.device``; CUDA asked of a machine without it is one clear error.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("tpu")
    Traceback (most recent call last):
    ...
    ValueError: device must be cpu, cuda, cuda:N or auto, got 'tpu'
    """
    import torch

    m = _DEVICE.match(device.strip().lower()) if isinstance(device, str) else None
    if m is None or (m.group(2) is not None and m.group(1) != "cuda"):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    kind, index = m.group(1), m.group(2)
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "auto":
        return torch.device("cuda" if found else "cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if not found:
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
        raise ValueError(f"device {device!r} needs a CUDA GPU, but torch {torch.__version__} ({build}) finds none: "
                           "pass device='cpu' (or 'auto'), or install a CUDA build of torch on a machine with a GPU")  # fmt: skip
    if index is not None and int(index) >= found:
        raise ValueError(f"device {device!r} does not exist: torch finds {found} CUDA device(s), cuda:0..cuda:{found - 1}")
    return torch.device("cuda" if index is None else f"cuda:{index}")


def torch_forward(model: "torch.nn.Module", device: str = "cpu", *,
                  refresh: Callable[["torch.nn.Module"], None] | None = None) -> Callable[[np.ndarray], np.ndarray]:  # fmt: skip
    """``forward(batch) -> actions`` for a model mapping a float batch to ``(b, n)`` scores.

    The batch is the server's staging buffer: it is read, never kept or written (on the CPU the
    tensor shares its memory; ``uint8`` frames are cast, which copies). Frames are laid out as the
    DQN learner lays them (`nonstop.learning.dqn`): ``(b, H, W)`` uint8 gets a channel axis, ``(b,
    H, W, C)`` uint8 with ``C <= 4`` becomes ``(b, C, H, W)``. ``refresh(model)`` runs before each
    batch: new weights reach the server's copy there, once per version.
    """
    import torch

    dev = resolve_device(device)
    model = model.to(dev).eval()

    def forward(batch: np.ndarray) -> np.ndarray:
        if refresh is not None:
            refresh(model)
        with torch.inference_mode():
            x = torch.from_numpy(batch).to(dev)
            if x.dtype == torch.uint8:
                x = x.float().div_(255.0)  # on the device: the host sends bytes
                if x.ndim == 3:
                    x = x.unsqueeze(1)
                elif x.ndim == 4 and x.shape[-1] <= 4 < x.shape[1]:
                    x = x.permute(0, 3, 1, 2)
            else:
                x = x.float()
            out = model(x)
            if out.ndim != 2 or out.shape[0] != batch.shape[0]:
                raise ValueError(f"the model returned shape {tuple(out.shape)} for a batch of {batch.shape[0]}: "
                                 "want (b, n) scores")  # fmt: skip
            return out.argmax(dim=1).cpu().numpy()

    return forward
