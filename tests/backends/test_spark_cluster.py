"""End to end on a real standalone Spark cluster: the Adult workload released through the
curator on ``spark://127.0.0.1:PORT`` counts exactly what DuckDB counts, and its ledger
behaves identically.

The test starts a master and two workers (one core each) with pyspark's own launch
classes, bound to 127.0.0.1, and stops them afterwards. The driver runs in a child
process (this file, run as a script): one Python process holds one SparkContext, and the
other Spark tests keep a local one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from spark_cluster import spark_class, spark_env, standalone_cluster

pytestmark = pytest.mark.xdist_group("spark")

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "adult-sample.csv"
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
WORKLOADS = [ROOT / "examples" / "adult" / n for n in ("workload.txt", "marginals.txt")]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """``spark://127.0.0.1:PORT`` of a master with two one-core workers."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):  # pragma: no cover
        pytest.skip("Spark needs Java 17")
    tmp = tmp_path_factory.mktemp("cluster")
    if not spark_class(tmp).exists():  # pragma: no cover
        pytest.skip("pyspark has no bin/spark-class")
    with standalone_cluster(2, "1g", tmp) as url:
        yield url, tmp


def test_adult_on_a_standalone_cluster(cluster):
    url, tmp = cluster
    out = tmp / "result.json"
    env = spark_env(tmp)
    env["PYSPARK_SUBMIT_ARGS"] = (
        "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false "
        "--conf spark.sql.shuffle.partitions=2 --conf spark.executor.memory=512m "
        "--conf spark.executor.cores=1 --conf spark.driver.host=127.0.0.1 pyspark-shell"
    )
    run = subprocess.run(
        [sys.executable, __file__, url, str(out), str(tmp)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(out.read_text())
    duck, spark = got["duckdb"], got["spark"]
    assert spark["backend"] == "SparkBackend" and duck["backend"] == "DuckDBBackend"
    assert spark["master"] == url
    assert spark["executors"] == 2  # both workers counted
    assert spark["report"] == duck["report"]
    assert len(duck["truth"]) > 100
    assert spark["truth"] == duck["truth"]  # exact counts of every cell of the workload
    assert spark["sums"] == duck["sums"]
    # The ledger: same charges, same answers (same seeded noise on the same counts), the
    # same remaining budget and the same refusal of a release that no longer fits.
    assert spark["answers"] == duck["answers"]
    assert spark["history"] == duck["history"]
    assert spark["remaining"] == duck["remaining"]
    assert spark["refusal"] == duck["refusal"] and "refused" in duck["refusal"]
    assert spark["verified"] == duck["verified"] > 0


def _drive(url: str, out: Path, tmp: Path) -> None:
    """The driver process: release the Adult workloads with DuckDB, then on the cluster."""
    import dataclasses

    from dpcurator import Curator
    from dpcurator.errors import BudgetExceeded
    from dpcurator.mechanisms import SeededRandomSource
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema, parse_query, parse_workload

    schema = Schema.load(SCHEMA)
    cells = []
    for w in WORKLOADS:
        cells.extend(parse_workload(w, schema).queries)
    where = parse_query("sex = 'Female' AND education IN ('Bachelors', 'Masters')", schema)
    results = {}
    for backend in ("duckdb", "spark"):
        extra = {"backend": "spark", "spark": url} if backend == "spark" else {}
        with Curator.open(
            data=DATA,
            schema=SCHEMA,
            budget=PureDP(1.0),
            ledger=tmp / f"{backend}.ledger",
            rng=SeededRandomSource(5),
            allow_insecure=True,
            **extra,
        ) as cur:
            text = WORKLOADS[0].read_text()
            _, released = cur.release_workload(text, epsilon=0.6, allocation="uniform")
            answers = [dataclasses.asdict(a) for a in released]
            answers.append(dataclasses.asdict(cur.count("sex = 'Female'", epsilon=0.3)))
            try:  # every point has spent 0.6, some 0.9: 0.3 more does not fit everywhere
                cur.count(None, epsilon=0.3)
                refusal = ""
            except BudgetExceeded as err:
                refusal = str(err)
            be = cur._backends["data"]
            result = {
                "backend": type(be).__name__,
                "report": dataclasses.asdict(be.report),
                "truth": [int(v) for v in be.counts(cells)],
                "sums": [
                    be.clipped_sum("age", 20, 60),
                    be.clipped_sum("hours-per-week", 10, 60, where=where),
                ],
                "answers": answers,
                "history": [
                    [h.kind, h.request, str(h.cost), h.noise, json.dumps(h.answer, sort_keys=True)]
                    for h in cur.history()
                ],
                "remaining": str(cur.remaining()),
                "refusal": refusal,
                "verified": cur.ledger.verify(),
            }
            if backend == "spark":
                sc = be.session.sparkContext
                result["master"] = sc.master
                # Executors (the driver is listed too in local and cluster mode).
                result["executors"] = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
            results[backend] = result
    out.write_text(json.dumps(results, default=str))


if __name__ == "__main__":
    _drive(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
