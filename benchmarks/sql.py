"""SQL beside SmartNoise SQL 1.0.10: 20 shared queries at the same epsilon; and a grouped
SELECT of 3 aggregates over 10^6 rows beside one count.

    .venv/bin/python benchmarks/sql.py [--runs 50] [--epsilon 1]
        [--smartnoise-python PATH] [--rows 1000000] [--parts compare,speed]

``compare``: each query is answered ``--runs`` times by dpcurator (``SELECT WITH
DIFFERENTIAL_PRIVACY OPTIONS(epsilon=E)``, one charge of E) and by SmartNoise SQL (its
``from_df`` reader, rows private, no censored groups), each at the same total epsilon E:
SmartNoise's ``epsilon`` is set so that the cost *it reports* (``get_privacy_cost``) is
E (it spends its epsilon once per measurement, so a COUNT with an AVG reports 3 epsilon).
Both clip to the same bounds (SmartNoise's metadata lower/upper, dpcurator's
contribution bounds). The table gives, per aggregate, the mean absolute error over the
runs and groups against the exact value of the same clipped aggregate (pandas), the
median time to answer, and the (epsilon, delta) each reports. The data: the shipped
sample of Adult (Becker & Kohavi 1996; 3,257 rows). SmartNoise runs in its own
interpreter (``--smartnoise-python``: a virtual environment with ``smartnoise-sql==1.0.10``,
which needs pandas < 3), fed the same data and queries.

``speed``: 10^6 synthetic rows; the median time of a grouped SELECT (3 origins: COUNT,
AVG, SUM) through the curator, and of one count, same run.

Nothing asserts anything; the tables are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "data" / "adult-sample.csv"
BOUNDS = {"age": (17, 90), "hours_per_week": (1, 99), "education_num": (1, 16)}

#: (name, dpcurator's select list and rest, SmartNoise's, the aggregates' names)
QUERIES = [
    ("count", "COUNT(*) AS n FROM adult", "COUNT(*) AS n FROM Adult.adult"),
    (
        "count where",
        "COUNT(*) AS n FROM adult WHERE age < 30",
        "COUNT(*) AS n FROM Adult.adult WHERE age < 30",
    ),
    (
        "count by sex",
        "sex, COUNT(*) AS n FROM adult GROUP BY sex",
        "sex, COUNT(*) AS n FROM Adult.adult GROUP BY sex",
    ),
    (
        "count by race",
        "race, COUNT(*) AS n FROM adult GROUP BY race",
        "race, COUNT(*) AS n FROM Adult.adult GROUP BY race",
    ),
    (
        "count by education",
        "education, COUNT(*) AS n FROM adult GROUP BY education",
        "education, COUNT(*) AS n FROM Adult.adult GROUP BY education",
    ),
    (
        "avg age",
        "AVG(age, contribution_bounds_per_group => (17, 90)) AS a FROM adult",
        "AVG(age) AS a FROM Adult.adult",
    ),
    (
        "avg hours by sex",
        "sex, AVG(hours_per_week, contribution_bounds_per_group => (1, 99)) AS h FROM adult GROUP BY sex",
        "sex, AVG(hours_per_week) AS h FROM Adult.adult GROUP BY sex",
    ),
    (
        "sum age",
        "SUM(age, contribution_bounds_per_group => (17, 90)) AS s FROM adult",
        "SUM(age) AS s FROM Adult.adult",
    ),
    (
        "sum hours by sex",
        "sex, SUM(hours_per_week, contribution_bounds_per_group => (1, 99)) AS s FROM adult GROUP BY sex",
        "sex, SUM(hours_per_week) AS s FROM Adult.adult GROUP BY sex",
    ),
    (
        "count+avg by sex",
        "sex, COUNT(*) AS n, AVG(age, contribution_bounds_per_group => (17, 90)) AS a FROM adult GROUP BY sex",
        "sex, COUNT(*) AS n, AVG(age) AS a FROM Adult.adult GROUP BY sex",
    ),
    (
        "count+2 avg by race",
        "race, COUNT(*) AS n, AVG(hours_per_week, contribution_bounds_per_group => (1, 99)) AS h, AVG(age, contribution_bounds_per_group => (17, 90)) AS a FROM adult GROUP BY race",
        "race, COUNT(*) AS n, AVG(hours_per_week) AS h, AVG(age) AS a FROM Adult.adult GROUP BY race",
    ),
    (
        "stddev age by sex",
        "sex, STDDEV_POP(age, contribution_bounds_per_row => (17, 90)) AS sd FROM adult GROUP BY sex",
        "sex, STDDEV(age) AS sd FROM Adult.adult GROUP BY sex",
    ),
    (
        "count box",
        "COUNT(*) AS n FROM adult WHERE sex = 'Female' AND age BETWEEN 30 AND 39",
        "COUNT(*) AS n FROM Adult.adult WHERE sex = 'Female' AND age >= 30 AND age <= 39",
    ),
    (
        "avg age where",
        "AVG(age, contribution_bounds_per_group => (17, 90)) AS a FROM adult WHERE hours_per_week > 40",
        "AVG(age) AS a FROM Adult.adult WHERE hours_per_week > 40",
    ),
    (
        "count by sex, race",
        "sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race",
        "sex, race, COUNT(*) AS n FROM Adult.adult GROUP BY sex, race",
    ),
    (
        "avg hours by income",
        "income, AVG(hours_per_week, contribution_bounds_per_group => (1, 99)) AS h FROM adult GROUP BY income",
        "income, AVG(hours_per_week) AS h FROM Adult.adult GROUP BY income",
    ),
    (
        "sum hours where",
        "SUM(hours_per_week, contribution_bounds_per_group => (1, 99)) AS s FROM adult WHERE income = '>50K'",
        "SUM(hours_per_week) AS s FROM Adult.adult WHERE income = '>50K'",
    ),
    (
        "count+sum+avg",
        "COUNT(*) AS n, SUM(age, contribution_bounds_per_group => (17, 90)) AS s, AVG(age, contribution_bounds_per_group => (17, 90)) AS a FROM adult",
        "COUNT(*) AS n, SUM(age) AS s, AVG(age) AS a FROM Adult.adult",
    ),
    (
        "stddev hours by sex",
        "sex, STDDEV_POP(hours_per_week, contribution_bounds_per_row => (1, 99)) AS sd FROM adult GROUP BY sex",
        "sex, STDDEV(hours_per_week) AS sd FROM Adult.adult GROUP BY sex",
    ),
    (
        "count by income, sex",
        "income, sex, COUNT(*) AS n FROM adult GROUP BY income, sex",
        "income, sex, COUNT(*) AS n FROM Adult.adult GROUP BY income, sex",
    ),
]
GROUP_COLS = ("sex", "race", "education", "income")


def frame():
    import pandas as pd

    df = pd.read_csv(DATA)
    df.columns = [c.replace("-", "_") for c in df.columns]
    return df


def exact(df, query: str) -> dict[tuple, dict[str, float]]:
    """Each group's exact aggregates (clipped to the same bounds), by pandas."""
    import re

    import numpy as np

    rest = query
    where = None
    if " WHERE " in rest:
        rest, where = rest.split(" WHERE ", 1)
        where = where.split(" GROUP BY ")[0]
    head = query.split(" FROM ")[0]
    found = [(head.find(g), g) for g in GROUP_COLS if re.search(rf"\b{g}\b", head)]
    groups = [g for _, g in sorted(found)] if "GROUP BY" in query else []
    d = df
    if where is not None:
        expr = (
            where.replace(" AND ", " & ")
            .replace("=", "==")
            .replace(">==", ">=")
            .replace("<==", "<=")
        )
        expr = re.sub(r"(\w+) BETWEEN (\d+) & (\d+)", r"(\1 >= \2) & (\1 <= \3)", expr)
        d = d.query(expr)
    out: dict[tuple, dict[str, float]] = {}
    grouped = d.groupby(groups) if groups else [((), d)]
    for key, g in grouped:
        key = key if isinstance(key, tuple) else (key,)
        vals: dict[str, float] = {}
        for m in re.finditer(r"(COUNT|AVG|SUM|STDDEV_POP)\((\*|\w+)[^)]*\)(?:\))? AS (\w+)", query):
            fn, col, name = m.groups()
            if fn == "COUNT":
                vals[name] = len(g)
                continue
            x = np.clip(g[col].to_numpy(float), *BOUNDS[col])
            vals[name] = {"AVG": x.mean(), "SUM": x.sum(), "STDDEV_POP": x.std()}[fn]
        out[tuple(str(k) for k in key)] = vals
    return out


