"""Every Python example in README.md and docs/*.md is a valid script, and each that can run alone
runs as a saved script and prints the `info` its page shows.

A snippet pasted into a file is how a newcomer first meets the library: it must survive
multiprocessing's bootstrap (the wall clock starts a child process) and the dict the README prints
must carry the keys the code really returns (they were renamed to ``nonstop_*`` once, and the README
kept showing the old ones).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_compat_openenv import no_shm_leak_module, openenv_010  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose examples are tested: the README and every page of docs/.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SRC = str(ROOT / "src")


def python_blocks() -> list[str]:
    return [b for page in PAGES for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)]


def block(marker: str) -> str:
    """The one python block, on whichever page it lives, that contains ``marker``."""
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, f"the README and docs/ should have one python block with {marker!r}, found {len(found)}"
    return found[0]


def shown_dicts(code: str) -> list[set[str]]:
    """The key sets of the dicts the README shows in ``# {...}`` comments after a print."""
    shown, current = [], None
    for line in code.splitlines():
        text = line.strip()
        if text.startswith("#") and "{" in text and current is None:
            current = text[text.index("{") :]
        elif text.startswith("#") and current is not None:
            current += " " + text[1:].strip()
        elif current is not None:
            shown.append(set(re.findall(r"'(\w+)':", current)))
            current = None
    if current is not None:
        shown.append(set(re.findall(r"'(\w+)':", current)))
    return shown


def printed_dicts(stdout: str) -> list[set[str]]:
    return [set(re.findall(r"'(\w+)':", line)) for line in stdout.splitlines() if "{" in line]


def run_saved(code: str, tmp_path: Path, *args: str, pythonpath: str = SRC) -> subprocess.CompletedProcess:
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run(
        [sys.executable, str(script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_every_python_block_is_a_valid_script():
    blocks = python_blocks()
    assert len(blocks) >= 6
    for code in blocks:
        ast.parse(code)  # no top-level await, no bare expressions standing in for output


@pytest.mark.wall
def test_first_example_runs_as_a_saved_script_and_prints_the_info_shown(tmp_path):
    code = block('nonstop.make("Boxing"')
    shown = shown_dicts(code)
    assert shown and all(k.startswith("nonstop_") for k in shown[0])
    done = run_saved(code, tmp_path)
    assert printed_dicts(done.stdout) == shown


@pytest.mark.wall
def test_server_example_runs_as_a_saved_script_and_prints_the_info_shown(tmp_path, no_shm_leak_module):  # noqa: F811
    pytest.importorskip("fastapi")
    from nonstop.server.app import ServerThread

    code = block("from nonstop.server.client import")
    shown = shown_dicts(code)
    assert len(shown) == 2
    with ServerThread() as srv:
        done = run_saved(code, tmp_path, srv.url)
    assert printed_dicts(done.stdout) == shown


@pytest.mark.wall
@pytest.mark.network
@pytest.mark.slow
def test_openenv_example_runs_as_a_saved_script(tmp_path, openenv_010, no_shm_leak_module):  # noqa: F811
    pytest.importorskip("fastapi")
    from nonstop.server.app import ServerThread

    code = block("from openenv.core")
    with ServerThread(idle_timeout=30.0) as srv:
        run_saved(code, tmp_path, srv.url.replace("ws://", "http://"), pythonpath=str(openenv_010))
        started = [s for s in srv.manager.list_sessions()]
    assert len(started) >= 2  # the generic client's session and the MCP tool's


def test_pettingzoo_example_runs_as_a_saved_script(tmp_path):
    pytest.importorskip("pettingzoo")
    run_saved(block("nonstop.make_parallel("), tmp_path)


def test_per_seat_inference_example_runs_as_a_saved_script(tmp_path):
    code = block("InferencePool(world, fast")
    run_saved(code + "\nprint(log.seat('second_0').summary()['inaction_fraction'])\n", tmp_path)
