"""One request model: the statistics methods (curator, session, client), the workload
language, ``estimate`` and SQL all build the same StatisticRequest, whose constructors
declare each statistic's parameters once."""

from __future__ import annotations

import inspect
import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcurator import Curator
from dpcurator.client import Client
from dpcurator.curator.curator import AnalystSession
from dpcurator.errors import DpCuratorError, InvalidParameter
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, parse_workload_text
from dpcurator.queries.statistic_request import PAID, STATISTICS, StatisticRequest
from dpcurator.sql.select import parse_select

ATTRS = [
    {"name": "age", "type": "integer", "min": 17, "max": 90},
    {"name": "sex", "type": "categorical", "values": ["F", "M"]},
    {"name": "hours", "type": "integer", "min": 0, "max": 99, "missing": 0},
]
SCHEMA = Schema.from_dict({"attributes": ATTRS})


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(5)
    n = 2000
    pd.DataFrame(
        {
            "age": rng.integers(17, 91, n),
            "sex": rng.choice(["F", "M"], n),
            "hours": rng.integers(0, 100, n),
        }
    ).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps({"attributes": ATTRS}))
    return tmp_path / "t.csv", tmp_path / "s.json"


@pytest.mark.parametrize("kind", STATISTICS)
@pytest.mark.parametrize("owner", [Curator, AnalystSession, Client])
def test_every_method_is_signed_by_its_constructor(owner, kind):
    """The curator's, a session's and the client's method take exactly the constructor's
    parameters, then the cost and the table: declared once, nowhere repeated."""
    own = list(inspect.signature(getattr(StatisticRequest, kind)).parameters.values())
    method = getattr(owner, kind)
    got = list(inspect.signature(method).parameters.values())
    assert got == [got[0], *own, *PAID] and got[0].name == "self"
    assert method.__doc__.startswith(getattr(StatisticRequest, kind).__doc__)


def _requests():
    names = st.sampled_from(["age", "hours"])
    bounds = st.integers(-5, 200)
    by = st.sampled_from([None, "sex", ["sex"]])
    where = st.sampled_from([None, "age < 30", "sex = 'F'"])
    qs = st.lists(st.fractions(0, 1, max_denominator=100), min_size=1, max_size=3)
    cands = st.none() | st.lists(st.integers(17, 90), min_size=1, max_size=4)
    return st.one_of(
        st.builds(StatisticRequest.mean, names, bounds, bounds, where, by=by),
        st.builds(StatisticRequest.variance, names, bounds, bounds, where, by=by),
        st.builds(StatisticRequest.stdev, names, bounds, bounds, where, by=by),
        st.builds(StatisticRequest.share, where.filter(bool), where, by=by),
        st.builds(StatisticRequest.quantile, names, qs.map(lambda x: x[0]), where, by=by),
        st.builds(StatisticRequest.quantiles, names, qs, where, by=by, candidates=cands),
        st.builds(StatisticRequest.median, names, where, by=by, candidates=cands),
    )


@given(_requests())
def test_arguments_round_trip(r):
    """What a client sends (``args()``) binds back to the same request (``of``)."""
    assert StatisticRequest.of(r.kind, r.args()) == r


@pytest.mark.parametrize(
    "kind, args, message",
    [
        ("mean", {"attribute": "age", "lower": 0}, "missing a required argument: 'upper'"),
        ("mean", {"attribute": "age", "lower": 0, "upper": 1, "q": 0.5}, "unexpected keyword"),
        ("median", {"attribute": "age", "_analyst": "x"}, "unknown argument"),
        ("count", {}, "kind must be one of mean"),
        (3, {}, "kind must be one of mean"),
    ],
)
def test_bad_arguments_are_one_line(kind, args, message):
    with pytest.raises(InvalidParameter, match=message) as err:
        StatisticRequest.of(kind, args)
    assert "\n" not in str(err.value)


def test_workload_line_method_and_sql_build_the_same_request():
    line = parse_workload_text("mean(age, 17, 60, where=age > 20, by=sex)", SCHEMA)
    method = StatisticRequest.mean("age", 17, 60, "age > 20", by="sex")
    assert line.statistics[0] == method
    sql = parse_select(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1) sex, "
        "AVG(age, contribution_bounds_per_group => (17, 60)) AS a, "
        "PERCENTILE_CONT(age, 0.5) AS m FROM t WHERE age > 20 GROUP BY sex",
        {"t": SCHEMA},
    )
    mean, median = (a.request for a in sql.aggregates)
    assert (mean.kind, mean.attribute, mean.lower, mean.upper, mean.by) == (
        "mean", "age", 17, 60, ("sex",),
    )  # fmt: skip
    assert mean.where == median.where == "age > 20"  # the query language's text of WHERE
    assert (median.kind, median.qs, median.by) == ("quantile", (Fraction(1, 2),), ("sex",))


