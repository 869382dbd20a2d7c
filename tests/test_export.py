"""`nonstop export RUN`: the trained policy as files plain torch runs, no nonstop needed (issue 24).

The documented lines (docs/commands.md, "Exporting a policy") run in an interpreter where nonstop
cannot be imported, on a real observation of the env, and give the Q-values nonstop's own policy
gives on it: for vector inputs (CartPole's MLP) and for uint8 frames (the Game Boy test ROM's
ResNet, whose /255 scaling and channel axis live inside the program).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nonstop.cli import main
from nonstop.learning.checkpoint import latest_checkpoint
from nonstop.learning.dqn import DQNConfig, build_q_network
from nonstop.learning.weights import flat_parameters, load_flat

DOCS = Path(__file__).resolve().parents[1] / "docs" / "commands.md"


def _train_and_export(run: Path, env: str, capsys) -> Path:
    assert (
        main(
            [
                "train",
                "--env",
                env,
                "--seconds",
                "2",
                "--learning-starts",
                "50",
                "--batch-size",
                "8",
                "--replay-capacity",
                "2000",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["export", str(run)]) == 0
    out = capsys.readouterr().out
    assert "program:" in out and "weights:" in out and "meta:" in out
    return run / "export"


def _nonstop_policy(run: Path, meta: dict):
    """The run's network as nonstop acts with it: `TorchPolicy` over the checkpoint's parameters."""
    import gymnasium

    from nonstop.policies import TorchPolicy

    model = build_q_network(tuple(meta["obs_shape"]), meta["n_actions"], DQNConfig.from_dict(meta["dqn"]))
    load_flat(model, latest_checkpoint(run).state["params"].numpy())
    space = gymnasium.spaces.Discrete(meta["n_actions"], start=meta["action_space"]["start"])
    return TorchPolicy(model, space)


def _documented_lines() -> str:
    blocks = [
        b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.DOTALL) if "torch.jit.load(" in b
    ]
    assert len(blocks) == 1, "docs/commands.md should show one python block that loads the exported program"
    assert len(blocks[0].strip().splitlines()) <= 14  # about ten lines, as promised
    return blocks[0]


def _run_without_nonstop(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a Python whose only packages are the directories holding torch and numpy: ``-S``
    processes no ``.pth`` file (so not nonstop's editable install), ``-E`` ignores PYTHONPATH."""
    dirs = sorted({str(Path(m.__file__).parents[1]) for m in (torch, np)})
    (cwd / "example.py").write_text(code)
    bootstrap = (
        f"import sys; sys.path[1:1] = {dirs!r}\n"
        "try:\n    import nonstop\nexcept ModuleNotFoundError:\n    pass\n"
        "else:\n    raise SystemExit(f'nonstop is importable here: {nonstop.__file__}')\n"
        "import runpy; runpy.run_path('example.py', run_name='__main__')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run(
        [sys.executable, "-E", "-S", "-c", bootstrap], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("env", ["CartPole", pytest.param("GameBoy/TestROM", marks=pytest.mark.slow)])  # 7 s: a ResNet
def test_the_documented_lines_act_like_nonstop_without_nonstop(tmp_path, capsys, no_shm_leak, env):
    from nonstop.envs import make_env

    run = tmp_path / "run"
    export = _train_and_export(run, env, capsys)
    meta = json.loads((export / "policy.json").read_text())
    world = make_env(env)
    obs, _ = world.reset(seed=3)
    world.close()
    assert obs.any()  # a blank frame would not show a missing /255
    np.save(tmp_path / "obs.npy", obs)
    assert meta["input"]["shape"] == list(obs.shape) and meta["input"]["dtype"] == str(obs.dtype)

    code = _documented_lines()
    assert '"runs/cartpole/export"' in code
    done = _run_without_nonstop(code.replace('"runs/cartpole/export"', repr(str(export))), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    action, q_text = done.stdout.strip().splitlines()[-1].split(" ", 1)
    q_exported = np.array(json.loads(q_text), np.float32)

    policy = _nonstop_policy(run, meta)
    q_nonstop = policy.q_values(obs).numpy()
    assert q_exported.shape == (meta["n_actions"],)
    np.testing.assert_allclose(q_exported, q_nonstop, rtol=1e-6, atol=1e-6)
    assert int(action) == policy.act(obs).action


@pytest.mark.filterwarnings(
    "ignore:`torch.jit.load` is deprecated:DeprecationWarning"
)  # torch 2.13's, on the loader we document
def test_export_writes_weights_a_recipe_and_a_program_that_takes_batches(tmp_path, capsys, no_shm_leak):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    export = _train_and_export(run, "CartPole", capsys)
    meta = json.loads((export / "policy.json").read_text())
    assert meta["env"] == "CartPole" and meta["n_actions"] == 2 and meta["obs_shape"] == [4]
    assert meta["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert meta["input"]["preprocessing"].startswith("cast to float32")
    recipe = meta["layers"]
    assert recipe["network"] == "MLP" and recipe["widths"] == [4, 128, 128, 2] and recipe["forward"]
    # the weights rebuild the network by name, strictly: every key and shape as the recipe says
    state = load_file(export / "policy.safetensors")
    assert {name: list(t.shape) for name, t in state.items()} == recipe["tensors"]
    model = build_q_network((4,), 2, DQNConfig.from_dict(meta["dqn"]))
    model.load_state_dict(state)
    assert meta["updates"] > 0 and np.array_equal(
        flat_parameters(model), latest_checkpoint(run).state["params"].numpy()
    )
    # the program: one observation or a batch, any float dtype
    program = torch.jit.load(export / "policy.torchscript.pt")
    batch = torch.randn(5, 4, dtype=torch.float64)
    with torch.inference_mode():
        rows = program(batch)
        assert rows.shape == (5, 2) and rows.dtype == torch.float32
        assert torch.allclose(program(batch[2]), rows[2:3]) and torch.allclose(rows, model(batch.float()))


def test_the_recipe_of_a_resnet_names_its_construction():
    from nonstop.experiment.export import _recipe

    model = build_q_network((84, 84, 3), 6, DQNConfig(k=0.5, arch="2xdeep"))
    recipe = _recipe(model, (84, 84, 3), 6)
    assert recipe["network"] == "ImpalaResNet" and recipe["forward"].startswith("for each conv sequence")
    assert (recipe["k"], recipe["depth"], recipe["channels"], recipe["in_channels"]) == (0.5, 6, [8, 16, 16], 3)
    # 2xDeep as the authors built it: unpadded base convs, a 512-wide FC
    assert recipe["same_padding"] is False and recipe["fc_hidden"] == 512 and recipe["n_actions"] == 6
    assert sum(np.prod(s) for s in recipe["tensors"].values()) == sum(p.numel() for p in model.parameters())


def test_export_of_a_missing_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "no run directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty")]) == 2
    assert "config.json" in capsys.readouterr().err
