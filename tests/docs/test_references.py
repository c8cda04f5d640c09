"""User-facing text points to docs/design.md or to papers: no mention of a design file
outside the repository, of the project's seed documents, of issue numbers or of
benchmark targets, in the package's docstrings and messages, the docs and the README.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BANNED = re.compile(r"DESIGN\.md|DESIGN §|seed 00\d|\bissue \d|\bTargets?\b.*\bmet\b")
#: Files allowed to mention such things (none).
ALLOWED: set[str] = set()


def _files() -> list[Path]:
    out = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    out += sorted((ROOT / "src" / "dpcurator").rglob("*.py"))
    return out


def test_no_private_references() -> None:
    bad = []
    for f in _files():
        rel = f.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        for n, line in enumerate(f.read_text().splitlines(), start=1):
            if BANNED.search(line):
                bad.append(f"{rel}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_design_and_tutorial_exist_and_are_linked() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    for part in (
        "## 2. Architecture",
        "## 4. Composition",
        "## 5. Adaptive composition",
        "## 6. Predicate queries and maximum overlap",
        "## 7. The curator",
        "## 9. Noise",
        "## References",
    ):
        assert part in design
    readme = (ROOT / "README.md").read_text()
    assert "docs/design.md" in readme and "docs/tutorial.md" in readme


def test_help_points_to_the_design() -> None:
    from dpcurator.cli import build_parser

    assert "docs/design.md" in build_parser().format_help()
