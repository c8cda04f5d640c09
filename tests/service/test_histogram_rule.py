"""One rule for a histogram's bins wherever it is written: a workload line, the Python
session, the HTTP API (and the client's ``histogram`` and ``estimate``), ``dpcurator
answer``. The same bins give the same cells (edges beyond the domain clamped to it, the
missing value's own cell always there) or the same refusal, and a request is charged on
exactly the cells it reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.errors import QueryError, WorkloadError
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, parse_workload_text

from .conftest import running

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 17, "max": 90},
        {"name": "income", "type": "integer", "min": 0, "max": 10_000, "missing": -1},
    ]
}
#: (bins, the cells every interface must report)
GOOD = [
    ([0, 30, 120], ["age <= 29", "age >= 30"]),
    ([17, 30, 91], ["age <= 29", "age >= 30"]),
    ([-(10**30), 50, 10**30], ["age <= 49", "age >= 50"]),
]
GOOD_INCOME = [
    ([0, 1000, 20_000], ["income <= 999", "income >= 1000", "income IS NULL"]),
]
#: (bins, a part of the refusal every interface must give)
BAD = [
    ([30, 60], "bins 30..60 do not cover 'age' [17, 90]"),
    ([0, 10, 30, 120], "bin [0, 10) holds no value of 'age' [17, 90]: start the bins at 10"),
    ([17, 50, 40, 91], "at least two strictly increasing edges"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("bins")
    data = folder / "people.csv"
    rows = [f"{17 + i % 74},{'' if i % 5 == 0 else (i * 37) % 10_000}" for i in range(300)]
    data.write_text("age,income\n" + "\n".join(rows) + "\n")
    schema = folder / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def workload_cells(attribute: str, bins: list[int]) -> list[str]:
    wl = parse_workload_text(f"histogram({attribute}, bins={bins})", Schema.from_dict(SCHEMA))
    return [q.text for q in wl.queries]


def test_the_same_bins_are_the_same_cells_everywhere(files, tmp_path: Path, capsys) -> None:
    data, schema = files
    cases = [("age", b, c) for b, c in GOOD] + [("income", b, c) for b, c in GOOD_INCOME]
    with (
        running(tmp_path / "served", data=files, budget=("--epsilon", "1000")) as s,
        Curator.open(data=data, schema=schema, budget=PureDP(1000)) as cur,
    ):
        s.add("ann")
        with s.client("ann") as client:
            for attribute, bins, cells in cases:
                assert workload_cells(attribute, bins) == cells
                here = cur.histogram(attribute, bins, epsilon=1)
                there = client.histogram(attribute, bins, epsilon=1)
                assert [a.query for a in here.cells] == cells
                assert [a.query for a in there.cells] == cells
                assert there.request == here.request
                assert client.estimate(
                    "histogram", attribute=attribute, bins=bins, epsilon=1
                ).cells == len(cells)
                # the missing value's cell is counted and charged: the counts add up
                # to every row
                assert sum(
                    a.value for a in cur.histogram(attribute, bins, epsilon=100).cells
                ) == pytest.approx(300, abs=5)
            for bins, words in BAD:
                with pytest.raises(WorkloadError) as line:
                    workload_cells("age", bins)
                assert words in str(line.value)
                with pytest.raises(QueryError) as here:
                    cur.histogram("age", bins, epsilon=1)
                with pytest.raises(QueryError) as there:
                    client.histogram("age", bins, epsilon=1)
                with pytest.raises(QueryError):
                    client.estimate("histogram", attribute="age", bins=bins, epsilon=1)
                assert words in str(here.value) and str(there.value) == str(here.value)
    # dpcurator answer reads the same workload line into the same cells, or refuses it
    # with the same words (one line, exit 2)
    for attribute, bins, cells in cases:
        d = answer(data, schema, tmp_path, f"histogram({attribute}, bins={bins})", capsys)
        assert [r["query"] for r in d["answers"]] == cells
    for bins, words in BAD:
        err = answer(data, schema, tmp_path, f"histogram(age, bins={bins})", capsys, code=2)
        assert words in err and err.count("\n") == 1


def answer(data: Path, schema: Path, folder: Path, line: str, capsys, code: int = 0):
    w = folder / "w.txt"
    w.write_text(line + "\n")
    argv = [
        "answer",
        "--data",
        data,
        "--schema",
        schema,
        "--workload",
        w,
        "--epsilon",
        "1",
        "--ledger",
        ":memory:",
        "--json",
    ]
    assert main([str(a) for a in argv]) == code
    out, err = capsys.readouterr()
    return json.loads(out) if code == 0 else err
