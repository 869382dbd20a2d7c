"""``nonstop mcp``: an MCP server on stdio whose tools are realtime sessions, for LLM agents."""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "MCP server on stdio: realtime sessions as tools for LLM agents"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", action="append", help="env id to offer (repeat; first is the default; default: Boxing)")
    p.add_argument("--replay-dir", help="record a replay of every session into this directory (default: none)")


def run(args: argparse.Namespace) -> int:
    from nonstop.server.mcp import run_stdio

    return run_stdio(args.env or ["Boxing"], replay_dir=args.replay_dir)
