"""Means and quantiles against OpenDP on the Adult data, what a grouped statistic costs,
and how long a mean or a median takes next to a count.

Run:  .venv/bin/python benchmarks/aggregations.py [--runs 200] [--rows 1000000] [--quick]
      [--only quantiles|means|cost|latency ...]

1. **Quantiles** of ``age`` and ``hours-per-week`` (the full Adult file, 32,561 rows, and
   the 413 rows with ``education = 'Doctorate'``, where the noise shows):
   the median and the quartiles at epsilon 0.1 and 1, ``--runs`` releases each, every
   integer of the attribute's public domain a candidate for both libraries. dpcurator:
   ``Curator.median`` / ``Curator.quantiles`` (permute-and-flip on the tie-aware rank
   score, the quartiles' epsilon split in three); OpenDP: ``make_private_quantile`` (its
   rank score and report-noisy-max with exponential noise) at epsilon/3 for each
   quartile. The *rank error* of a value v is the distance from qn to [#{x < v},
   #{x <= v}]: 0 exactly when v is a q-quantile, ties included. Mean over the runs, with
   its standard error.
2. **Means** of ``hours-per-week`` clipped to [0, 100], overall and by ``sex``, at
   epsilon 1: dpcurator ``Curator.mean`` against OpenDP's Polars ``.dp.mean``; the mean
   absolute error against the clipped mean, with its standard error.
3. **A grouped statistic's cost**: a mean by ``education`` (16 groups) at epsilon 1 under a
   budget of 1: the ledger's charges, what is spent at every group's points and at the
   worst point, against the 16 epsilon sequential composition would charge.
4. **Latency** over ``--rows`` generated rows (DuckDB, a durable ledger file): a count, a
   mean and a median (also grouped), the median of 15 requests each, and the ratio to
   the count's.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from dpcurator import Curator
from dpcurator.privacy import PureDP

ROOT = Path(__file__).resolve().parents[1]
ADULT = Path("/work/shared/data/adult/adult.data")
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
COLUMNS = [c.strip() for c in (ROOT / "examples/adult/columns.txt").read_text().split() if c]
LOAD = {"separator": ", ", "header": False, "columns": COLUMNS}
DOMAIN = {"age": (17, 90), "hours-per-week": (1, 99)}


def adult() -> pd.DataFrame:
    return pd.read_csv(ADULT, header=None, names=COLUMNS, sep=", ", engine="python")


def rank_error(sorted_x: np.ndarray, v: int, q: float) -> float:
    lo = np.searchsorted(sorted_x, v, side="left")
    hi = np.searchsorted(sorted_x, v, side="right")
    t = q * len(sorted_x)
    return max(0.0, t - hi, lo - t)


def mean_se(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), statistics.stdev(xs) / math.sqrt(len(xs))


# --- 1. quantiles ----------------------------------------------------------------------------


def opendp_quantile(values: list[int], candidates: list[int], q: float, eps: float):
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.symmetric_distance()

    def make(scale: float):
        return dp.m.make_private_quantile(*space, dp.max_divergence(), candidates, q, scale)

    scale = dp.binary_search_param(make, d_in=1, d_out=eps)
    m = make(scale)
    assert m.map(1) <= eps
    return lambda: m(values)


def quantiles(df: pd.DataFrame, runs: int) -> list[dict]:
    out = []
    with Curator.open(data=ADULT, schema=SCHEMA, budget=PureDP(1e9), ledger=None, **LOAD) as cur:
        for attr, where in (
            ("age", None),
            ("hours-per-week", None),
            ("age", "education = 'Doctorate'"),  # 413 rows: where the noise shows
        ):
            rows = df if where is None else df[df["education"] == "Doctorate"]
            x = np.sort(rows[attr].to_numpy())
            values = [int(v) for v in rows[attr]]
            lo, hi = DOMAIN[attr]
            label = attr if where is None else f"{attr} ({len(rows)} doctors)"
            cands = list(range(lo, hi + 1))
            for eps in (0.1, 1.0):
                for name, qs in (("median", [0.5]), ("quartiles", [0.25, 0.5, 0.75])):
                    ours: list[float] = []
                    theirs: list[float] = []
                    od = [opendp_quantile(values, cands, q, eps / len(qs)) for q in qs]
                    for _ in range(runs):
                        a = (
                            cur.median(attr, where, epsilon=eps)
                            if len(qs) == 1
                            else cur.quantiles(attr, qs, where, epsilon=eps)
                        )
                        ours.append(
                            statistics.fmean(
                                rank_error(x, int(r.value), q)
                                for r, q in zip(a.results, qs, strict=True)
                            )
                        )
                        theirs.append(
                            statistics.fmean(
                                rank_error(x, int(f()), q) for f, q in zip(od, qs, strict=True)
                            )
                        )
                    (mo, so), (mt, st) = mean_se(ours), mean_se(theirs)
                    out.append(
                        {
                            "attribute": label,
                            "epsilon": eps,
                            "what": name,
                            "ours": mo,
                            "ours_se": so,
                            "opendp": mt,
                            "opendp_se": st,
                        }
                    )
                    print(
                        f"  {label:<28} {name:<9} eps={eps:<4} rank error: dpcurator "
                        f"{mo:8.1f} ± {so:5.1f}   OpenDP {mt:8.1f} ± {st:5.1f}   "
                        f"ratio {mo / mt if mt else float('nan'):5.2f}",
                        flush=True,
                    )
    return out


# --- 2. means --------------------------------------------------------------------------------


def opendp_mean(df: pd.DataFrame, by: str | None, eps: float):
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    frame = pl.from_pandas(df[["hours-per-week", "sex"]]).lazy()
    margins = [dp.polars.Margin(max_length=10**6)]
    if by is not None:
        margins = [dp.polars.Margin(by=[by], invariant="keys", max_length=10**6)]

    def release() -> dict[str, float]:
        ctx = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(epsilon=eps),
            split_evenly_over=1,
            margins=margins,
        )
        expr = pl.col("hours-per-week").dp.mean((0, 100))
        if by is None:
            got = ctx.query().select(expr).release().collect()
            return {"": float(got["hours-per-week"][0])}
        got = ctx.query().group_by(by).agg(expr).release().collect()
        return {
            f"sex = '{k}'": float(v) for k, v in zip(got[by], got["hours-per-week"], strict=True)
        }

    return release


def means(df: pd.DataFrame, runs: int) -> list[dict]:
    out = []
    clipped = df["hours-per-week"].clip(0, 100)
    truth = {"": clipped.mean()}
    truth.update({f"sex = '{k}'": v for k, v in clipped.groupby(df["sex"]).mean().items()})
    with Curator.open(data=ADULT, schema=SCHEMA, budget=PureDP(1e9), ledger=None, **LOAD) as cur:
        for by in (None, "sex"):
            od = opendp_mean(df, by, 1.0)
            ours: dict[str, list[float]] = {}
            theirs: dict[str, list[float]] = {}
            for _ in range(runs):
                a = cur.mean("hours-per-week", 0, 100, by=by, epsilon=1.0)
                for r in a.results:
                    ours.setdefault(r.group, []).append(abs(r.value - truth[r.group]))
                for g, v in od().items():
                    theirs.setdefault(g, []).append(abs(v - truth[g]))
            for g in ours:
                (mo, so), (mt, st) = mean_se(ours[g]), mean_se(theirs[g])
                out.append(
                    {"group": g or "all", "ours": mo, "ours_se": so, "opendp": mt, "opendp_se": st}
                )
                print(
                    f"  mean(hours-per-week) {g or 'all rows':<16} eps=1  |error|: dpcurator "
                    f"{mo:.4f} ± {so:.4f}   OpenDP {mt:.4f} ± {st:.4f}   ratio {mo / mt:5.2f}",
                    flush=True,
                )
    return out


# --- 3. a grouped statistic's cost ------------------------------------------------------------


def grouped_cost(df: pd.DataFrame) -> None:
    with Curator.open(data=ADULT, schema=SCHEMA, budget=PureDP(1.0), ledger=None, **LOAD) as cur:
        groups = cur.schema().attribute("education").values
        a = cur.mean("hours-per-week", 0, 100, by="education", epsilon=1.0)
        hist = cur.history()
        per_group = [cur.remaining(f"education = '{g}'") for g in groups]
        print(
            f"  mean(hours-per-week) by education: {len(a)} groups, {len(hist)} ledger charge "
            f"of {hist[0].cost:g} epsilon; left at every group's points: "
            f"{min(per_group):g}..{max(per_group):g}; at the worst point: {cur.remaining():g}"
        )
        print(
            f"  spent at any point: 1 = one group's epsilon; sequential composition would "
            f"charge {len(a)} x 1 = {len(a)} epsilon and refuse it under a budget of 1"
        )
    with Curator.open(data=ADULT, schema=SCHEMA, budget=PureDP(1.0), ledger=None, **LOAD) as cur:
        for g in groups:  # one request per group: disjoint points, each admitted at 1
            cur.median("age", f"education = '{g}'", epsilon=1.0)
        print(
            f"  {len(groups)} medians of age, one per education group, each at epsilon 1: "
            f"all admitted, {len(cur.history())} charges, {cur.remaining():g} left at the worst point"
        )


# --- 4. latency --------------------------------------------------------------------------------


def latency(rows: int, repeat: int = 15) -> list[dict]:
    rng = np.random.default_rng(3)
    d = Path(tempfile.mkdtemp())
    pd.DataFrame(
        {
            "age": rng.integers(17, 91, rows),
            "hours": rng.integers(1, 100, rows),
            "sex": rng.choice(["F", "M"], rows),
        }
    ).to_parquet(d / "big.parquet")
    (d / "s.json").write_text(
        '{"attributes": [{"name": "age", "type": "integer", "min": 17, "max": 90},'
        '{"name": "hours", "type": "integer", "min": 1, "max": 99},'
        '{"name": "sex", "type": "categorical", "values": ["F", "M"]}]}'
    )
    calls = {
        "count(age < 30)": lambda c: c.count("age < 30", epsilon=1),
        "mean(hours, 0, 100, where=age < 30)": lambda c: c.mean(
            "hours", 0, 100, "age < 30", epsilon=1
        ),
        "mean(hours, 0, 100, by=sex)": lambda c: c.mean("hours", 0, 100, by="sex", epsilon=1),
        "variance(hours, 0, 100)": lambda c: c.variance("hours", 0, 100, epsilon=1),
        "median(age)": lambda c: c.median("age", epsilon=1),
        "median(hours, by=sex)": lambda c: c.median("hours", by="sex", epsilon=1),
        "quantiles(age, [.25, .5, .75])": lambda c: c.quantiles(
            "age", [0.25, 0.5, 0.75], epsilon=1
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    with Curator.open(
        data=d / "big.parquet", schema=d / "s.json", budget=PureDP(1e9), ledger=d / "l.db"
    ) as cur:
        for f in calls.values():  # warm up every path once
            f(cur)
        for _ in range(repeat):  # interleaved, so load changes hit every kind alike
            for k, f in calls.items():
                t = time.perf_counter()
                f(cur)
                times[k].append(time.perf_counter() - t)
    base = statistics.median(times["count(age < 30)"])
    out = []
    for k, ts in times.items():
        med = statistics.median(ts)
        out.append({"request": k, "ms": med * 1e3, "ratio": med / base})
        print(f"  {k:<38} {med * 1e3:8.1f} ms   x{med / base:5.2f} a count", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="releases per comparison")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows for the latency table")
    parser.add_argument("--quick", action="store_true", help="20 runs, 100,000 rows")
    parser.add_argument(
        "--only",
        choices=("quantiles", "means", "cost", "latency"),
        action="append",
        help="run only these parts (repeatable)",
    )
    args = parser.parse_args()
    runs, rows = (20, 100_000) if args.quick else (args.runs, args.rows)
    parts = set(args.only or ("quantiles", "means", "cost", "latency"))
    warnings.filterwarnings("ignore")
    df = adult()
    print(f"Adult: {len(df)} rows; {runs} runs per comparison")
    if "quantiles" in parts:
        print("1. quantiles (mean absolute rank error, rows; every domain value a candidate)")
        quantiles(df, runs)
    if "means" in parts:
        print("2. means (clipped to [0, 100]; mean absolute error)")
        means(df, runs)
    if "cost" in parts:
        print("3. a grouped statistic's cost (budget epsilon = 1)")
        grouped_cost(df)
    if "latency" in parts:
        print(f"4. latency over {rows:,} rows (median of 15; ledger on disk)")
        latency(rows)


if __name__ == "__main__":
    main()
