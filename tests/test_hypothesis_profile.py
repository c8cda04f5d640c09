"""CI never depends on which random examples hypothesis draws."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci", reason="another profile was asked for"
)
def test_the_default_profile_is_derandomized() -> None:
    assert settings.default.derandomize is True
    assert settings.default.database is None

    drawn: list[list[int]] = []

    @settings(max_examples=10)  # a test's own settings keep the profile's derandomize
    @given(st.lists(st.integers()))
    def draw(xs: list[int]) -> None:
        drawn[-1].append(len(xs) and xs[0])

    for _ in range(2):
        drawn.append([])
        draw()
    assert drawn[0] == drawn[1]


def test_ci_runs_the_readme_test_command_with_the_ci_profile() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    command = ".venv/bin/python -m pytest -q -n 2"
    assert command in readme and command in ci
    assert "HYPOTHESIS_PROFILE=ci" in ci
