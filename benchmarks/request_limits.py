"""Whole-request limits and grouped statistics' ledger rows.

    .venv/bin/python benchmarks/request_limits.py [--rows 20000] [--lines 20] [--quick]

Over a table of two attributes of 120 x 148 values (17,760 groups) and an integer v in
[0, 99]:

1. **A workload of ``--lines`` lines ``mean(v, 0, 99, by=[a, b])``** (355,200 groups at
   20 lines), in a fresh process each (wall time and peak RSS of the process):
   answered by a ``Curator`` whose ``max_request_cells`` lets it through (what every
   curator did before the limit), and refused by one with the served default (50,000),
   in process and through a real ``dpcurator serve`` on 127.0.0.1 (the time to its 413).
   ``--quick`` skips the answered run (it takes most of a minute).
2. **One grouped statistic's ledger row**: a mean and a median (among 20 candidates)
   by [a, b] (17,760 groups), the bytes of the recorded answer as the ledger now stores
   it (rows, the groups implied by ``by``) and as it stored it before (a result object
   per group, with its group's condition), and the time to answer it.

Nothing here asserts a time; the tables are printed. Every server is stopped and every
temporary file removed.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from dpcurator import Curator
from dpcurator.privacy import PureDP

SCHEMA = {
    "attributes": [
        {"name": "a", "type": "integer", "min": 0, "max": 119},
        {"name": "b", "type": "integer", "min": 0, "max": 147},
        {"name": "v", "type": "integer", "min": 0, "max": 99},
    ]
}
LINE = "mean(v, 0, 99, by=[a, b])"

#: One run of part 1 in its own process: prints {"seconds", "rss_mb", "outcome"}.
CHILD = """
import json, resource, sys, time
from dpcurator import Curator
from dpcurator.curator.requests import RequestLimits
from dpcurator.errors import TooLarge
from dpcurator.privacy import PureDP
data, schema, ledger, lines, cells, line = sys.argv[1:7]
limits = RequestLimits(max_cells=50000, max_queries=10000, max_charges=10000,
                       max_request_cells=int(cells))
with Curator.open(data, schema, budget=PureDP(1000.0), ledger=ledger, limits=limits) as c:
    t = time.monotonic()
    try:
        _, answers = c.release_workload((line + "\\n") * int(lines), epsilon=1.0)
        outcome = f"answered, {sum(len(a.results) for a in answers)} results"
    except TooLarge as err:
        outcome = f"TooLarge: {err}"
    took = time.monotonic() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": took, "rss_mb": rss, "outcome": outcome}))
"""


def write_table(d: Path, rows: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    cols = (rng.integers(0, 120, rows), rng.integers(0, 148, rows), rng.integers(0, 100, rows))
    data = d / "grid.csv"
    data.write_text("a,b,v\n" + "".join(f"{x},{y},{z}\n" for x, y, z in zip(*cols, strict=True)))
    schema = d / "grid.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def in_process(d: Path, data: Path, schema: Path, lines: int, cells: int) -> dict:
    ledger = d / f"child-{time.monotonic_ns()}.db"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(data),
            str(schema),
            str(ledger),
            str(lines),
            str(cells),
            LINE,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["ledger_mb"] = ledger.stat().st_size / 1e6
    return got


def served(d: Path, data: Path, schema: Path, lines: int) -> tuple[float, int, str]:
    """(seconds to the answer, status, message) of the workload through a real server."""
    ledger = d / "served.db"
    cmd = [sys.executable, "-m", "dpcurator.cli", "serve", "--port", "0", "--ledger", ledger,
           "--data", data, "--schema", schema, "--epsilon", "1000"]  # fmt: skip
    token = ""
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "listening on" in line:
                url = line.split("listening on", 1)[1].split()[0]
                break
        add = subprocess.run(
            [sys.executable, "-m", "dpcurator.cli", "analysts", "add", "ann", "--ledger",
             str(ledger), "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        token = json.loads(add.stdout.strip().splitlines()[-1])["token"]
        body = {"workload": f"{LINE}\n" * lines, "epsilon": 1.0}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as h:
            t = time.monotonic()
            r = h.post("/v1/release", json=body, timeout=600)
            took = time.monotonic() - t
        return took, r.status_code, r.json().get("message", "")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def row_bytes(d: Path, data: Path, schema: Path) -> list[tuple[str, int, int, float]]:
    """(request, bytes recorded, bytes before, seconds) of one grouped statistic each."""
    ledger = d / "rows.db"
    out = []
    with Curator.open(data, schema, budget=PureDP(1000.0), ledger=ledger) as c:
        for name, ask in (
            ("mean(v, 0, 99, by=[a, b])", lambda: c.mean("v", 0, 99, by=["a", "b"], epsilon=1)),
            (
                "median(v, by=[a, b], 20 candidates)",
                lambda: c.median("v", by=["a", "b"], candidates=range(0, 100, 5), epsilon=1),
            ),
        ):
            t = time.monotonic()
            a = ask()
            took = time.monotonic() - t
            db = sqlite3.connect(ledger)
            (stored,) = db.execute(
                "SELECT length(answer) FROM charges WHERE id = ?", (a.charge_id,)
            ).fetchone()
            db.close()
            (h,) = [h for h in c.history() if h.charge_id == a.charge_id]
            out.append((name, stored, len(json.dumps(h.answer)), took))  # as before: results
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--lines", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="skip the answered run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        data, schema = write_table(d, args.rows)
        print(f"1. {args.lines} lines of {LINE} ({args.lines * 17760} groups), {args.rows} rows")
        print(f"{'run':<44} {'seconds':>8} {'RSS MB':>7} {'ledger MB':>9}  outcome")
        runs = [("Python API, max_request_cells = 50,000", 50_000)]
        if not args.quick:
            runs.insert(0, ("Python API, no whole-request limit (before)", 10**8))
        for label, cells in runs:
            r = in_process(d, data, schema, args.lines, cells)
            print(
                f"{label:<44} {r['seconds']:>8.2f} {r['rss_mb']:>7.0f} {r['ledger_mb']:>9.2f}"
                f"  {r['outcome'][:70]}"
            )
        took, status, message = served(d, data, schema, args.lines)
        print(f"{'dpcurator serve (defaults), POST /v1/release':<44} {took:>8.2f} {'':>7} "
              f"{'':>9}  {status} {message[:70]}")  # fmt: skip
        print()
        print("2. one grouped statistic (17,760 groups): its ledger answer")
        print(f"{'request':<36} {'bytes now':>10} {'bytes before':>13} {'ratio':>6} {'seconds':>8}")
        for name, now, before, took in row_bytes(d, data, schema):
            print(f"{name:<36} {now:>10,} {before:>13,} {before / now:>6.1f} {took:>8.2f}")


if __name__ == "__main__":
    main()
