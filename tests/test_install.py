"""The README's quick start in a fresh virtual environment, with only the extras the text names.

A fresh ``python -m venv`` (no site packages of this machine's), then, from the repository root:

1. the base install as docs/install.md gives it (``pip install -e .``): the README's
   ``nonstop.make("Boxing"…)`` example runs as a saved script and prints the ``info`` shown,
   ``nonstop envs`` lists the worlds, and ``nonstop demo`` refuses in one line naming the extra;
2. the README's first command, word for word (``pip install torch==2.13.0 -e ".[learn,plot,train]"``),
   then its ``nonstop demo`` with ``--quick``.

Installing twice into one venv leaves what the README's command alone leaves (the base packages
are a subset of the extras'), and spares a second download of the base. pip's own cache
(``~/.cache/pip``) is used as it is: the torch wheel that .ci/run's install fetched is not fetched
again. Marked ``network``: without a package registry it skips, saying so, except in CI
(``CI=true``), where it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_commands import ROOT, command_words, inline_commands, shell_commands
from test_compat_openenv import NO_REGISTRY
from test_readme import block, printed_dicts, shown_dicts

#: an install may take minutes (torch is ~200 MB of wheel); the demo's quick form about half a minute
INSTALL_TIMEOUT = 1200


def _readme_line(predicate) -> list[str]:
    found = [c for c in shell_commands(ROOT / "README.md") if predicate(c.argv)]
    assert found, "the README's set-up block has no such command"
    return found[0].argv


def _venv_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {
        **env,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "MPLBACKEND": "Agg",
    }


def _pip(venv: Path, words: list[str], log: list[str]) -> None:
    """``pip install …`` as the docs give it, run by the venv's pip from the repository root."""
    assert words[:2] == ["pip", "install"], words
    started = time.monotonic()
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *words[1:], "--retries", "2"],
        cwd=ROOT,
        env=_venv_env(venv),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    fetched = [line.split()[1] for line in done.stdout.splitlines() if line.strip().startswith("Downloading ")]
    torch = "torch fetched" if any(name.startswith("torch-") for name in fetched) else "torch not fetched"
    log.append(f"{' '.join(words)}: {time.monotonic() - started:.0f} s, {len(fetched)} files fetched ({torch})")
    if done.returncode == 0:
        return
    clues = [line.strip() for line in done.stderr.splitlines() if any(sign in line for sign in NO_REGISTRY)]
    if clues:
        why = f"network: the package registry is unreachable, so `{' '.join(words)}` cannot run ({clues[0][:200]})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the quick start in a fresh venv: {why}")
        pytest.skip(why)
    raise AssertionError(f"`{' '.join(words)}` failed:\n{done.stderr[-3000:]}")


def _run(venv: Path, argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_venv_env(venv), capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.network
def test_quick_start_in_a_fresh_venv(tmp_path):
    venv, log = tmp_path / "venv", []
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_ = venv / "bin"

    base = next(c for c in inline_commands(ROOT / "docs" / "install.md") if c.argv == ["pip", "install", "-e", "."])
    _pip(venv, base.argv, log)
    missing = _run(venv, [str(bin_ / "python"), "-c", "import torch"], tmp_path)
    assert missing.returncode != 0, "the base install should not bring torch"
    code = block('nonstop.make("Boxing"')
    (tmp_path / "example.py").write_text(code)
    done = _run(venv, [str(bin_ / "python"), "example.py"], tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert printed_dicts(done.stdout) == shown_dicts(code)
    envs = _run(venv, [str(bin_ / "nonstop"), "envs"], tmp_path)
    assert envs.returncode == 0 and "Boxing" in envs.stdout, envs.stderr[-2000:]
    refused = _run(venv, [str(bin_ / "nonstop"), "demo"], tmp_path)  # without the learn extra: one line naming it
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "pip install" in refused.stderr, (
        refused.stderr
    )
    assert not (tmp_path / "nonstop-demo").exists()

    install = _readme_line(lambda argv: argv[:2] == ["pip", "install"] and any(".[learn" in w for w in argv))
    _pip(venv, install, log)
    demo = _readme_line(lambda argv: argv[:2] == ["nonstop", "demo"])
    started = time.monotonic()
    done = _run(venv, [str(bin_ / demo[0]), *demo[1:], "--quick"], tmp_path)
    log.append(f"{' '.join(demo)} --quick: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "nonstop-demo"
    for name in ("sequential_vs_staggered.png", "learning_staggered_vs_sequential.png", "train-staggered/summary.json"):
        assert (out / name).exists(), f"the demo left no {name}"
    print("; ".join(log))  # how long each step took (pytest -s shows it)
    assert command_words("nonstop demo") == demo  # the README's command is what a user types, unchanged
