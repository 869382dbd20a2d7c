"""A trained run's policy as an artifact anyone can run without nonstop (what ``nonstop export`` writes).

A checkpoint holds the flat master parameters beside Adam's moments, the replay and nonstop's
counters, readable only by nonstop. ``export`` rebuilds the run's networks (its algorithm's, from
``config.json`` and the env's spaces), loads the newest readable checkpoint's parameters into them and
writes the actor only (`nonstop.learning.algos.Algorithm.export_module`: a Q-network, or a
deterministic actor such as ``tanh(μ(s))`` rescaled to the Box):

* ``policy.torchscript.pt``: a TorchScript program, observations as the env gives them in (one, or
  a batch), the actor's output out (Q-values, or the action), its preprocessing inside (``uint8``
  frames → float32 ``/ 255``, channels first; vectors cast to float32:
  `nonstop.policies.models.FromObservations`). ``torch.jit.load`` runs it; so does libtorch from C++;
* ``policy.safetensors``: the actor's weights by ``state_dict`` name, for rebuilding it elsewhere;
* ``policy.json``: what goes in and comes out (observation shape and dtype, the preprocessing, the
  output), the action space (`Algorithm.export_meta`: how the output becomes an action), the layer recipe (the network, its
  construction, the forward pass in words and every tensor's shape), the env and the algorithm's config.

A run of a world of many seats exports its learning team's network; under ``--agent-id`` that network
takes each agent's observation with the agent's identity added (``policy.json``'s ``agent_id``: the
mode, the number of agents, and how the features are laid out; the input shape is the widened one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["PROGRAM", "WEIGHTS", "META", "export_policy"]


PROGRAM = "policy.torchscript.pt"


WEIGHTS = "policy.safetensors"


META = "policy.json"


#: the forward pass of each exported network, in words
_FORWARD = {
    "ImpalaResNet": "for each conv sequence (channels c): conv3x3(c, padding 1, or 0 when same_padding is false) → "
    "maxpool(3, padded as the conv; stride 2, or 1 in 2xDeep's sequences 2-4 and 6) → 2 × [x + conv3x3(relu(conv3x3(relu(x))))]; "
    "then relu → flatten → fc → relu → head",
    "MLP": "flatten → (linear → relu) for each hidden width → linear",
    "DeterministicActor": "encoder (flatten; frames: the ResNet above, fc → relu → head of `features`) → actor: "
    "(linear → relu) for each hidden width → linear to 2·|A| → its first |A| are μ → "
    "tanh(μ) · scale + bias",
}


def _recipe(model: Any, obs_shape: tuple[int, ...], n_actions: int) -> dict[str, Any]:
    """The network as a recipe: its class, construction, forward pass in words, and tensor shapes."""
    from nonstop.policies.models import ConvSequence, ImpalaResNet, impala_channels

    recipe: dict[str, Any] = {"network": type(model).__name__, "forward": _FORWARD.get(type(model).__name__, "")}
    if isinstance(model, ImpalaResNet):
        sequence = model.sequences[0]
        assert isinstance(sequence, ConvSequence), "an ImpalaResNet starts with a ConvSequence"
        first = sequence.conv
        recipe.update(
            k=model.k,
            depth=model.depth,
            channels=list(impala_channels(model.k)),
            in_channels=first.in_channels,
            same_padding=first.padding == (1, 1),
            fc_hidden=model.fc.out_features,
            n_actions=n_actions,
        )
    else:
        linears = [m for m in model.modules() if type(m).__name__ == "Linear"]
        recipe.update(widths=[linears[0].in_features, *(m.out_features for m in linears)])
    recipe["tensors"] = {name: list(t.shape) for name, t in model.state_dict().items()}
    return recipe


def export_policy(
    run_dir: str | Path, out_dir: str | Path | None = None, *, trust_module: bool = False
) -> dict[str, Any]:
    """Write the run's policy into ``out_dir`` (default ``RUN/export``); return what was written. A world its
    config names as ``module:Id`` is built only with ``trust_module`` (`nonstop.envs.registry.import_file_module`)."""
    from nonstop._io import write_atomic
    from nonstop.learning.weights import load_flat

    root = Path(run_dir)
    cfg, ckpt = _saved_run(root)
    world = _ExportedWorld.of(cfg, root, trust_module)
    algo = cfg.algo_settings.algorithm(world.obs_shape, world.action_space)
    model = algo.build_model()
    params = ckpt.state["params"]
    n = sum(p.numel() for p in model.parameters())
    if params.numel() != n:
        raise ValueError(
            f"{ckpt.path} holds {params.numel():,} parameters; the network of {root}/config.json has {n:,}"
        )
    load_flat(model, params.numpy())
    model.eval()
    exported = algo.export_module(model).eval()  # the actor only, its preprocessing inside
    actor = exported.net  # what the weights file holds (a Q-network itself, or the deterministic actor)
    out = Path(out_dir) if out_dir is not None else root / "export"
    out.mkdir(parents=True, exist_ok=True)
    written = {"program": out / PROGRAM, "weights": out / WEIGHTS, "meta": out / META}
    _write_program(exported, actor, written)
    meta = {
        "format": "nonstop-policy/1",
        "program": PROGRAM,
        "weights": WEIGHTS,
        **_meta(cfg, algo, model, actor, world),
        "checkpoint": ckpt.path.name,
        "updates": ckpt.updates,
    }
    write_atomic(written["meta"], (json.dumps(meta, indent=2, default=str) + "\n").encode())
    return {"written": {k: str(v) for k, v in written.items()}, **meta}


def _saved_run(root: Path) -> tuple[Any, Any]:
    """The run's config (an older run's keys read as today's: `TrainConfig.from_dict`) and its newest
    readable checkpoint; a directory that is not a finished-enough run is one line saying so."""
    from nonstop.experiment import TrainConfig
    from nonstop.learning.checkpoint import latest_checkpoint
    from nonstop.learning.runlog import read_config

    if not root.is_dir():
        raise FileNotFoundError(f"no run directory at {root} (write one with `nonstop train --out {root}`)")
    cfg = TrainConfig.from_dict(read_config(root))
    if cfg.algo_settings is None:  # a run writes the settings it resolved into config.json
        raise ValueError(
            f"{root}/config.json has no {cfg.algo.upper()} settings: it was not written by `nonstop train`"
        )
    ckpt = latest_checkpoint(root)
    if ckpt is None:
        raise FileNotFoundError(f"{root} has no checkpoint to export")
    return cfg, ckpt


class _ExportedWorld:
    """What the exported actor takes: the run's world's spaces (its learning team's, in a world of seats),
    widened as the run's network saw them (the actions in flight, the agent's id)."""

    def __init__(self, obs_space: Any, action_space: Any, obs_shape: tuple[int, ...], ids: Any) -> None:
        self.obs_space, self.action_space, self.obs_shape, self.ids = obs_space, action_space, obs_shape, ids

    @classmethod
    def of(cls, cfg: Any, root: Path, trust_module: bool) -> "_ExportedWorld":
        from nonstop.envs import make_env
        from nonstop.envs.registry import import_file_module
        from nonstop.experiment.registry import lookup
        from nonstop.experiment.seating import agent_ids
        from nonstop.realtime.host import is_seat_world

        import_file_module(cfg.env, f"{root}/config.json", trust=trust_module)
        probe: Any = make_env(cfg.env, **cfg.env_kwargs)
        seats = [str(a) for a in probe.possible_agents] if is_seat_world(probe) else None
        if seats is not None:  # a seat world: its first team's network (the learning team's)
            obs_space, action_space = probe.observation_space(seats[0]), probe.action_space(seats[0])
        else:
            obs_space, action_space = probe.observation_space, probe.action_space
        probe.close()
        ids = agent_ids(cfg.agent_id, seats, cfg.env)
        algo_class = lookup("algo", cfg.algo)
        algo_class.check_spaces(obs_space, action_space, cfg.env)  # what train accepted
        if cfg.delay_aware or algo_class.needs_action_buffer:  # the actions in flight follow the observation
            obs_space = delay_aware_observations(cfg, obs_space, action_space)
        obs_shape = tuple(obs_space.shape or ())
        if ids is not None:  # the network's input: each agent's observation and its id
            obs_shape = ids.obs_shape(obs_shape)
        return cls(obs_space, action_space, obs_shape, ids)


def _write_program(exported: Any, actor: Any, written: dict[str, Path]) -> None:
    """The TorchScript program and the actor's weights, each written atomically."""
    import warnings

    import torch
    from safetensors.torch import save as safetensors_bytes

    from nonstop._io import atomic_file, write_atomic

    with warnings.catch_warnings():
        # torch 2.13 marks TorchScript deprecated in favour of torch.export, whose saved programs it does
        # not promise to load in later versions; a TorchScript archive also runs in libtorch (C++)
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.\w+. is deprecated", category=DeprecationWarning)
        program = torch.jit.script(exported)
        with atomic_file(written["program"]) as f:
            torch.jit.save(program, f)
    state = {k: v.detach().clone().contiguous() for k, v in actor.state_dict().items()}
    write_atomic(
        written["weights"], safetensors_bytes(state, metadata={"format": "pt", "network": type(actor).__name__})
    )


