"""docs/tutorial.md runs as written: every code block, in order, in an empty folder.

``sh`` blocks run in bash (``-e``) with the virtual environment's ``bin`` first on the
PATH; ``python`` blocks run in this interpreter; the ``sh serve`` block starts the server
in the background with ``--port 0`` (a free port), and the later blocks get its address
in ``DPCURATOR_URL``. The server is stopped at the end."""

from __future__ import annotations

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