# --- SmartNoise, in its own interpreter ------------------------------------------------------


def smartnoise_worker() -> None:
    import snsql
    from snsql import Privacy

    spec = json.load(sys.stdin)
    df = frame()
    cols: dict = {"row_privacy": True, "censor_dims": False}
    for c in df.columns:
        if c in BOUNDS:
            cols[c] = {"type": "int", "lower": BOUNDS[c][0], "upper": BOUNDS[c][1]}
        elif df[c].dtype == object or str(df[c].dtype).startswith("str"):
            cols[c] = {"type": "string"}
    meta = {"Adult": {"Adult": {"adult": cols}}}
    out = []
    for sql in spec["queries"]:
        unit = snsql.from_df(df, privacy=Privacy(epsilon=1.0, delta=1e-6), metadata=meta)
        per_eps, _delta1 = unit.get_privacy_cost(f"SELECT {sql}")
        reader = snsql.from_df(
            df, privacy=Privacy(epsilon=spec["epsilon"] / float(per_eps), delta=1e-6), metadata=meta
        )
        cost = reader.get_privacy_cost(f"SELECT {sql}")
        runs, times = [], []
        for _ in range(spec["runs"]):
            t0 = time.perf_counter()
            rows = reader.execute(f"SELECT {sql}")
            times.append(time.perf_counter() - t0)
            runs.append([[None if v != v else v for v in r] for r in rows])
        out.append(
            {
                "runs": runs,
                "time": statistics.median(times),
                "cost": [float(cost[0]), float(cost[1])],
            }
        )
    json.dump(out, sys.stdout, default=str)


