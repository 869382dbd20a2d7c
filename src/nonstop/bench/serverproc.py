"""The benchmarked server in a process of its own (``bench server`` and ``bench server --team``): started,
awaited, measured (CPU and RSS of its whole process tree from ``/proc``) and its sessions' end awaited."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

from nonstop.realtime.lifeline import hold_lifeline, reap

__all__ = ["launch", "closed_sessions", "cpu_s", "rss_mb", "server_health"]


def _tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (the server's tick workers and its resource tracker)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # exited meanwhile
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live descendants so far (all threads)."""
    total = 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mb(pid: int) -> tuple[float, float]:
    """RSS and peak RSS (MB) of process ``pid`` plus its live descendants (the peak: the sum of each
    process's own peak, an upper bound)."""
    rss = peak = 0.0
    for p in _tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key == "VmRSS":
                rss += float(value.split()[0]) / 1024.0
            elif key == "VmHWM":
                peak += float(value.split()[0]) / 1024.0
    return rss, peak


def _serve(envs: list[str], **settings: Any) -> None:
    """The benchmarked server (in its own process): no server outlives the bench."""
    from nonstop.server.app import serve

    hold_lifeline()
    sys.exit(serve(envs, **settings))


def launch(env: str, settings: dict[str, Any], warm: int) -> tuple[Any, str]:
    """The benchmarked server in a process of its own, serving ``env`` with ``settings`` (`serve`'s
    keywords), up and with ``warm`` warm envs ready: its process and its ``ws://`` address. The
    caller reaps it (`reap`)."""
    from nonstop.server.app import free_port
    from nonstop.server.client import http_get

    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    server = mp.get_context("spawn").Process(
        target=_serve, args=([env],), kwargs={**settings, "port": port}, name="nonstop-bench-server"
    )
    server.start()
    try:
        deadline = time.monotonic() + 120
        while not _healthy(url):
            if server.exitcode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start (exit code {server.exitcode})")
            time.sleep(0.1)
        while sum(http_get(url, "/health")["warm_envs_ready"].values()) < warm:
            if server.exitcode is not None or time.monotonic() > deadline + 600:
                raise RuntimeError("the server's warm envs did not get ready")
            time.sleep(0.2)
    except BaseException:
        reap(server, timeout=0, kill_after=60)
        raise
    return server, url


def _healthy(url: str) -> bool:
    from nonstop.server.client import http_get

    try:
        return http_get(url, "/health", timeout=1)["status"] == "healthy"
    except Exception:  # not up yet
        return False


def closed_sessions(url: str, sids: set[str], timeout: float = 60.0) -> list[dict[str, Any]]:
    """The server's info on sessions ``sids`` once all are closed (or ``timeout`` passed)."""
    from nonstop.server.client import http_get

    deadline = time.monotonic() + timeout
    while True:
        infos = [s for s in http_get(url, "/sessions") if s["session_id"] in sids]
        if all(s["lifecycle"] == "closed" for s in infos) or time.monotonic() > deadline:
            return infos
        time.sleep(0.1)


def server_health(url: str) -> dict[str, Any]:
    from nonstop.server.client import http_get

    return http_get(url, "/health")
