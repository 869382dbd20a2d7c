"""``nonstop serve``: realtime worlds over WebSocket (OpenEnv's protocol plus realtime verbs), with a live page."""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "serve realtime worlds over WebSocket (OpenEnv protocol + realtime verbs)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_what_arguments(p)
    _add_access_arguments(p)
    _add_limit_arguments(p)
    _add_tick_arguments(p)
    p.add_argument("--log-level", default="info")


def _add_what_arguments(p: argparse.ArgumentParser) -> None:
    """What is served: the envs and their module."""
    p.add_argument(
        "--env",
        action="append",
        help="env id to serve (repeat for several; first is the default; Boxing), "
        "or MODULE:ID for a world your own module registers",
    )
    from nonstop.commands._flags import add_env_module_argument

    add_env_module_argument(p)


def _add_access_arguments(p: argparse.ArgumentParser) -> None:
    """Who may reach the server: its address, token, and the hosts and origins it answers."""
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only; any other needs a token or --insecure-no-token)",
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--token",
        help="require 'Authorization: Bearer TOKEN' on every request and socket; 'generate': a fresh random "
        "token, printed as the live page's address /#token=... (a token typed here is visible to every "
        "user in ps: prefer --token-file or $NONSTOP_TOKEN)",
    )
    p.add_argument("--token-file", help="read the token from this file's first line (else $NONSTOP_TOKEN, if set)")
    p.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="serve a non-loopback --host without a token: anyone who reaches it can drive every session",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to this host name (repeat; e.g. the name a reverse proxy "
        "forwards; '*': any); loopback names and the bind address are always allowed",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="URL",
        help="also let web pages of this origin use the server (repeat; e.g. https://game.example.com); "
        "the server's own page is always allowed",
    )


def _add_limit_arguments(p: argparse.ArgumentParser) -> None:
    """How much it holds: sessions, connections, their timeouts, and the replays it keeps."""
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="open WebSocket connections allowed at once; one more is refused (close code 1013)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=30.0,
        help="close a WebSocket connection that has started no session within this many seconds",
    )
    p.add_argument("--idle-timeout", type=float, default=60.0, help="end a session after this many silent seconds")
    p.add_argument("--replay-dir", help="record a replay of every session into this directory")
    p.add_argument(
        "--replay-keep",
        type=int,
        default=1000,
        help="keep at most this many replays in --replay-dir, pruning the oldest first (0: no limit)",
    )
    p.add_argument(
        "--replay-max-mb",
        type=float,
        default=0.0,
        help="keep at most this many MB of replays in --replay-dir, oldest pruned first (0: no limit)",
    )


def _add_tick_arguments(p: argparse.ArgumentParser) -> None:
    """Where and how sessions tick: threads, worker processes, their scheduling, warm envs, the GIL."""
    p.add_argument("--tick-threads", type=int, default=2, help="threads of the tick pool")
    p.add_argument(
        "--tick-procs",
        type=int,
        default=2,
        help="tick sessions on this many worker processes, past the one core of one GIL (default 2; "
        "0: on threads of the server process); the server process still owns every session",
    )
    p.add_argument(
        "--tick-sched",
        choices=("auto", "fifo", "nice", "normal"),
        default="auto",
        help="scheduling of the tick workers' tick threads (auto: SCHED_FIFO, else nice -10, where "
        "permitted, like every wall-clock host)",
    )
    p.add_argument(
        "--warm-envs",
        type=int,
        default=2,
        help="envs per env id built and seeded ahead, for fast starts of unseeded sessions",
    )
    p.add_argument(
        "--switch-interval",
        type=float,
        default=0.0005,
        help="Python's GIL switch interval (s): how long the request loop can hold a due tick back",
    )


def run(args: argparse.Namespace) -> int:
    from nonstop.commands._flags import env_of
    from nonstop.server.app import resolve_token, serve
    from nonstop.server.auth import GENERATE, generate_token

    if args.token == GENERATE:
        if args.token_file is not None:
            raise ValueError("give the token once: --token generate or --token-file, not both")
        token: str | None = generate_token()
    else:
        token = resolve_token(args.token, args.token_file)
    return serve(
        [env_of(env, args) for env in args.env or ["Boxing"]],
        host=args.host,
        port=args.port,
        token=token,
        allow_hosts=args.allow_host,
        allow_origins=args.allow_origin,
        insecure_no_token=args.insecure_no_token,
        show_token=args.token == GENERATE,
        max_sessions=args.max_sessions,
        idle_timeout=args.idle_timeout,
        replay_dir=args.replay_dir,
        tick_threads=args.tick_threads,
        tick_procs=args.tick_procs,
        tick_sched=args.tick_sched,
        warm_envs=args.warm_envs,
        switch_interval=args.switch_interval,
        log_level=args.log_level,
        connect_timeout=args.connect_timeout,
        max_connections=args.max_connections,
        replay_keep=args.replay_keep,
        replay_max_mb=args.replay_max_mb,
    )
