"""The front door stays a page, and no documentation link is broken: README.md at most 200 lines, and every
relative link in README.md and docs/*.md names a file that exists and, with `#anchor`, a heading in it.

Anchors follow GitHub's rule for heading ids (lower-cased, punctuation other than `-` and `_` dropped, spaces
to `-`, a repeated id suffixed `-1`, `-2`, ...): github/cmark-gfm's anchor filter as the HTML pipeline
documents it; an anchor this rule misses is reported, so a mismatch shows up as a failure, not a pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 200

# [text](target) outside code; images too. Targets with a scheme (http:, mailto:) are not checked here.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their numbers, inline code spans removed."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, re.sub(r"`[^`]*`", "", line)))
    return out


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no file {dest.relative_to(root) if dest.is_relative_to(root) else dest}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading with anchor #{anchor} in {dest.name}")
    return problems


DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_fits_on_a_page() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md: {lines} lines, at most {MAX_README_LINES}"


def test_readme_keeps_the_quickstart_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    """The checker itself can fail: a missing file and a missing heading are both reported; code is skipped."""
    (tmp_path / "other.md").write_text("# Other\n## What `make demo` shows\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#what-make-demo-shows) [gone](missing.md) [bad](other.md#nowhere)\n"
        "```\n[in code](missing-too.md)\n```\n[web](https://example.org/x)\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 2, problems
    assert "no file missing.md" in problems[0]
    assert "#nowhere" in problems[1]


def test_slug_follows_github_rule() -> None:
    assert slug("What `make demo` shows") == "what-make-demo-shows"
    assert slug("Sharded replay (fleet scale)") == "sharded-replay-fleet-scale"
    assert slug("RBAC: the run's identity") == "rbac-the-runs-identity"
