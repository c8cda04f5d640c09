"""What a timestamp, a float and a part of a time cost next to integers, in one run.

    .venv/bin/python benchmarks/value_types.py [--rows 1000000] [--probes 30]

10^6 synthetic rows (fixed seed) hold the same information twice: a timestamp ``t`` (by
the hour over 2013, in America/New_York) and a float ``f`` (0 to 800 by 0.1), and the
integers ``h`` (hours since the start: the timestamp's own codes) and ``g`` (``f`` in
tenths). Queries of the same selectivity on each pair are timed the same way:

* ``load``: loading ``t`` and ``f`` from the CSV as pandas writes it (each distinct text
  read once, in Python, and joined back) against loading ``h`` and ``g``;
* ``count``: one count through the curator (parse, check, charge, count, noise, commit)
  of ``t >= '2013-06-01' AND t < '2013-07-01' AND f > 100.5`` against
  ``h BETWEEN 3628 AND 4347 AND g >= 1006``, and the backend's count alone;
* ``hour``: ``histogram(hour(t))`` (24 cells, each 365 intervals of ``t``) against a
  histogram of an integer hour column.

The anchor is the integer query in the same process; the ratio is types / integers.
Nothing asserts a time; the table is printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from dpcurator import Curator  # noqa: E402
from dpcurator.backends.duckdb_backend import DuckDBBackend  # noqa: E402
from dpcurator.privacy import PureDP  # noqa: E402
from dpcurator.queries import parse_query  # noqa: E402

SCHEMA = {
    "attributes": [
        {
            "name": "t",
            "type": "timestamp",
            "min": "2013-01-01T00:00:00Z",
            "max": "2013-12-31T23:00:00Z",
            "unit": "hour",
            "timezone": "America/New_York",
        },
        {"name": "f", "type": "float", "min": 0, "max": 800, "step": 0.1},
        {"name": "h", "type": "integer", "min": 0, "max": 8759},
        {"name": "g", "type": "integer", "min": 0, "max": 8000},
        {"name": "hour", "type": "integer", "min": 0, "max": 23},
    ]
}
TYPED_ONLY = {"attributes": SCHEMA["attributes"][:2]}
INTEGERS = {"attributes": SCHEMA["attributes"][2:4]}
TYPED = "t >= '2013-06-01' AND t < '2013-07-01' AND f > 100.5"
PLAIN = "h BETWEEN 3628 AND 4347 AND g >= 1006"  # the same rows (June is 3628..4347 in NY)


def make(rows: int, folder: Path) -> Path:
    rng = np.random.default_rng(0)
    h = rng.integers(0, 8760, rows)
    g = rng.integers(0, 8001, rows)
    start = pd.Timestamp("2013-01-01T00:00:00Z")
    t = start + pd.to_timedelta(h, unit="h")
    frame = pd.DataFrame(
        {
            "t": t.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "f": g / 10,
            "h": h,
            "g": g,
            "hour": t.tz_convert("America/New_York").hour,
        }
    )
    path = folder / "types.csv"
    frame.to_csv(path, index=False)
    return path


def timed(fn, probes: int) -> float:
    fn()  # warm
    ts = []
    for _ in range(probes):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--probes", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = make(args.rows, folder)
        (folder / "s.json").write_text(json.dumps(SCHEMA))
        (folder / "t.json").write_text(json.dumps(TYPED_ONLY))
        (folder / "i.json").write_text(json.dumps(INTEGERS))
        loads = {"t.json": [], "i.json": []}
        for _ in range(3):
            for name, times in loads.items():
                t0 = time.perf_counter()
                DuckDBBackend.load(data, folder / name).close()
                times.append(time.perf_counter() - t0)
        load_typed, load_int = (statistics.median(loads[n]) for n in ("t.json", "i.json"))
        typed = DuckDBBackend.load(data, folder / "s.json")
        schema = typed.schema
        qt, qp = parse_query(TYPED, schema), parse_query(PLAIN, schema)
        n_t, n_p = typed.counts([qt])[0], typed.counts([qp])[0]
        assert n_t == n_p, (n_t, n_p)  # the same rows
        be_t = timed(lambda: typed.counts([qt]), args.probes)
        be_p = timed(lambda: typed.counts([qp]), args.probes)
        typed.close()
        cur = Curator.open(data, folder / "s.json", budget=PureDP(1e9))
        c_t = timed(lambda: cur.count(TYPED, epsilon=1), args.probes)
        c_p = timed(lambda: cur.count(PLAIN, epsilon=1), args.probes)
        h_t = timed(lambda: cur.histogram("hour(t)", epsilon=1), max(5, args.probes // 3))
        h_p = timed(lambda: cur.histogram("hour", epsilon=1), max(5, args.probes // 3))
        a = cur.histogram("hour(t)", epsilon=1e6)
        b = cur.histogram("hour", epsilon=1e6)
        assert [x.value for x in a.cells] == [x.value for x in b.cells]
        cur.close()
    print(f"{args.rows:,} rows; medians of {args.probes} probes (same run)\n")
    print(f"{'what':<44} {'timestamp+float':>16} {'integers':>10} {'ratio':>7}")
    rows = [
        ("load t and f vs h and g (median of 3)", load_typed, load_int),
        ("count, backend only", be_t, be_p),
        ("count through the curator", c_t, c_p),
        ("histogram(hour(t)) vs histogram(hour)", h_t, h_p),
    ]
    for what, x, y in rows:
        print(f"{what:<44} {x * 1000:>13.1f} ms {y * 1000:>7.1f} ms {x / y:>7.2f}")
    print(f"\nrows matched by both counts: {n_t:,}")


if __name__ == "__main__":
    main()