def run_smartnoise(python: str, epsilon: float, runs: int) -> list[dict]:
    spec = {"queries": [q[2] for q in QUERIES], "epsilon": epsilon, "runs": runs}
    got = subprocess.run(
        [python, __file__, "--smartnoise-worker"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0:
        raise SystemExit(f"SmartNoise worker failed: {got.stderr.strip().splitlines()[-1:]}")
    return json.loads(got.stdout)


# --- dpcurator ---------------------------------------------------------------------------------


def run_ours(epsilon: float, runs: int) -> list[dict]:
    sys.path.insert(0, str(ROOT / "src"))
    from dpcurator import Curator
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema

    schema = json.loads((ROOT / "examples" / "adult" / "schema.json").read_text())
    for a in schema["attributes"]:
        a["name"] = a["name"].replace("-", "_")
    df = frame()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "adult.csv"
        df.to_csv(path, index=False)
        out = []
        with Curator.open(path, Schema.from_dict(schema), budget=PureDP(10**9)) as c:
            for _, sql, _ in QUERIES:
                text = f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon={epsilon}) {sql}"
                results, times = [], []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    r = c.sql(text)
                    times.append(time.perf_counter() - t0)
                    results.append([list(r.columns), *[list(row) for row in r.rows]])
                out.append(
                    {"runs": results, "time": statistics.median(times), "cost": [r.cost, 0.0]}
                )
    return out


def errors(runs: list, truth: dict[tuple, dict[str, float]], names: list[str]) -> dict[str, float]:
    """Mean absolute error per aggregate, over runs and groups (a group left out or a
    null value counts as an error of the exact value's size)."""
    out = {}
    for name in names:
        errs = []
        for result in runs:
            header, rows = result[0], result[1:]
            keys = [c for c in header if c in GROUP_COLS]
            got = {
                tuple(str(r[header.index(k)]) for k in keys): r[header.index(name)] for r in rows
            }
            for key, vals in truth.items():
                v = got.get(key)
                errs.append(abs(vals[name]) if v is None else abs(float(v) - vals[name]))
        out[name] = statistics.fmean(errs)
    return out


def compare(args: argparse.Namespace) -> None:
    df = frame()
    ours = run_ours(args.epsilon, args.runs)
    theirs = run_smartnoise(args.smartnoise_python, args.epsilon, args.runs)
    print(
        f"Adult sample ({len(df):,} rows), epsilon = {args.epsilon} per query, {args.runs} runs\n"
    )
    print(f"{'query':<22} {'aggregate':>9} {'MAE ours':>10} {'SmartNoise':>11} {'ratio':>6} "
          f"{'ms ours':>8} {'ms SN':>7}  {'reported (eps, delta): ours / SmartNoise'}")  # fmt: skip
    worst = 0.0
    for (name, sql, _), o, t in zip(QUERIES, ours, theirs, strict=True):
        truth = exact(df, sql)
        aggs = [
            c for c in o["runs"][0][0] if c not in GROUP_COLS and not c.endswith(("_low", "_high"))
        ]
        theirs_runs = [[list(r[0]), *r[1:]] for r in t["runs"]]
        mo, mt = errors(o["runs"], truth, aggs), errors(theirs_runs, truth, aggs)
        for i, a in enumerate(aggs):
            ratio = mo[a] / mt[a] if mt[a] else float("inf")
            worst = max(worst, ratio)
            head = (
                (name, f"{o['time'] * 1000:8.1f}", f"{t['time'] * 1000:7.1f}")
                if i == 0
                else ("", "", "")
            )
            cost = (
                f"({o['cost'][0]:g}, 0) / ({t['cost'][0]:.4g}, {t['cost'][1]:.2g})"
                if i == 0
                else ""
            )
            print(
                f"{head[0]:<22} {a:>9} {mo[a]:10.3f} {mt[a]:11.3f} {ratio:6.2f} {head[1]:>8} {head[2]:>7}  {cost}"
            )
    print(f"\nworst ratio of mean absolute errors (ours / SmartNoise): {worst:.2f}")


def speed(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np
    import pandas as pd

    from dpcurator import Curator
    from dpcurator.privacy import PureDP

    rng = np.random.default_rng(0)
    n = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flights.csv"
        pd.DataFrame(
            {
                "origin": rng.choice(["EWR", "JFK", "LGA"], n),
                "delay": rng.integers(-60, 600, n),
                "distance": rng.integers(0, 5000, n),
            }
        ).to_csv(path, index=False)
        schema = {"attributes": [
            {"name": "origin", "type": "categorical", "values": ["EWR", "JFK", "LGA"]},
            {"name": "delay", "type": "integer", "min": -100, "max": 1500},
            {"name": "distance", "type": "integer", "min": 0, "max": 5000},
        ]}  # fmt: skip
        select = (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1) origin, COUNT(*) AS n, "
            "AVG(delay, contribution_bounds_per_group => (-60, 300)) AS d, "
            "SUM(distance, contribution_bounds_per_group => (0, 5000)) AS miles "
            "FROM flights GROUP BY origin"
        )
        with Curator.open(path, schema, budget=PureDP(10**9)) as c:

            def median(fn, k=30):
                fn()
                ts = []
                for _ in range(k):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
                return statistics.median(ts)

            first = []
            for i in range(10):  # each text new: read (parsed) every time
                t0 = time.perf_counter()
                c.sql(select.replace("epsilon=1)", f"epsilon=1.{i})"))
                first.append(time.perf_counter() - t0)
            count = median(lambda: c.count("origin = 'JFK'", epsilon=1))
            again = median(lambda: c.sql(select))
    print(f"\n{n:,} rows: a grouped SELECT of 3 aggregates (3 groups) beside one count (medians)")
    print(f"  one count through the curator          {count * 1000:7.1f} ms")
    print(f"  the SELECT, its text new each time     {statistics.median(first) * 1000:7.1f} ms  "
          f"({statistics.median(first) / count:.2f}x)")  # fmt: skip
    print(
        f"  the SELECT again (its text read once)  {again * 1000:7.1f} ms  ({again / count:.2f}x)"
    )


def main() -> None:
    if "--smartnoise-worker" in sys.argv:
        smartnoise_worker()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--smartnoise-python", default=sys.executable)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--parts", default="compare,speed")
    args = ap.parse_args()
    parts = args.parts.split(",")
    if "compare" in parts:
        compare(args)
    if "speed" in parts:
        speed(args)


if __name__ == "__main__":
    main()
