"""Where a model runs and in what precision: the ``--device`` and ``--dtype`` every command that runs a
model takes, read and placed (docs/design.md §7). It sits with the policies, below everything that
builds a model (inference, learning, metrics' timings), so each of them can place one; torch is
imported when called.

`resolve_device` reads ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when there is one) and refuses a
CUDA request that this machine's torch cannot serve, in one line naming what it found;
`resolve_dtype` reads ``fp32``, ``bf16``, ``fp16`` or ``auto``/None (bf16 on CUDA, fp32 elsewhere).
`to_device` moves a host tensor there: through pinned memory and without blocking on CUDA, as is
on the CPU (`uses_pinned` says which). `add_device_arguments` puts both flags on a parser.

>>> str(resolve_device("auto")) in ("cpu", "cuda:0")
True
>>> str(resolve_dtype(None, "cpu")), str(resolve_dtype("bf16", "cpu"))
('torch.float32', 'torch.bfloat16')
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import torch

__all__ = [
    "resolve_device",
    "resolve_dtype",
    "parse_dtype",
    "parse_device",
    "DTYPES",
    "DEVICE_GRAMMAR",
    "uses_pinned",
    "to_device",
    "autocast",
    "placement",
    "add_device_arguments",
    "enter_device",
]

#: the precisions a model may run in (``--dtype``): ``auto`` (None) is bf16 on CUDA, fp32 elsewhere
DTYPES: Final = ("fp32", "bf16", "fp16")


_TORCH_DTYPES: Final = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


DEVICE_GRAMMAR: Final = "cpu, cuda, cuda:N or auto"


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

    m = _DEVICE.match(parse_device(device))
    assert m is not None  # parse_device checked the form
    kind, index = m.group(1), m.group(2)
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "auto":
        return torch.device("cuda" if found else "cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if not found:
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
        raise ValueError(
            f"device {device!r} needs a CUDA GPU, but torch {torch.__version__} ({build}) finds none: "
            "use cpu (or auto), or install a CUDA build of torch on a machine with a GPU"
        )
    if index is not None and int(index) >= found:
        raise ValueError(
            f"device {device!r} does not exist: torch finds {found} CUDA device(s), cuda:0..cuda:{found - 1}"
        )
    return torch.device("cuda" if index is None else f"cuda:{index}")


def parse_device(text: str) -> str:
    """A ``--device`` value, checked for its form only (whether this machine has it is `resolve_device`'s).

    >>> parse_device(" CUDA:1 "), parse_device("auto")
    ('cuda:1', 'auto')
    >>> parse_device("gpu")
    Traceback (most recent call last):
    ...
    ValueError: device must be cpu, cuda, cuda:N or auto, got 'gpu'
    """
    m = _DEVICE.match(text.strip().lower()) if isinstance(text, str) else None
    if m is None or (m.group(2) is not None and m.group(1) != "cuda"):
        raise ValueError(f"device must be {DEVICE_GRAMMAR}, got {text!r}")
    return text.strip().lower()


def parse_dtype(text: str | None) -> str | None:
    """A ``--dtype`` value: ``fp32``, ``bf16``, ``fp16``, or ``auto``/None (None: chosen by the device).

    >>> parse_dtype("BF16"), parse_dtype("auto"), parse_dtype(None)
    ('bf16', None, None)
    >>> parse_dtype("int8")
    Traceback (most recent call last):
    ...
    ValueError: dtype must be fp32, bf16, fp16 or auto, got 'int8'
    """
    if text is None:
        return None
    name = text.strip().lower() if isinstance(text, str) else None
    if name == "auto":
        return None
    if name not in DTYPES:
        raise ValueError(f"dtype must be {', '.join(DTYPES)} or auto, got {text!r}")
    return name


def resolve_dtype(dtype: str | None, device: "str | torch.device" = "cpu") -> "torch.dtype":
    """The torch dtype a model runs in on ``device``: the one named, or (None, ``auto``) bf16 on CUDA
    and fp32 elsewhere (a CPU core has no fast half-precision path worth the lost digits)."""
    import torch

    name = parse_dtype(dtype)
    if name is None:
        name = "bf16" if torch.device(device).type == "cuda" else "fp32"
    return getattr(torch, _TORCH_DTYPES[name])


def placement(device: str = "cpu", dtype: str | None = None) -> tuple["torch.device", "torch.dtype"]:
    """``(resolve_device(device), resolve_dtype(dtype, that device))``: what a model builder takes."""
    dev = resolve_device(device)
    return dev, resolve_dtype(dtype, dev)


def enter_device(device: "torch.device") -> None:
    """Make ``device`` the calling thread's current CUDA device when it names one (``cuda:N``), before
    that thread's first CUDA call: streams, graphs and pinned memory made without a device go to the
    current one, which is GPU 0 until set. Nothing on the CPU, or for a bare ``cuda``."""
    if device.type == "cuda" and device.index is not None:
        import torch

        torch.cuda.set_device(device)


def uses_pinned(device: "torch.device") -> bool:
    """Whether host tensors go to ``device`` through pinned memory without blocking: on CUDA only (on
    the CPU there is no transfer at all)."""
    return device.type == "cuda"


def to_device(t: "torch.Tensor", device: "torch.device") -> "torch.Tensor":
    """``t`` (on the host) on ``device``: pinned and ``non_blocking`` where `uses_pinned`, else ``t``
    itself on the CPU (no copy)."""
    if not uses_pinned(device):
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def autocast(device: "torch.device", dtype: "torch.dtype", *, cache: bool = True) -> Any:
    """A context that runs the model's ops in ``dtype`` (torch's autocast), or nothing for fp32.
    ``cache=False`` recasts the weights at every op: what a CUDA graph must capture, so that a replay
    casts the weights as they are then, never a cast cached at capture."""
    import torch

    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


def _flag(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    import argparse

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def add_device_arguments(group: Any, *, device: str = "cpu", what: str = "the model", dtype: bool = True) -> None:
    """``--device cpu|cuda|cuda:N|auto`` and ``--dtype fp32|bf16|fp16|auto`` on an argparse parser or group,
    for every command and benchmark that runs a model: each checked for its form when parsed (a bad one is
    argparse's one-line usage error); whether this machine has the device is said when the model is
    placed (`placement`: one line naming what torch finds). ``args.dtype`` is None for ``auto`` (bf16 on
    CUDA, fp32 on the CPU); ``dtype=False`` leaves ``--dtype`` out (learners update in fp32).

    >>> import argparse
    >>> p = argparse.ArgumentParser(); add_device_arguments(p)
    >>> a = p.parse_args(["--device", "CUDA:0", "--dtype", "bf16"]); (a.device, a.dtype)
    ('cuda:0', 'bf16')
    >>> p.parse_args([]).dtype is None
    True
    """
    group.add_argument(
        "--device",
        type=_flag(parse_device),
        default=device,
        metavar="cpu|cuda|cuda:N|auto",
        help=f"the device for {what}: cpu, cuda, cuda:N, or auto (CUDA when torch finds one) (default: {device})",
    )
    if not dtype:
        return
    group.add_argument(
        "--dtype",
        type=_flag(parse_dtype),
        default=None,
        metavar="fp32|bf16|fp16|auto",
        help=f"the precision for {what} (autocast): auto is bf16 on CUDA, fp32 on the CPU (default: auto)",
    )
