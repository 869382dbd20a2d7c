"""A trained run's policy as an artifact anyone can run without nonstop (what ``nonstop export`` writes).

A checkpoint holds the flat master parameters beside Adam's moments, the replay and nonstop's
counters, readable only by nonstop. ``export`` rebuilds the run's networks (its algorithm's, from
``config.json`` and the env's spaces), loads the newest readable checkpoint's parameters into them and
writes the actor only (`nonstop.learning.algos.Algorithm.export_module`: DQN's Q-network, SAC's
deterministic actor ``tanh(μ(s))`` rescaled to the Box):

* ``policy.torchscript.pt``: a TorchScript program, observations as the env gives them in (one, or
  a batch), the actor's output out (DQN: Q-values; SAC: the action), its preprocessing inside (``uint8``
  frames → float32 ``/ 255``, channels first; vectors cast to float32:
  `nonstop.policies.models.FromObservations`). ``torch.jit.load`` runs it; so does libtorch from C++;
* ``policy.safetensors``: the actor's weights by ``state_dict`` name, for rebuilding it elsewhere;
* ``policy.json``: what goes in and comes out (observation shape and dtype, the preprocessing, the
  output), the action space (DQN: action = ``start + argmax``), the layer recipe (the network, its
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


#: the forward pass of each network `nonstop.learning.dqn.build_q_network` builds, in words
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
    import warnings

    import torch
    from safetensors.torch import save as safetensors_bytes

    from nonstop._io import atomic_file, write_atomic
    from nonstop.envs import make_env
    from nonstop.envs.registry import import_file_module
    from nonstop.experiment import TrainConfig
    from nonstop.experiment.registry import lookup
    from nonstop.learning.checkpoint import latest_checkpoint
    from nonstop.learning.runlog import read_config
    from nonstop.learning.weights import load_flat

    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory at {root} (write one with `nonstop train --out {root}`)")
    cfg = TrainConfig(**read_config(root))
    algo_class = lookup("algo", cfg.algo)  # a run written before --algo is a DQN run
    settings = getattr(cfg, algo_class.settings_field)
    if settings is None:  # a run writes the settings it resolved into config.json
        raise ValueError(
            f"{root}/config.json has no {algo_class.name.upper()} settings: it was not written by `nonstop train`"
        )
    ckpt = latest_checkpoint(root)
    if ckpt is None:
        raise FileNotFoundError(f"{root} has no checkpoint to export")
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
    algo_class.check_spaces(obs_space, action_space, cfg.env)  # what train accepted
    if cfg.delay_aware or getattr(
        algo_class, "needs_action_buffer", False
    ):  # the actions in flight follow the observation
        obs_space = delay_aware_observations(cfg, obs_space, action_space)
    obs_shape = tuple(obs_space.shape or ())
    if ids is not None:  # the network's input: each agent's observation and its id
        obs_shape = ids.obs_shape(obs_shape)
    algo = settings.algorithm(obs_shape, action_space)
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
    actor = exported.net  # what the weights file holds (DQN: the Q-network itself)
    out = Path(out_dir) if out_dir is not None else root / "export"
    out.mkdir(parents=True, exist_ok=True)
    written = {"program": out / PROGRAM, "weights": out / WEIGHTS, "meta": out / META}
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
    dtype = str(obs_space.dtype)
    frames = len(obs_shape) > 1
    if dtype == "uint8" and frames:
        preprocessing = (
            "float32 / 255; (H, W) frames gain a channel axis, (H, W, C) ones with C <= 4 are moved "
            "channels-first: the network sees (B, C, H, W) in [0, 1]"
        )
    else:
        preprocessing = "cast to float32"
    own = algo.export_meta(model)
    meta = {
        "format": "nonstop-policy/1",
        "program": PROGRAM,
        "weights": WEIGHTS,
        "input": {
            "name": "obs",
            "shape": list(obs_shape),
            "dtype": dtype,
            "batch": "optional leading axis: (B, *shape) gives B rows of output, one observation gives 1",
            "preprocessing": preprocessing + " (inside the program; do it yourself with the safetensors weights)",
        },
        "output": own["output"],
        "action_space": own["action_space"],
        "layers": _recipe(actor, obs_shape, int(getattr(action_space, "n", 0))),
        "env": cfg.env,
        "env_kwargs": cfg.env_kwargs,
        "obs_shape": list(obs_shape),
        **({} if ids is None else {"agent_id": {**ids.to_dict(), "layout": _ID_LAYOUT[ids.mode]}}),
        **{k: v for k, v in own.items() if k not in ("output", "action_space")},
        "network": type(actor).__name__,
        "algo": algo.name,
        algo.name: settings.to_dict(),
        "checkpoint": ckpt.path.name,
        "updates": ckpt.updates,
    }
    write_atomic(written["meta"], (json.dumps(meta, indent=2, default=str) + "\n").encode())
    return {"written": {k: str(v) for k, v in written.items()}, **meta}


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
