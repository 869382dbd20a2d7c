"""SAC's update reads in one file (issue 41): its networks, losses and update in `nonstop.learning.sacupdate`,
short enough to read top to bottom; its settings in `nonstop.learning.sac`, which `nonstop train` reads
without torch; how it acts in `nonstop.learning.sacact`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

LEARNING = Path(__file__).resolve().parents[1] / "src" / "nonstop" / "learning"


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}


def test_sacs_networks_losses_and_update_are_one_file_of_at_most_450_lines():
    update = LEARNING / "sacupdate.py"
    assert len(update.read_text().splitlines()) <= 450
    assert {"GaussianActor", "QNetwork", "Temperature", "SACNetworks", "sac_losses", "sac_backward"} <= _defined(update)
    assert {"SACPolicy", "squash", "sampled_server"} <= _defined(LEARNING / "sacact.py")
    assert not (LEARNING / "sacnets.py").exists()  # the networks are no longer apart from their losses


def test_sacs_settings_and_acting_load_no_torch():
    code = "import sys, nonstop.learning.sac, nonstop.learning.sacact; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_flat_thetas_blocks_keep_their_order():
    """Saved runs hold θ flat: encoder, actor, q1, q2, log α last, as before the networks moved."""
    from nonstop.learning.sacupdate import SACNetworks

    nets = SACNetworks(3, 2, (4,), low=[-1.0, -1.0], high=[1.0, 1.0])
    blocks = [name.split(".")[0] for name, _ in nets.named_parameters()]
    assert list(dict.fromkeys(blocks)) == ["actor", "q1", "q2", "temperature"]  # a flatten encoder has none
    assert [n for n, _ in nets.named_parameters()][-1] == "temperature.log_alpha"