def test_a_method_is_its_request_answered(table, tmp_path):
    """``c.mean(...)`` and ``c.statistic(StatisticRequest.mean(...))`` charge the same
    cost on the same points and, from the same seed, release the same results; a
    workload line is charged the same request."""
    data, schema = table
    released = []
    for ask in (
        lambda c: c.mean("age", 17, 60, "hours > 10", by="sex", epsilon=0.5),
        lambda c: c.statistic(
            StatisticRequest.mean("age", 17, 60, "hours > 10", by="sex"), epsilon=0.5
        ),
        lambda c: (
            c.add_analyst("ann")
            and c.analyst("ann").statistic(
                StatisticRequest.mean("age", 17, 60, "hours > 10", by="sex"), epsilon=0.5
            )
        ),
    ):
        with Curator.open(
            data=data,
            schema=schema,
            budget=PureDP(1),
            rng=SeededRandomSource(7),
            allow_insecure=True,
            ledger=tmp_path / f"l{len(released)}.db",
        ) as c:
            a = ask(c)
            released.append((a.request, a.cost, a.results, c.remaining()))
    assert released[0] == released[1] == released[2]
    assert released[0][0] == "mean(age, 17, 60, by=sex, where=hours > 10)"


def test_statistic_refuses_what_is_not_a_statistic_and_charges_nothing(table):
    data, schema = table
    with Curator.open(data=data, schema=schema, budget=PureDP(1)) as c:
        for bad in ("mean(age, 0, 1)", StatisticRequest("count"), StatisticRequest.units()):
            with pytest.raises(InvalidParameter):
                c.statistic(bad, epsilon=0.5)
        with pytest.raises(InvalidParameter, match="unexpected keyword argument 'q'"):
            c.mean("age", 17, 60, q=0.5, epsilon=0.5)
        assert c.remaining() == 1
        assert c.ledger.charges_after(0) == []


def test_a_hand_made_request_releases_what_its_kind_says(table):
    """A request built field by field is rebuilt by its constructor: a median's q is
    1/2 and a quantile has one q, so the ledger's text is what was released."""
    data, schema = table
    with Curator.open(
        data=data, schema=schema, budget=PureDP(10**6), rng=SeededRandomSource(3),
        allow_insecure=True,
    ) as c:  # fmt: skip
        m = c.statistic(StatisticRequest("median", "age", qs=(Fraction(1, 10),)), epsilon=1)
        assert m.request == "median(age)" and [r.q for r in m.results] == [0.5]
        q = c.statistic(StatisticRequest("quantile", "age", qs=(0.1, 0.9)), epsilon=1)
        assert q.request == "quantile(age, 0.1)" and [r.q for r in q.results] == [0.1]
        with pytest.raises(InvalidParameter, match="q must be a number"):
            c.statistic(StatisticRequest("quantile", "age"), epsilon=1)
        assert len(c.ledger.charges_after(0)) == 2


def test_only_the_curator_takes_the_private_analyst_argument(table):
    data, schema = table
    with Curator.open(data=data, schema=schema, budget=PureDP(1)) as c:
        c.add_analyst("ann")
        with pytest.raises(InvalidParameter, match="unknown argument '_analyst'"):
            c.analyst("ann").mean("age", 17, 60, _analyst="bob", epsilon=0.5)
        assert c.ledger.charges_after(0) == []


@pytest.mark.parametrize(
    "bad",
    [
        "mean(age, 0, 1)",
        None,
        StatisticRequest("count"),
        StatisticRequest.units(),
        StatisticRequest("x" * 10**6),
    ],
)
def test_the_client_refuses_what_is_not_a_statistic_before_sending(bad):
    """Checked before any request leaves (no server listens on port 9): one short line."""
    c = Client("http://127.0.0.1:9", "token")
    with pytest.raises(InvalidParameter) as err:
        c.statistic(bad, epsilon=1)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


@pytest.mark.parametrize(
    "request_",
    [
        StatisticRequest.mean("age", 5e-324, 1e400),
        StatisticRequest.mean("age", -(10**400), 10**400),
        StatisticRequest.variance("age", float("nan"), 1),
        StatisticRequest.quantile("age", 5e-324),
        StatisticRequest.quantiles("age", [0.5] * 10**5),
        StatisticRequest.median("age", candidates=[10**400]),
        StatisticRequest.mean("age", 0, 1, by=["sex"] * 10**5),
        StatisticRequest.mean("age", 0, 1, "(" * 10**4 + "age < 3" + ")" * 10**4),
        StatisticRequest.share({"not": "a condition"}),
        StatisticRequest("mean", "age", [0], [1]),
    ],
)
def test_extreme_and_hand_built_requests_charge_nothing(table, request_):
    data, schema = table
    with Curator.open(data=data, schema=schema, budget=PureDP(1)) as c:
        with pytest.raises(DpCuratorError) as err:
            c.statistic(request_, epsilon=0.5)
        assert "\n" not in str(err.value)
        assert c.ledger.charges_after(0) == [] and c.remaining() == 1
