"""Game Boy cartridge headers, and a tiny test ROM that nonstop assembles itself.

nonstop cannot ship commercial ROMs, yet the whole Game Boy path (loading, realtime ticking, β,
buttons, rewards read from memory, replays) must run for real on every CI run. So this module
hand-assembles a 32 KiB ROM-only cartridge (SM83 opcodes encoded here; no assembler is needed)
whose program reads the joypad once per frame and keeps a few counters in work RAM:

=========  ===========================================================================
address    meaning (:data:`TEST_ROM_RAM` names them)
=========  ===========================================================================
``C000``   frame counter, +1 every frame (wraps at 256)
``C001``   the joypad this frame: bit 0 A, 1 B, 2 SELECT, 3 START, 4 RIGHT, 5 LEFT, 6 UP, 7 DOWN
``C002``   x: +1 per frame RIGHT is held, -1 per frame LEFT is held; scrolls the screen (SCX)
``C003``   y: +1 per frame UP is held, -1 per frame DOWN is held; scrolls the screen (SCY)
``C004``   game over: set to 1 when x reaches 64; the program then stops reading the joypad
``C0A0``   score, 3 bytes of little-endian BCD (the layout Tetris uses): +1 per frame A is
           held, +10 per frame B is held
=========  ===========================================================================

The screen shows a checkerboard of 8-pixel tiles that scrolls with x and y, so observations change
with actions. The program runs in VBlank, like real games: RAM reflects a button on the frame it is
held, the screen one frame later (the scroll registers are drawn on the next frame).
The boot-logo area is left blank: PyBoy's boot ROM does not check it (a real console would).

This module also parses and validates any cartridge header (:class:`CartridgeHeader`), which is
how nonstop recognises a user's ROM (title) and refuses a corrupt one (checksums).

>>> rom = build_test_rom()
>>> header = CartridgeHeader.parse(rom)
>>> header.title, len(rom), header.header_checksum_ok, header.global_checksum_ok
('NONSTOP TEST', 32768, True, True)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CartridgeHeader",
    "RomError",
    "TEST_ROM_TITLE",
    "TEST_ROM_RAM",
    "build_test_rom",
    "header_checksum",
    "global_checksum",
]

TEST_ROM_TITLE: Final = "NONSTOP TEST"
#: Work-RAM addresses the test ROM's program keeps (see the module docstring).
TEST_ROM_RAM: Final = {
    "frame": 0xC000,
    "joypad": 0xC001,
    "x": 0xC002,
    "y": 0xC003,
    "game_over": 0xC004,
    "score": 0xC0A0,
}
#: x at which the test ROM's game ends.
TEST_ROM_GAME_OVER_X: Final = 64

BANK_SIZE: Final = 0x4000
_HEADER_END: Final = 0x150
_TITLE: Final = slice(0x134, 0x144)


class RomError(ValueError):
    """A ROM or save state that nonstop cannot use; the message says what was expected and why."""


# --- the cartridge header -------------------------------------------------------------------------


def header_checksum(rom: bytes | bytearray) -> int:
    """The header checksum over ``0x134..0x14C`` that the boot ROM verifies (stored at ``0x14D``)."""
    x = 0
    for byte in rom[0x134:0x14D]:
        x = (x - byte - 1) & 0xFF
    return x


def global_checksum(rom: bytes | bytearray) -> int:
    """The 16-bit sum of every byte but the two that hold it (stored big-endian at ``0x14E``)."""
    return (sum(rom) - rom[0x14E] - rom[0x14F]) & 0xFFFF


@dataclass(frozen=True)
class CartridgeHeader:
    """The identity of a Game Boy cartridge, read from its header (Pan Docs, "The Cartridge Header").

    ``title`` is what nonstop matches a game by; the checksums tell a good dump from a corrupt one.
    """

    title: str
    cartridge_type: int
    rom_banks: int
    header_checksum: int
    header_checksum_ok: bool
    global_checksum: int
    global_checksum_ok: bool
    sha1: str

    @classmethod
    def parse(cls, rom: bytes | bytearray, *, source: str = "the ROM") -> "CartridgeHeader":
        """Read the header of ``rom``; raise :class:`RomError` if it cannot be a Game Boy ROM at all."""
        if not isinstance(rom, (bytes, bytearray)):
            raise TypeError(f"rom must be bytes, got {type(rom).__name__}")
        if len(rom) < 2 * BANK_SIZE or len(rom) % BANK_SIZE:
            raise RomError(
                f"{source} is {len(rom)} bytes; a Game Boy ROM is a multiple of 16 KiB and at least "
                f"32 KiB. Is it a Game Boy ROM (.gb/.gbc), and is the file complete?"
            )
        # CGB titles are 15 bytes with a flag in the 16th; older ones use all 16. Stop at NUL either way.
        raw = bytes(rom[_TITLE])
        if raw[15] & 0x80:
            raw = raw[:15]
        title = raw.split(b"\0", 1)[0].decode("ascii", errors="replace").rstrip()
        stored_global = (rom[0x14E] << 8) | rom[0x14F]
        return cls(
            title=title,
            cartridge_type=rom[0x147],
            rom_banks=len(rom) // BANK_SIZE,
            header_checksum=rom[0x14D],
            header_checksum_ok=header_checksum(rom) == rom[0x14D],
            global_checksum=stored_global,
            global_checksum_ok=global_checksum(rom) == stored_global,
            sha1=hashlib.sha1(bytes(rom)).hexdigest(),
        )


# --- a two-pass assembler for the few SM83 instructions the test program needs -------------------


class _Program:
    """Bytes plus labels; relative and absolute jumps are patched once every label is known."""

    def __init__(self, origin: int) -> None:
        self.origin = origin
        self.code = bytearray()
        self.labels: dict[str, int] = {}
        self._fixups: list[tuple[int, str, str]] = []  # (offset in code, label, "rel" | "abs")

    @property
    def here(self) -> int:
        return self.origin + len(self.code)

    def label(self, name: str) -> None:
        self.labels[name] = self.here

    def emit(self, *data: int) -> None:
        self.code.extend(data)

    def jr(self, opcode: int, target: str) -> None:
        """JR (0x18), JR NZ (0x20), JR Z (0x28), JR NC (0x30), JR C (0x38) to ``target``."""
        self.emit(opcode, 0)
        self._fixups.append((len(self.code) - 1, target, "rel"))

    def jp_or_call(self, opcode: int, target: str) -> None:
        """JP nn (0xC3) or CALL nn (0xCD) to ``target``."""
        self.emit(opcode, 0, 0)
        self._fixups.append((len(self.code) - 2, target, "abs"))

    def link(self) -> bytes:
        for offset, target, kind in self._fixups:
            address = self.labels[target]
            if kind == "rel":
                delta = address - (self.origin + offset + 1)
                if not -128 <= delta <= 127:
                    raise ValueError(f"JR to {target} is {delta} bytes away; use JP")
                self.code[offset] = delta & 0xFF
            else:
                self.code[offset : offset + 2] = address.to_bytes(2, "little")
        return bytes(self.code)


# Opcodes by mnemonic (Pan Docs, "CPU Instruction Set"); n: an immediate byte, nn: little-endian word.
NOP, DI, EI, HALT, RETI, RET = 0x00, 0xF3, 0xFB, 0x76, 0xD9, 0xC9
JR, JR_NZ, JR_Z, JR_C = 0x18, 0x20, 0x28, 0x38
JP, CALL = 0xC3, 0xCD
LD_A_n, LD_B_n, LD_SP_nn, LD_HL_nn, LD_BC_nn = 0x3E, 0x06, 0x31, 0x21, 0x01
LDH_n_A, LDH_A_n, LD_nn_A, LD_A_nn = 0xE0, 0xF0, 0xEA, 0xFA
LD_HLi_A, LD_A_HLi, LD_A_HL, LD_HL_A = 0x22, 0x2A, 0x7E, 0x77
LD_B_A, LD_C_A, LD_A_B, LD_A_L = 0x47, 0x4F, 0x78, 0x7D
XOR_A, XOR_L, AND_A, AND_n, OR_B, OR_C, CPL = 0xAF, 0xAD, 0xA7, 0xE6, 0xB0, 0xB1, 0x2F
ADD_A_B, ADC_A_n, DAA, INC_A, DEC_A, DEC_B, DEC_BC, CP_n, RRCA = 0x80, 0xCE, 0x27, 0x3C, 0x3D, 0x05, 0x0B, 0xFE, 0x0F
SWAP_A = (0xCB, 0x37)


def _bit_c(bit: int) -> tuple[int, int]:
    """``BIT bit, C``: Z is set when that bit of C is 0."""
    return (0xCB, 0x41 + 8 * bit)


# I/O registers (Pan Docs, "Memory Map" / "Hardware Registers"), as LDH offsets from 0xFF00.
_P1, _IF, _LCDC, _SCY, _SCX, _LY, _BGP, _IE = 0x00, 0x0F, 0x40, 0x42, 0x43, 0x44, 0x47, 0xFF


def _program() -> bytes:
    """The test game's code at 0x150 (see the module docstring for what it keeps in RAM)."""
    ram = TEST_ROM_RAM
    p = _Program(_HEADER_END)
    p.emit(DI, LD_SP_nn, 0xFE, 0xFF)
    # The LCD may only be switched off during VBlank (LY >= 144).
    p.label("wait_vblank")
    p.emit(LDH_A_n, _LY, CP_n, 144)
    p.jr(JR_C, "wait_vblank")
    p.emit(XOR_A, LDH_n_A, _LCDC)
    # Tile 0 blank, tile 1 solid black.
    p.emit(LD_HL_nn, 0x00, 0x80, LD_B_n, 16)
    p.label("tile0")
    p.emit(LD_HLi_A, DEC_B)
    p.jr(JR_NZ, "tile0")
    p.emit(LD_A_n, 0xFF, LD_B_n, 16)
    p.label("tile1")
    p.emit(LD_HLi_A, DEC_B)
    p.jr(JR_NZ, "tile1")
    # Background map 0x9800-0x9BFF: a checkerboard, tile = bit 0 of the column ^ bit 0 of the row
    # (bits 0 and 5 of the map offset, which equal bits 0 and 5 of L since the map starts at 0x9800).
    p.emit(LD_HL_nn, 0x00, 0x98, LD_BC_nn, 0x00, 0x04)
    p.label("fill")
    p.emit(LD_A_L, *SWAP_A, RRCA, XOR_L, AND_n, 1, LD_HLi_A, DEC_BC, LD_A_B, OR_C)
    p.jr(JR_NZ, "fill")
    # The game's variables start at zero.
    p.emit(XOR_A)
    for name in ("frame", "joypad", "x", "y", "game_over"):
        p.emit(LD_nn_A, *ram[name].to_bytes(2, "little"))
    for i in range(3):
        p.emit(LD_nn_A, *(ram["score"] + i).to_bytes(2, "little"))
    p.emit(LDH_n_A, _SCY, LDH_n_A, _SCX, LDH_n_A, _IF)
    p.emit(LD_A_n, 0xE4, LDH_n_A, _BGP)  # shades 0..3 -> white, light, dark, black
    p.emit(LD_A_n, 0x91, LDH_n_A, _LCDC)  # LCD on, BG tiles at 0x8000, BG map 0x9800, BG on
    p.emit(LD_A_n, 0x01, LDH_n_A, _IE, EI)  # wake on VBlank only
    # Once per frame: sleep until VBlank, as real games do (PyBoy skips halted cycles quickly).
    p.label("main")
    p.emit(HALT, NOP)
    p.emit(LD_A_nn, *ram["frame"].to_bytes(2, "little"), INC_A, LD_nn_A, *ram["frame"].to_bytes(2, "little"))
    p.emit(LD_A_nn, *ram["game_over"].to_bytes(2, "little"), AND_A)
    p.jr(JR_NZ, "main")
    # Joypad: select the d-pad (P14 low), read it twice to let it settle, pressed bits read 0.
    p.emit(LD_A_n, 0x20, LDH_n_A, _P1, LDH_A_n, _P1, LDH_A_n, _P1, CPL, AND_n, 0x0F, *SWAP_A, LD_B_A)
    p.emit(LD_A_n, 0x10, LDH_n_A, _P1, LDH_A_n, _P1, LDH_A_n, _P1, CPL, AND_n, 0x0F, OR_B)
    p.emit(LD_nn_A, *ram["joypad"].to_bytes(2, "little"), LD_C_A, LD_A_n, 0x30, LDH_n_A, _P1)
    for bit, name, step in ((4, "x", INC_A), (5, "x", DEC_A), (6, "y", INC_A), (7, "y", DEC_A)):
        skip = f"skip_{bit}"
        p.emit(*_bit_c(bit))
        p.jr(JR_Z, skip)
        p.emit(LD_A_nn, *ram[name].to_bytes(2, "little"), step, LD_nn_A, *ram[name].to_bytes(2, "little"))
        p.label(skip)
    p.emit(LD_A_nn, *ram["x"].to_bytes(2, "little"), LDH_n_A, _SCX)
    p.emit(LD_A_nn, *ram["y"].to_bytes(2, "little"), LDH_n_A, _SCY)
    for bit, points in ((0, 0x01), (1, 0x10)):  # BCD: A adds 1, B adds 10
        skip = f"no_points_{bit}"
        p.emit(*_bit_c(bit))
        p.jr(JR_Z, skip)
        p.emit(LD_A_n, points)
        p.jp_or_call(CALL, "add_score")
        p.label(skip)
    p.emit(LD_A_nn, *ram["x"].to_bytes(2, "little"), CP_n, TEST_ROM_GAME_OVER_X)
    p.jr(JR_NZ, "alive")
    p.emit(LD_A_n, 1, LD_nn_A, *ram["game_over"].to_bytes(2, "little"))
    p.label("alive")
    p.jp_or_call(JP, "main")
    # add_score: score (3-byte little-endian BCD) += A, carrying through DAA.
    p.label("add_score")
    p.emit(LD_HL_nn, *ram["score"].to_bytes(2, "little"), LD_B_A)
    p.emit(LD_A_HL, ADD_A_B, DAA, LD_HLi_A)
    p.emit(LD_A_HL, ADC_A_n, 0, DAA, LD_HLi_A)
    p.emit(LD_A_HL, ADC_A_n, 0, DAA, LD_HL_A, RET)
    return p.link()


