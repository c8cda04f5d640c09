"""docs/tutorial.md runs as written: every code block, in order, in an empty folder.

``sh`` blocks run in bash (``-e``) with the virtual environment's ``bin`` first on the
PATH; ``python`` blocks run in this interpreter; the ``sh serve`` block starts the server
in the background with ``--port 0`` (a free port), and the later blocks get its address
in ``DPCURATOR_URL``. The server is stopped at the end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(\w+)( serve)?\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[str, bool, str]]:
    return [(m[1], bool(m[2]), m[3]) for m in BLOCK.finditer(TUTORIAL.read_text())]


def test_the_tutorial_has_its_steps() -> None:
    kinds = [(k, s) for k, s, _ in blocks()]
    assert ("sh", True) in kinds and ("python", False) in kinds
    text = TUTORIAL.read_text()
    for cmd in (
        "dpcurator answer",
        "--plot",
        "dpcurator ledger show",
        "dpcurator serve",
        "dpcurator.client import Client",
    ):
        assert cmd in text


def test_every_command_of_the_tutorial_runs(tmp_path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("DPCURATOR_URL", None)
    server = None
    printed: list[tuple[str, str]] = []  # (block, what it printed), in order
    started: list[str] = []  # what the server printed up to its URL
    try:
        for i, (kind, serve, code) in enumerate(blocks()):
            where = f"block {i + 1} ({kind}):\n{code}"
            if serve:
                cmd = code.strip().replace("--port 8000", "--port 0")
                server = subprocess.Popen(
                    ["bash", "-c", f"exec {cmd}"],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                assert server.stdout is not None
                for line in server.stdout:
                    started.append(line.rstrip("\n"))
                    if line.startswith("listening on "):
                        env["DPCURATOR_URL"] = line.split()[-1]
                        break
                else:
                    raise AssertionError(f"the server did not start: {where}")
                continue
            argv = ["bash", "-e", "-c", code] if kind == "sh" else [sys.executable, "-c", code]
            p = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
            )
            assert p.returncode == 0, f"{where}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
            assert "Traceback" not in p.stderr, p.stderr
            printed.append((code, p.stdout))
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    for f in (
        "visits.csv",
        "schema.json",
        "answers.csv",
        "release.png",
        "visits.db",
        "served.db",
        "alice.json",
    ):
        assert (tmp_path / f).exists(), f
    assert (tmp_path / "release.png").stat().st_size > 20_000
    assert not (tmp_path / "again.csv").exists()  # the refused release wrote nothing
    assert not list(tmp_path.glob("*-journal"))  # no command left one behind
    check_claims(printed, started)


def output_of(printed: list[tuple[str, str]], command: str) -> str:
    return next(out for code, out in printed if command in code)


def check_claims(printed: list[tuple[str, str]], started: list[str]) -> None:
    """What the tutorial says the commands print is what they printed."""
    text = TUTORIAL.read_text()
    # "here 5, although the workload has 18 cells"
    gamma, cells = re.search(r"here (\d+), although the workload has (\d+) cells", text).groups()
    overlap = output_of(printed, "dpcurator overlap")
    assert re.search(rf"^gamma: +{gamma} \(exact\)$", overlap, re.M), overlap
    assert re.search(rf"^queries: +{cells}$", overlap, re.M), overlap
    # the summary: gamma, the guarantee and its theorem, the expected error under each
    # allocation with the objective's measure, what the ledger has left
    summary = output_of(printed, "--postprocess consistent,clamp,round")
    for label in ("gamma:", "guarantee:", "theorem:", "remaining:"):
        assert re.search(rf"^{label}", summary, re.M), (label, summary)
    assert "objective (per-table)" in summary and "total |noise|" in summary
    for allocation in ("sequential", "uniform", "optimal"):
        assert re.search(rf"^  [ *] {allocation} ", summary, re.M), allocation
    # "remaining_exact": "...", and the guarantee that is exactly what was spent
    remaining = re.search(r'`"remaining_exact": "([^"]+)"`', text).group(1)
    shown = json.loads(
        output_of(printed, "dpcurator ledger show visits.db --json").splitlines()[-1]
    )
    assert shown["remaining_exact"] == remaining
    claimed = re.search(r"the release's guarantee, ([\d.]+)-DP", text).group(1)
    assert f"guarantee:    {claimed}-DP" in summary and f"(spent {claimed})" in summary
    # "A new ledger has no analyst yet, so it prints how to add one, where its dashboard
    # is, and last `listening on URL`"
    assert started[0].startswith("analysts: none yet") and "analysts add NAME" in started[0]
    assert started[1].startswith("dashboard: ") and started[-1].startswith("listening on ")
