"""`nonstop export RUN`: the trained network as a plain state_dict that torch.load reads."""

from __future__ import annotations

import json

import numpy as np
import torch

from nonstop.cli import main
from nonstop.learning.checkpoint import latest_checkpoint
from nonstop.learning.dqn import DQNConfig, build_q_network
from nonstop.learning.weights import flat_parameters


def test_export_writes_a_state_dict_torch_loads_with_the_trained_weights(tmp_path, capsys, no_shm_leak):
    run = tmp_path / "run"
    assert main(["train", "--env", "CartPole", "--seconds", "3", "--learning-starts", "50", "--batch-size", "8",
                 "--out", str(run)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["export", str(run)]) == 0
    assert "state_dict:" in capsys.readouterr().out
    state = torch.load(run / "export" / "policy.pt", weights_only=True)  # plain tensors: no nonstop needed to read
    meta = json.loads((run / "export" / "policy.json").read_text())
    assert meta["env"] == "CartPole" and meta["n_actions"] == 2 and meta["obs_shape"] == [4]
    model = build_q_network(tuple(meta["obs_shape"]), meta["n_actions"], DQNConfig.from_dict(meta["dqn"]))
    model.load_state_dict(state)  # strict: every key and shape matches
    trained = latest_checkpoint(run).state["params"].numpy()
    assert meta["updates"] > 0 and np.array_equal(flat_parameters(model), trained)


def test_export_of_a_missing_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "no run directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty")]) == 2
    assert "config.json" in capsys.readouterr().err