def build_test_rom(title: str = TEST_ROM_TITLE) -> bytes:
    """The 32 KiB test cartridge (ROM only, DMG), with valid header and global checksums.

    ``title`` (ASCII, at most 15 characters) lets tests build a "wrong game" with the same program.
    """
    if not isinstance(title, str) or not title or len(title) > 15 or not title.isascii():
        raise ValueError(f"title must be 1 to 15 ASCII characters, got {title!r}")
    rom = bytearray(b"\xff" * (2 * BANK_SIZE))
    rom[0x0040] = RETI  # VBlank interrupt vector: just wake the HALT in the main loop
    rom[0x0100:0x0104] = bytes((NOP, JP, 0x50, 0x01))  # entry point: jump over the header
    rom[0x0104:0x0134] = bytes(48)  # boot logo, left blank (see the module docstring)
    rom[0x0134:0x0144] = title.encode("ascii").ljust(16, b"\0")  # 0x143 = 0: a DMG-only cartridge
    rom[0x0144:0x014D] = bytes((0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00))
    # licensee, SGB flag, type ROM only, 32 KiB, no RAM, non-Japanese, old licensee, version 0
    program = _program()
    rom[_HEADER_END : _HEADER_END + len(program)] = program
    rom[0x14D] = header_checksum(rom)
    rom[0x14E:0x150] = global_checksum(rom).to_bytes(2, "big")
    return bytes(rom)
