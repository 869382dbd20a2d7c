"""The command lines the README and docs/*.md show, found where a reader finds them.

Two places hold commands: shell blocks (```bash, ```sh, ```shell, ```console) and backticked spans
in the prose (`nonstop report runs/cartpole`, `pip install -e ".[server]"`). A shell line is split
at ``&&`` and ``;`` into commands, a trailing ``\\`` joins the next line, ``# …`` comments go, and
environment assignments in front (``WANDB_MODE=offline nonstop train …``) stay with their command.
Used by tests/test_doc_commands.py.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose commands are checked: the README and every page of docs/.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = ("bash", "sh", "shell", "console")
#: What a command starts with to be collected (after its environment assignments).
PROGRAMS = ("nonstop", "python", "pip")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class DocCommand:
    """One command line as a page shows it: ``text`` is what a reader would type (comment stripped,
    continuation lines joined, whitespace collapsed)."""

    page: str  # relative to the repository root
    line: int
    text: str
    where: str  # "block" or "inline"
    block: int = 0  # the line of the block's opening fence (commands of one block run in order)
    env: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def argv(self) -> list[str]:
        """The words after the environment assignments."""
        return command_words(self.text)

    def at(self) -> str:
        return f"{self.page}:{self.line}"


def command_words(text: str) -> list[str]:
    """``A=1 nonstop envs`` → ['nonstop', 'envs']: the words after the environment assignments."""
    words = shlex.split(text)
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    return words


def _split_commands(text: str) -> list[str]:
    """``a && b ; c  # note`` → [a, b, c]: split outside quotes, the comment dropped, each as written."""
    pieces, current, quote, i = [], "", "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (not current or current[-1].isspace()):
            break
        elif text.startswith("&&", i) or text.startswith("||", i) or ch in ";|&":
            pieces.append(current)
            current = ""
            i += 2 if text.startswith(("&&", "||"), i) else 1
            continue
        current += ch
        i += 1
    pieces.append(current)
    return [" ".join(p.split()) for p in pieces if p.strip()]


def _environment(text: str) -> dict[str, str]:
    env = {}
    for word in shlex.split(text):
        if not _ASSIGNMENT.match(word):
            break
        key, _, value = word.partition("=")
        env[key] = value
    return env


def _is_command(text: str) -> bool:
    words = [w for w in shlex.split(text) if not _ASSIGNMENT.match(w)]
    return bool(words) and words[0] in PROGRAMS


def shell_commands(page: Path) -> list[DocCommand]:
    """Every command in the page's shell blocks, with its line."""
    found: list[DocCommand] = []
    fence: tuple[str, int] | None = None
    pending, pending_line = "", 0
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        opened = re.match(r"^\s*```(\S*)", line)
        if opened:
            fence = None if fence is not None else (opened.group(1), number)
            continue
        if fence is None or fence[0] not in SHELL_FENCES:
            continue
        stripped = line.strip()
        if not pending:
            pending_line = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical, pending = pending + stripped, ""
        for text in _split_commands(logical):
            if _is_command(text):
                found.append(
                    DocCommand(str(page.relative_to(ROOT)), pending_line, text, "block", fence[1], _environment(text))
                )
    return found


def inline_commands(page: Path) -> list[DocCommand]:
    """Every backticked ```nonstop …`` and ``pip install …`` span in the page's prose."""
    found: list[DocCommand] = []
    in_fence = False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if re.match(r"^\s*```", line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for _, span in re.findall(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", line):  # a code span: ``a`` or `a`
            text = " ".join(span.split())
            if re.match(r"^(nonstop [a-z]|pip install )", text):
                found.append(DocCommand(str(page.relative_to(ROOT)), number, text, "inline"))
    return found


def all_commands() -> list[DocCommand]:
    return [c for page in PAGES for c in (*shell_commands(page), *inline_commands(page))]


#: a word standing for a value the reader supplies (RUN, FILE, NAME, ID …), or an optional part
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")


def is_synopsis(text: str) -> bool:
    """A usage line rather than a command: ``[optional]`` parts, ``…``/``...``, a capitalised
    placeholder (``nonstop report RUN [--html]``) or a choice of values (``--device cpu|cuda``)."""
    words = text.replace("[", " ").replace("]", " ").split()
    if not words or words[0] != "nonstop":
        return False
    return (
        "[" in text
        or "…" in text
        or "..." in text
        or any(_PLACEHOLDER.match(w) for w in words[1:])
        or any("|" in w for w in words[1:])
    )


def synopsis_argv(text: str, values: dict[str, str]) -> list[str]:
    """The synopsis with every optional part taken, every placeholder given its sample value, and the
    first of each choice (``cpu|cuda`` → ``cpu``)."""
    words = text.replace("[", " ").replace("]", " ").replace("…", " ").replace("...", " ").split()
    out = []
    for word in (w.split("|")[0] for w in words):
        if _PLACEHOLDER.match(word):
            if word not in values:
                raise KeyError(word)
            out.append(values[word])
        else:
            out.append(word)
    return out