def _meta(cfg: Any, algo: Any, model: Any, actor: Any, world: _ExportedWorld) -> dict[str, Any]:
    """``policy.json``'s account of the actor: its input and preprocessing, output, action space, layers,
    the world and the algorithm's settings."""
    obs_shape, ids = world.obs_shape, world.ids
    dtype = str(world.obs_space.dtype)
    if dtype == "uint8" and len(obs_shape) > 1:
        preprocessing = (
            "float32 / 255; (H, W) frames gain a channel axis, (H, W, C) ones with C <= 4 are moved "
            "channels-first: the network sees (B, C, H, W) in [0, 1]"
        )
    else:
        preprocessing = "cast to float32"
    own = algo.export_meta(model)
    n_actions = int(world.action_space.n) if algo.action_kind == "discrete" else 0
    return {
        "input": {
            "name": "obs",
            "shape": list(obs_shape),
            "dtype": dtype,
            "batch": "optional leading axis: (B, *shape) gives B rows of output, one observation gives 1",
            "preprocessing": preprocessing + " (inside the program; do it yourself with the safetensors weights)",
        },
        "output": own["output"],
        "action_space": own["action_space"],
        "layers": _recipe(actor, obs_shape, n_actions),
        "env": cfg.env,
        "env_kwargs": cfg.env_kwargs,
        "obs_shape": list(obs_shape),
        **({} if ids is None else {"agent_id": {**ids.to_dict(), "layout": _ID_LAYOUT[ids.mode]}}),
        **{k: v for k, v in own.items() if k not in ("output", "action_space")},
        "network": type(actor).__name__,
        "algo": algo.name,
        algo.name: cfg.algo_settings.to_dict(),
    }


#: how ``--agent-id`` widens an observation, for ``policy.json``
_ID_LAYOUT = {
    "index": "one more entry on the last axis (a constant channel of (H, W, C) frames): k / (n_agents - 1) for "
    "agent k, times 255 for uint8 frames",
    "onehot": "n_agents more entries on the last axis (constant channels of (H, W, C) frames): 1 at agent k, 0 "
    "elsewhere, times 255 for uint8 frames",
}


def delay_aware_observations(cfg: Any, obs_space: Any, action_space: Any) -> Any:
    """What a delay-aware run's actor took: the observation, then its action buffer's K slots
    (`nonstop.learning.inflight.delay_aware_space`, K from the run's latency)."""
    from nonstop.envs import env_info
    from nonstop.learning.inflight import delay_aware_space
    from nonstop.policies.latency import parse_latency

    tick_hz = env_info(cfg.env, **cfg.env_kwargs).tick_hz
    space, _ = delay_aware_space(
        obs_space, action_space, parse_latency(cfg.latency, tick_hz=tick_hz).max_hint, 1.0 / tick_hz
    )
    return space
