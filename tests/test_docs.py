"""The README and docs/ read as a manual: short, present tense, no lab history, no dead links.

What an operator reads must stay a product manual: the README a front door, docs/ within the
project's line budget, no run-by-run narrative (sittings, dated prose, issue numbers, first
person), and every relative link and in-page anchor pointing at something that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

README_MAX_LINES = 150
DOCS_MAX_LINES = 3500


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_readme_is_a_front_door_of_at_most_150_lines():
    assert _lines(README) <= README_MAX_LINES, f"README.md has {_lines(README)} lines (at most {README_MAX_LINES})"


def test_docs_stay_within_the_line_budget():
    total = sum(_lines(p) for p in DOCS.rglob("*.md"))
    assert total <= DOCS_MAX_LINES, f"docs/**/*.md hold {total} lines (at most {DOCS_MAX_LINES})"


# A raw data file's name may carry the date it was measured (bench/gpu/results/anchor/anchor-2026-11-29.csv):
# that is a path to copy, not dated prose, so file names are taken out before the date check.
_DATA_FILE = re.compile(r"[\w./{},*-]+\.(?:csv|txt|json|jsonl)\b")
_FORBIDDEN = {
    "the word 'sitting' (lab history)": re.compile(r"\bsittings?\b", re.IGNORECASE),
    "a date (20YY-MM) in prose": re.compile(r"\b20\d\d-\d\d"),
    "an issue number": re.compile(r"\bissue\s+#?\d+", re.IGNORECASE),
    "the first person ' I '": re.compile(r"(?:^|\s)I(?=[\s,.;:!?]|$)"),
}


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_a_page_has_no_lab_notebook_words(page: Path):
    found = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        prose = _DATA_FILE.sub("", line)
        found += [f"{_rel(page)}:{number}: {what}: {line.strip()[:100]}"
                  for what, pattern in _FORBIDDEN.items() if pattern.search(prose)]
    assert not found, "\n".join(found)


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _prose_lines(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks (a link in a code sample is not a link)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in _prose_lines(path):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = heading.group(1).lower().replace("`", "")
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=_rel)
def test_every_relative_link_points_at_an_existing_file_and_heading(page: Path):
    broken = []
    for line in _prose_lines(page):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                broken.append(f"{_rel(page)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_rel(page)}: {target} (no such heading in {_rel(dest)})")
    assert not broken, "\n".join(broken)
