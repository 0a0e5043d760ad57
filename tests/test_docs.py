"""The README stays a short entry point and the documentation under docs/ stays reachable and linked correctly.

Issue 34 (item 7): the README is what a newcomer reads first, so it is held to a size and must show both set-up
commands near its top; everything else lives in docs/, so every page there must be reachable from the README, and
no relative link (or ``#anchor`` into a Markdown file) may point at something that does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

#: The issue's limit on the README's size.
README_MAX_BYTES = 12 * 1024
#: The set-up commands must be visible without scrolling far: within this many lines of the top.
SETUP_COMMANDS_WITHIN_LINES = 40

#: A Markdown inline link or image: ``[text](target)`` or ``![alt](target "title")``; the target is group 1.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
#: Targets that leave the repository: not checked (no network in tests).
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a ``# comment`` in a shell block is not a heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _strip_code_spans(line: str) -> str:
    """The line without its inline code spans, where brackets and parentheses are literal text."""
    return re.sub(r"`[^`]*`", "", line)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation other than '-' and '_' dropped, spaces to '-'.

    Link syntax inside a heading counts by its text only; backticks and emphasis are punctuation and vanish.
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, a repeated heading numbered as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = github_slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The targets of the inline links in a Markdown file's prose (code blocks and code spans are not links)."""
    targets = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        targets += _LINK.findall(_strip_code_spans(line))
    return targets


def _resolve(source: Path, target: str) -> tuple[Path, str]:
    """The file a relative link points at and its anchor ('' when none); a bare '#x' points into the source."""
    file_part, _, anchor = target.partition("#")
    path = source if not file_part else (source.parent / file_part).resolve()
    return path, anchor


def test_readme_is_short():
    size_bytes = README.stat().st_size
    assert size_bytes <= README_MAX_BYTES, (
        f"README.md is {size_bytes} bytes, over the {README_MAX_BYTES}-byte limit: move reference text to docs/")


@pytest.mark.parametrize("command", ["make run", "make test"])
def test_readme_shows_setup_commands_near_the_top(command):
    top = "\n".join(README.read_text(encoding="utf-8").splitlines()[:SETUP_COMMANDS_WITHIN_LINES])
    assert command in top, f"`{command}` is not within the first {SETUP_COMMANDS_WITHIN_LINES} lines of README.md"


def test_every_docs_page_is_linked_from_readme_or_a_page_it_links():
    linked_from_readme = {_resolve(README, t)[0] for t in links(README) if not _EXTERNAL.match(t)}
    second_hop = {
        _resolve(page, t)[0]
        for page in linked_from_readme if page.suffix == ".md" and page.is_file()
        for t in links(page) if not _EXTERNAL.match(t)
    }
    for page in sorted(DOCS.rglob("*.md")):
        name = page.relative_to(ROOT)
        assert page.resolve() in linked_from_readme | second_hop, (
            f"{name} is linked neither from README.md nor from any page README.md links: add it to README.md's "
            "Documentation list or to the index page of its folder")


@pytest.mark.parametrize("source", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings_that_exist(source):
    broken = []
    for target in links(source):
        if _EXTERNAL.match(target):
            continue
        path, anchor = _resolve(source, target)
        if not path.exists():
            broken.append(f"{target} (no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no heading with anchor #{anchor} in {path.relative_to(ROOT)})")
    assert not broken, f"{source.relative_to(ROOT)} has broken links: " + "; ".join(broken)


@pytest.mark.parametrize(("heading", "anchor"), [
    ("5. Power, energy and efficiency", "5-power-energy-and-efficiency"),
    ("16.4.1 The gpu pipeline's batched augmentation", "1641-the-gpu-pipelines-batched-augmentation"),
    ("`clsbench profile`: where a step's time goes", "clsbench-profile-where-a-steps-time-goes"),
    ("Profiles (`run --profile`: `measure/profiler.py`)", "profiles-run---profile-measureprofilerpy"),
    ("snake_case stays", "snake_case-stays"),
])
def test_slugs_follow_githubs_rules(heading, anchor):
    # The link checks are only as good as this function: these are the anchors GitHub gives these headings.
    assert github_slug(heading) == anchor


def test_link_checks_see_a_broken_link_and_a_broken_anchor(tmp_path):
    # The link test must be able to fail: a missing file and a missing heading are both reported.
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Real heading\n\n[a](missing.md) [b](#no-such) [c](#real-heading)\n"
                    "```sh\n# not a heading\n[d](not-a-link.md)\n```\n", encoding="utf-8")
    assert links(page) == ["missing.md", "#no-such", "#real-heading"]
    assert anchors(page) == {"title", "real-heading"}
    assert not _resolve(page, "missing.md")[0].exists()
