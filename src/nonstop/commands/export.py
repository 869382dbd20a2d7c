"""``nonstop export RUN``: the trained Q-network as files other tools read.

A checkpoint holds the flat master parameters beside Adam's moments, the replay and nonstop's
counters, readable only by nonstop. ``export`` rebuilds the run's network (from ``config.json``
and the env's spaces), loads the newest readable checkpoint's parameters into it and writes

* ``policy.pt``: a plain ``state_dict`` (``torch.load(path, weights_only=True)``),
* ``policy.safetensors``: the same tensors, when the ``safetensors`` package is installed,
* ``policy.json``: what rebuilds the network (env, observation shape, actions, DQN config).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "export_policy", "run_export"]


def export_policy(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Write the run's policy into ``out_dir`` (default ``RUN/export``); return what was written."""
    import gymnasium
    import torch

    from nonstop.envs import make_env
    from nonstop.learning.checkpoint import latest_checkpoint
    from nonstop.learning.dqn import build_q_network
    from nonstop.learning.runlog import read_config
    from nonstop.learning.weights import load_flat
    from nonstop.experiment import TrainConfig

    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory at {root} (write one with `nonstop train --out {root}`)")
    cfg = TrainConfig(**read_config(root))
    dqn = cfg.dqn
    if dqn is None:  # a run writes the DQN settings it resolved into config.json
        raise ValueError(f"{root}/config.json has no DQN settings: it was not written by `nonstop train`")
    ckpt = latest_checkpoint(root)
    if ckpt is None:
        raise FileNotFoundError(f"{root} has no checkpoint to export")
    probe = make_env(cfg.env, **cfg.env_kwargs)
    obs_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    if obs_space.shape is None or not isinstance(action_space, gymnasium.spaces.Discrete):  # what train accepted
        raise TypeError(f"{cfg.env}: a DQN policy needs array observations and a Discrete action space, "
                        f"got {obs_space} and {action_space}")  # fmt: skip
    obs_shape, n_actions = tuple(obs_space.shape), int(action_space.n)
    model = build_q_network(obs_shape, n_actions, dqn)
    params = ckpt.state["params"]
    n = sum(p.numel() for p in model.parameters())
    if params.numel() != n:
        raise ValueError(f"{ckpt.path} holds {params.numel():,} parameters; the network of {root}/config.json has {n:,}")
    load_flat(model, params.numpy())
    out = Path(out_dir) if out_dir is not None else root / "export"
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    written = {"state_dict": out / "policy.pt"}
    torch.save(state, written["state_dict"])
    try:
        from safetensors.torch import save_file
    except ImportError:
        skipped = "safetensors is not installed (pip install safetensors)"
    else:
        save_file(state, str(out / "policy.safetensors"))
        written["safetensors"], skipped = out / "policy.safetensors", ""
    meta = {"env": cfg.env, "env_kwargs": cfg.env_kwargs, "obs_shape": list(obs_shape), "n_actions": n_actions,
            "network": type(model).__name__, "dqn": dqn.to_dict(), "checkpoint": ckpt.path.name,
            "updates": ckpt.updates}  # fmt: skip
    written["meta"] = out / "policy.json"
    written["meta"].write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return {"written": {k: str(v) for k, v in written.items()}, "skipped": skipped, **meta}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run directory written by `nonstop train --out RUN`")
    parser.add_argument("--out", metavar="DIR", help="where to write policy.pt/.safetensors/.json (default RUN/export)")


def run_export(args: argparse.Namespace) -> int:
    result = export_policy(args.run, args.out)
    for what, path in result["written"].items():
        print(f"{what}: {path}")
    if result["skipped"]:
        print(f"no policy.safetensors: {result['skipped']}")
    return 0


HELP = "a run's policy as a plain state_dict (and safetensors) that torch.load reads"
run = run_export
