"""``nonstop replay``: verify, plot or render a session replay written by the server."""

from __future__ import annotations

import argparse
import json

__all__ = ["HELP", "add_arguments", "run"]

HELP = "verify, plot or render a session replay"


def add_arguments(p: argparse.ArgumentParser) -> None:
    rsub = p.add_subparsers(dest="replay_command", metavar="ACTION", required=True)
    for name, help_text in (
        ("verify", "re-simulate and check every observation hash (exit 1 on mismatch)"),
        ("plot", "timeline PNG: agent vs β ticks, delay, return"),
        ("video", "GIF (or MP4 with imageio[ffmpeg]) of the re-simulated frames"),
    ):
        rp = rsub.add_parser(name, help=help_text)
        rp.add_argument("file", help="replay .npz written by the server")
        if name != "verify":
            rp.add_argument("--out", help="output file (default: next to FILE)")
        if name == "video":
            rp.add_argument("--every", type=int, default=2, help="keep one frame in EVERY ticks")
        if name != "plot":  # verify and video re-simulate: they build the world the replay names
            rp.add_argument(
                "--trust-module",
                action="store_true",
                help="import the module the replay's world names (module:Id), from PYTHONPATH; without it a "
                "replay that names one is refused (a file from elsewhere runs no code)",
            )


def run(args: argparse.Namespace) -> int:
    from nonstop.envs.registry import import_file_module
    from nonstop.server import replay

    rec = replay.Replay.load(args.file)
    if args.replay_command != "plot":  # re-simulating builds the world: its module only if trusted
        import_file_module(str(rec.header.get("env", "")), f"replay {args.file}", trust=args.trust_module)
    if args.replay_command == "verify":
        result = replay.verify(rec)
        print(json.dumps({**result.as_dict(), **rec.summary()}))
        return 0 if result.ok else 1
    if args.replay_command == "plot":
        out = replay.plot_replay(rec, args.out or str(args.file).removesuffix(".npz") + ".png")
    else:
        out = replay.write_video(rec, args.out or str(args.file).removesuffix(".npz") + ".gif", every=args.every)
    print(out)
    return 0
