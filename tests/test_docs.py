"""The documentation holds together: every relative link in README.md and docs/*.md reaches a file
(and its ``#anchor`` a heading), every ``nonstop`` command the pages show parses, the README keeps
its quick start on the first screen and CI's command, and the licence pyproject.toml declares ships.

Links are checked the way GitHub renders them: a path relative to the page, an anchor as GitHub
slugs a heading. The pages' Python examples are run by ``tests/test_readme.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", flags=re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", flags=re.MULTILINE)


def _prose(text: str) -> str:
    """The page without its code blocks and inline code, where a ``[x](y)`` is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower-cased, punctuation dropped, spaces to hyphens.

    >>> slug("4b. Several agents in one world")
    '4b-several-agents-in-one-world'
    >>> slug("Gymnasium, Stable-Baselines3, torchrl: drop-in")
    'gymnasium-stable-baselines3-torchrl-drop-in'
    >>> slug("The paper's learning experiments: `nonstop sweep`")
    'the-papers-learning-experiments-nonstop-sweep'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading reads as its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` that lead nowhere, each with the reason."""
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.IGNORECASE):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix != ".md":
            broken.append(f"{target}: an anchor into a file that is not markdown")
        elif anchor and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


def test_the_link_checker_finds_broken_files_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A page\n\n## 1.3 Actions: the queue\n\n```\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/there.md) [ok anchor](docs/there.md#13-actions-the-queue) [web](https://example.com/x.md)\n"
        "[gone](docs/missing.md) [bad anchor](docs/there.md#14-observations) [code anchor](docs/there.md#not-a-heading)\n"
        "[self](#nowhere) `[in code](docs/also-missing.md)`\n\n```\n[in a block](docs/also-missing.md)\n```\n"
    )
    found = broken_links(page)
    assert [b.split(":")[0] for b in found] == [
        "docs/missing.md",
        "docs/there.md#14-observations",
        "docs/there.md#not-a-heading",
        "#nowhere",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_readme_links_every_docs_page_and_the_design_is_in_the_repository():
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in LINK.findall(_prose(readme.read_text()))}
    assert {p.resolve() for p in PAGES[1:]} <= linked, "a docs page the README does not link"
    assert (
        ROOT / "docs" / "design.md"
    ).exists() and "DESIGN" + ".md" not in readme.read_text()  # no document outside the repo


def test_design_has_every_section_the_code_cites():
    """The code cites "docs/design.md §1.3", "§4b" ...: each must be a heading of docs/design.md."""
    headings = HEADING.findall(FENCE.sub("", (ROOT / "docs" / "design.md").read_text()))
    numbers = {h.split()[0].rstrip(".") for h in headings}
    wanted = {"1", *(f"1.{i}" for i in range(1, 9)), "2", "3", "4", "4b", "4c", "5", "6", "7"}
    assert wanted <= numbers, sorted(wanted - numbers)


# ----------------------------------------------------------------------------- commands


def shown_commands(page: Path) -> tuple[list[str], list[str]]:
    """The ``nonstop ...`` commands a page shows: whole command lines in its bash blocks, and the
    commands its prose names in inline code (often a verb and a flag or two, without values)."""
    text = page.read_text()
    lines, spans = [], []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("#")[0].split("&&"):
                words = part.split()
                while words and re.match(r"^\w+=", words[0]):  # WANDB_MODE=offline nonstop train ...
                    words.pop(0)
                if words[:1] == ["nonstop"]:
                    lines.append(" ".join(words))
    spans = re.findall(r"`(nonstop [a-z][^`]*)`", FENCE.sub("", text))
    return lines, spans


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser the leading words of a command select (``bench nstar``), and the words left."""
    while words:
        sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not sub or words[0] not in sub[0].choices:
            break
        parser, words = sub[0].choices[words[0]], words[1:]
    return parser, words


def test_every_command_the_pages_show_parses():
    """Command lines parse as nonstop parses them; a command named in prose is a real verb whose
    every ``--flag`` that verb knows (its values may be left out or be placeholders)."""
    from nonstop.cli import build_parser

    parser = build_parser()
    verbs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0].choices
    refused = []
    shown = [shown_commands(page) for page in PAGES]
    lines = [c for page_lines, _ in shown for c in page_lines]
    spans = [c for _, page_spans in shown for c in page_spans]
    assert len(lines) > 10 and len(spans) > 30
    for command in lines:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                _, unknown = parser.parse_known_args(shlex.split(command)[1:])
        except (SystemExit, argparse.ArgumentError):
            refused.append(command)
            continue
        if unknown:
            refused.append(f"{command} (unknown: {unknown})")
    for command in spans:
        words = command.split()[1:]
        if words[0] not in verbs:
            refused.append(f"{command} (no verb {words[0]!r})")
            continue
        sub, rest = _subparser(parser, words)
        flags = {w.split("=")[0] for w in re.findall(r"--[a-z][\w-]*(?:=\S*)?", " ".join(rest))}
        unknown = sorted(flags - set(sub._option_string_actions))
        if unknown:
            refused.append(f"{command} (unknown: {unknown})")
    assert not refused, "the docs show commands nonstop refuses:\n" + "\n".join(refused)


# ----------------------------------------------------------------------------- the README, the licence


def test_the_readme_quick_start_fits_on_the_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    first = {
        verb: next((i for i, line in enumerate(lines) if f"nonstop {verb}" in line), None)
        for verb in ("demo", "train", "serve")
    }
    assert all(i is not None and i < 80 for i in first.values()), first


def test_ci_runs_the_readmes_second_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = 'pip install torch==2.13.0 -e ".[test]" && python -m pytest -q'
    assert command in readme and command in ci


def test_the_licence_is_the_one_pyproject_declares():
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "the nonstop authors" in licence
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()


def test_the_code_cites_only_the_projects_own_docs():
    """Citations of a design document outside the repository ("DESIGN §3") are gone: the code points
    at docs/design.md and docs/architecture.md, which are here."""
    import re

    outside = re.compile("DESIGN" + r"(\.md)? ?§")
    cited = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "src").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert cited == []
