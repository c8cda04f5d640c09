"""Dashboard benchmark: the page and its routes with 10^4 charges in the ledger.

    .venv/bin/python benchmarks/dashboard.py [--quick]

A ledger of 10,000 charges (--quick: 2,000) of a mixed workload by four analysts (2-way
marginal cells, ranges on age and income, region restrictions) over a table whose
attributes age and income have 100 values each (and sex, region, channel), budget
PureDP(10^6), every charge costing epsilon 1. Then, against a real ``dpcurator serve``
subprocess on 127.0.0.1:

1. Each route the page calls, first on a fresh server (cold: nothing cached) and again
   (warm), with the heat map on the 100 x 100 grid age x income; then the heat map
   after one more charge (a new ledger version: recomputed).
2. Time to first render: headless Chromium (Debian's /usr/bin/chromium, via Playwright)
   opens /dashboard, signs in, and waits until the spend chart, the heat map (the
   page's default pair, here age x income: 100 x 100) and the tables are drawn; on a
   fresh server (nothing cached) and again in a new page. Skipped when Playwright or Chromium is missing.
3. In process: the 100 x 100 grid's losses in one pass (``grid_max_loss``) beside the
   per-cell ``remaining_detail`` of 200 cells, extrapolated to the 10^4 cells.

Nothing here asserts a time; the table is printed. The server is stopped and the
temporary files removed, also on errors.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np

from dpcurator import Curator
from dpcurator.curator import AnalystSession
from dpcurator.curator.cell_loss import grid_max_loss
from dpcurator.curator.landscape import cell_query, grid_axis, snapshot
from dpcurator.privacy import PureDP
from dpcurator.queries import Query, Schema

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "income", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": [f"r{i}" for i in range(20)]},
        {"name": "channel", "type": "categorical", "values": [f"c{i}" for i in range(8)]},
    ]
}
ANALYSTS = ("ana", "ben", "cho", "dee")
#: The budget: large enough that the level bounds admit every charge at once (near the
#: budget the curator checks each one exactly, which is not what is measured here).
BUDGET = 1e6
CHROMIUM = "/usr/bin/chromium"


def mixed_request(schema: Schema, rnd: random.Random) -> Query:
    """A 2-way marginal cell, a range on age (and maybe income), or a region."""
    kind = rnd.random()
    if kind < 0.4:
        covs = {}
        for name in rnd.sample(["sex", "region", "channel", "income"], 2):
            i = rnd.randrange(schema.attribute(name).size)
            covs[name] = ((i, i + 1),)
        return Query.from_coverages(schema, covs)
    if kind < 0.9:
        lo = rnd.randrange(100)
        covs = {"age": ((lo, rnd.randrange(lo, 100) + 1),)}
        if rnd.random() < 0.5:
            w = rnd.randrange(100)
            covs["income"] = ((w, min(100, w + rnd.randrange(1, 20))),)
        return Query.from_coverages(schema, covs)
    r = rnd.randrange(20)
    return Query.from_coverages(schema, {"region": ((r, r + 1),)})


def build(directory: Path, charges: int) -> tuple[Path, Path, Path]:
    """The data, the schema and a ledger holding ``charges`` charges."""
    rng = np.random.default_rng(0)
    data = directory / "people.csv"
    n = 5000
    cols = {
        "age": rng.integers(0, 100, n),
        "income": rng.integers(0, 100, n),
        "sex": rng.choice(["F", "M"], n),
        "region": rng.choice([f"r{i}" for i in range(20)], n),
        "channel": rng.choice([f"c{i}" for i in range(8)], n),
    }
    lines = ["age,income,sex,region,channel"]
    lines += [",".join(str(cols[k][i]) for k in cols) for i in range(n)]
    data.write_text("\n".join(lines) + "\n")
    schema_file = directory / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    ledger = directory / "ledger.db"
    rnd = random.Random(1)
    with Curator.open(data=data, schema=schema_file, budget=PureDP(BUDGET), ledger=ledger) as cur:
        schema = cur.schema()
        for name in ANALYSTS:
            cur.analyst(name)
        per = 500
        for k in range(0, charges, per):
            who = ANALYSTS[(k // per) % len(ANALYSTS)]
            qs = [mixed_request(schema, rnd) for _ in range(min(per, charges - k))]
            AnalystSession(cur, who).release(qs, [1.0] * len(qs))
    return data, schema_file, ledger


@contextlib.contextmanager
def serve(data: Path, schema: Path, ledger: Path) -> Iterator[str]:
    cmd = [
        sys.executable,
        "-m",
        "dpcurator.cli",
        "serve",
        "--port",
        "0",
        "--ledger",
        str(ledger),
        "--data",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        str(BUDGET),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("listening on "):
                yield line.split()[-1]
                break
        else:
            raise RuntimeError("the server did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def token(ledger: Path) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpcurator.cli",
            "analysts",
            "add",
            "root",
            "--admin",
            "--ledger",
            str(ledger),
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["token"]


def timed(client: httpx.Client, path: str) -> tuple[float, dict]:
    t = time.perf_counter()
    r = client.get(path)
    elapsed = time.perf_counter() - t
    r.raise_for_status()
    return elapsed, (r.json() if "json" in r.headers["content-type"] else {})


def first_render(url: str, tok: str) -> float | None:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        return None
    if not shutil.which(CHROMIUM):
        return None
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(url + "/dashboard")
            page.fill("#token", tok)
            t = time.perf_counter()
            page.click("text=Show the dashboard")
            expect(page.locator("#status")).to_have_text(re.compile("^Updated"), timeout=120_000)
            page.wait_for_selector("#heat-map svg")
            page.wait_for_selector("#spend-chart svg")
            return time.perf_counter() - t
        finally:
            browser.close()


def main() -> None:
    quick = "--quick" in sys.argv
    charges = 2000 if quick else 10_000
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="dpcurator-dash-") as tmp:
        directory = Path(tmp)
        t = time.perf_counter()
        data, schema, ledger = build(directory, charges)
        print(f"built a ledger of {charges} charges in {time.perf_counter() - t:.1f} s", flush=True)
        tok = token(ledger)
        grid = "/v1/dashboard/heatmap?rows=age&cols=income"
        with serve(data, schema, ledger) as url:
            headers = {"Authorization": f"Bearer {tok}"}
            with httpx.Client(base_url=url, headers=headers, timeout=300) as c:
                rows.append(
                    ("GET /dashboard (the page)", f"{timed(c, '/dashboard')[0] * 1000:.0f} ms")
                )
                for label in ("cold", "warm"):
                    for path in (
                        "/v1/dashboard/overview",
                        "/v1/dashboard/answers?limit=50",
                        "/v1/dashboard/refusals?limit=50",
                    ):
                        s, _ = timed(c, path)
                        rows.append((f"GET {path.split('?')[0]} ({label})", f"{s * 1000:.0f} ms"))
                    s, body = timed(c, grid)
                    assert len(body["remaining"]) == 100 and len(body["remaining"][0]) == 100
                    rows.append(
                        (
                            f"heat map 100 x 100, {charges} charges ({label})",
                            f"{s * 1000:.0f} ms ({body['method']}, computed in "
                            f"{body['seconds'] * 1000:.0f} ms, exact: {body['exact']})",
                        )
                    )
                one = {"queries": ["age < 50 AND income >= 50"], "costs": [1.0]}
                c.post("/v1/release", json=one).raise_for_status()
                s, body = timed(c, grid)
                rows.append(
                    (
                        "heat map 100 x 100 after one more charge",
                        f"{s * 1000:.0f} ms (computed in {body['seconds'] * 1000:.0f} ms)",
                    )
                )
        with serve(data, schema, ledger) as url:
            for label in ("fresh server", "again"):
                first = first_render(url, tok)
                rows.append(
                    (
                        f"first render in Chromium ({label})",
                        "skipped (no Playwright or Chromium)"
                        if first is None
                        else f"{first * 1000:.0f} ms",
                    )
                )
        with Curator.open(data=data, schema=schema, budget=PureDP(BUDGET), ledger=ledger) as cur:
            s_ = cur.schema()
            r_axis, c_axis = grid_axis(s_, "age"), grid_axis(s_, "income")
            filt = snapshot(cur)
            cs = filt.charges("data")
            scale = math.lcm(*{ch.cost.denominator for ch in cs})
            weights = [ch.cost.numerator * (scale // ch.cost.denominator) for ch in cs]
            t = time.perf_counter()
            got = grid_max_loss([ch.query for ch in cs], weights, r_axis.axis, c_axis.axis)
            one_pass = time.perf_counter() - t
            assert got is not None
            rows.append(("grid_max_loss, 100 x 100 (in process)", f"{one_pass * 1000:.0f} ms"))
            rnd = random.Random(2)
            sample = [(rnd.randrange(100), rnd.randrange(100)) for _ in range(200)]
            t = time.perf_counter()
            for i, j in sample:
                left = cur.remaining_detail(cell_query(s_, r_axis, i, c_axis, j))
                assert (
                    cur.budget.display(cur.budget.amount - Fraction(int(got[i, j]), scale))
                    == left.value
                )
            per_cell = (time.perf_counter() - t) / len(sample)
            rows.append(
                (
                    "remaining_detail per cell (200 cells)",
                    f"{per_cell * 1000:.1f} ms a cell, {per_cell * 10_000:.0f} s for 10^4 cells",
                )
            )
    # The SVG of a 100 x 100 map whose every cell differs from its neighbours (the
    # worst case: no run of equal colour to merge).
    from dpcurator.service.charts import heatmap

    values = np.random.default_rng(3).random((100, 100)).tolist()
    t = time.perf_counter()
    svg = heatmap(
        "age",
        [str(i) for i in range(100)],
        "income",
        [str(i) for i in range(100)],
        values,
        [[True] * 100] * 100,
        1.0,
        "epsilon",
    )
    rows.append(
        (
            "SVG of a 100 x 100 map, every cell its own colour",
            f"{(time.perf_counter() - t) * 1000:.0f} ms, {len(svg) // 1024} KiB",
        )
    )
    width = max(len(a) for a, _ in rows)
    print(f"\n{'measure'.ljust(width)}  time")
    print(f"{'-' * width}  {'-' * 40}")
    for a, b in rows:
        print(f"{a.ljust(width)}  {b}")


if __name__ == "__main__":
    main()
