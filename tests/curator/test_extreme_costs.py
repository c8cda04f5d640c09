"""The Python API at the edges of floats: tiny costs, huge clip bounds, numpy numbers.
Each is a one-line :class:`~dpcurator.errors.InvalidParameter` (or an answer) and never
charges."""

from __future__ import annotations

import numpy as np
import pytest

from dpcurator.curator import Curator
from dpcurator.errors import InvalidParameter
from dpcurator.privacy import GDP, ZCDP, PureDP


@pytest.fixture
def curator(people):
    data, schema, _ = people
    c = Curator.open(data, schema, budget=PureDP(10**300))
    yield c
    c.close()


def assert_refused(call, *words):
    with pytest.raises(InvalidParameter) as err:
        call()
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 300, msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("eps", [1e-30, 1e-200, 1e-320])
def test_tiny_costs_are_refused_naming_the_range(curator, eps):
    for call in (
        lambda: curator.median("age", epsilon=eps),
        lambda: curator.quantiles("age", [0.1, 0.9], epsilon=eps),
        lambda: curator.estimate("median", attribute="age", epsilon=eps),
        lambda: curator.estimate("quantile", attribute="age", q=0.3, epsilon=eps),
        lambda: curator.release_workload("age < 30\nage < 50", epsilon=eps, strategy="tree"),
        lambda: curator.release_workload("age < 30\nage < 50", epsilon=eps),
    ):
        assert_refused(call, "beyond the largest supported")
    assert curator.remaining() == 1e300  # nothing charged


@pytest.mark.parametrize("budget", [ZCDP(1), GDP(1)])
def test_tiny_costs_in_other_currencies(people, budget):
    data, schema, _ = people
    with Curator.open(data, schema, budget=budget) as c:
        kw = {"rho" if isinstance(budget, ZCDP) else "mu": 1e-320}
        with pytest.raises(InvalidParameter):
            c.median("age", **kw)
        with pytest.raises(InvalidParameter):
            c.release_workload("age < 30\nage < 50", strategy="tree", **kw)
        assert c.remaining() == 1


@pytest.mark.parametrize("kind", ["mean", "variance", "stdev"])
@pytest.mark.parametrize(
    "lo, hi", [(-(10**308), 10**308), (0, 10**309), (10**400, 10**400 + 1), (-(2**129), 0)]
)
def test_moment_bounds_beyond_floats_are_refused(curator, kind, lo, hi):
    assert_refused(lambda: getattr(curator, kind)("age", lo, hi, epsilon=10**299), "2^128")
    assert_refused(
        lambda: curator.estimate(kind, attribute="age", lower=lo, upper=hi, epsilon=10**299),
        "2^128",
    )
    assert curator.remaining() == 1e300  # nothing charged


def test_a_mean_at_the_largest_bounds_answers(curator):
    a = curator.mean("age", -(2**128), 2**128, epsilon=10**299)
    assert -(2**128) <= a.results[0].value <= 2**128


def test_numpy_quantile_and_the_estimate_kinds(curator):
    a = curator.quantile("age", q=np.float64(0.25), epsilon=1)
    assert a.results[0].q == 0.25
    with pytest.raises(InvalidParameter) as err:
        curator.estimate("mode", attribute="age", epsilon=1)
    for kind in ("count", "histogram", "marginal", "sum", "mean", "stdev", "quantiles", "median"):
        assert kind in str(err.value)
