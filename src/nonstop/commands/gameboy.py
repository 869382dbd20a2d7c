"""``nonstop gameboy``: find and check a game's ROM, or record a start state tied to it (nonstop ships no ROM)."""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "Game Boy ROMs and save states (nonstop ships no ROM)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nonstop.envs.gameboy import GAMES

    gb = p.add_subparsers(dest="gameboy_command", metavar="ACTION", required=True)
    q = gb.add_parser("check", help="find and validate a game's ROM (and a save state) without running it")
    q.add_argument("--game", required=True, choices=list(GAMES))
    q.add_argument("--rom", help="ROM file or directory (default: $NONSTOP_ROMS)")
    q.add_argument("--state", help="a nonstop save state to check against the ROM (default: none)")
    q = gb.add_parser("record-state", help="record a start state (e.g. a Pokémon encounter) tied to your ROM")
    q.add_argument("--game", required=True, choices=list(GAMES))
    q.add_argument("--rom", help="ROM file or directory (default: $NONSTOP_ROMS)")
    q.add_argument(
        "--from",
        dest="from_state",
        help="start from this PyBoy state (in PyBoy's window, Z saves one; default: power-on)",
    )
    q.add_argument(
        "--press", default="", help="buttons to play first, e.g. 'a*2,wait*60,down' (frames held; default: none)"
    )
    q.add_argument(
        "--boot-frames",
        type=int,
        default=None,
        help="frames to run from power-on when not --from (default: the game's own)",
    )
    q.add_argument("--out", required=True, help="where to write the nonstop save state")


def run(args: argparse.Namespace) -> int:
    from nonstop.envs import gameboy, gbtools

    if args.gameboy_command == "check":
        found = gameboy.find_rom(args.game, args.rom)
        gameboy.check_gameboy_kwargs(args.game, rom=args.rom, state=args.state)
        header = found.header
        print(
            f"{args.game}: {found.source}, title {header.title!r}, {header.rom_banks} banks, header and "
            f"global checksums OK, sha1 {header.sha1}" + (f"; state {args.state} matches" if args.state else "")
        )
        return 0
    report = gbtools.record_state(
        args.game, args.out, rom=args.rom, from_state=args.from_state, presses=args.press, boot_frames=args.boot_frames
    )
    print(
        f"recorded {report['out']}: {report['game']} on {report['rom']} ({report['title']!r}), "
        f"{report['frames_played']} frames of presses played"
    )
    return 0
