"""The backend does not trust query objects: anything that is not a canonical query over
its own schema is refused (QueryError / InvalidParameter), never counted.

Queries are built valid, then altered with ``object.__setattr__`` the way a hand-built or
deserialised object could be, so the checks tested are the backend's own, whatever the
query classes validate on construction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcurator.backends import load_table
from dpcurator.errors import InvalidParameter, QueryError
from dpcurator.queries import Attribute, Query, Schema, parse_query
from dpcurator.queries.predicates import Predicate

SCHEMA = Schema(
    (
        Attribute("a", "integer", min=-3, max=6),
        Attribute("b", "categorical", values=("x", "y", "z", "w")),
    )
)
OTHER = Schema(
    (
        Attribute("a", "integer", min=0, max=1),  # same name, another domain
        Attribute("b", "categorical", values=("x", "y", "z", "w")),
        Attribute("zz", "integer", min=0, max=9),
    )
)


@pytest.fixture(scope="module")
def backend():
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {"a": rng.integers(-3, 7, 500), "b": rng.choice(["x", "y", "z", "w"], 500)}
    )
    with load_table(frame, SCHEMA) as b:
        yield b


def tampered(**changes) -> Query:
    """A valid query over SCHEMA, then changed behind the constructor's back."""
    q = parse_query("a BETWEEN 0 AND 3", SCHEMA)
    for field, value in changes.items():
        object.__setattr__(q, field, value)
    return q


def with_coverage(coverage) -> Query:
    p = Predicate(SCHEMA.attribute("a"), ((0, 4),))
    object.__setattr__(p, "coverage", coverage)
    return tampered(predicates=(p,))


def refused(backend, q: Query, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        backend.counts([q])
    with pytest.raises(error, match=match):
        backend.counts([parse_query("total", SCHEMA), q])  # not only alone
    with pytest.raises(error, match=match):
        backend.clipped_sum("a", 0, 5, where=q)


def test_predicate_on_another_schemas_attribute(backend):
    p = Predicate(OTHER.attribute("a"), ((1, 2),))  # position 1 means a = 1 there
    refused(backend, tampered(predicates=(p,)), QueryError, "another schema's attribute")


def test_predicate_on_an_attribute_not_in_the_table(backend):
    p = Predicate(OTHER.attribute("zz"), ((1, 2),))
    refused(backend, tampered(predicates=(p,)), QueryError, "'zz', which is not an attribute")


def test_two_predicates_on_one_attribute(backend):
    p1 = Predicate(SCHEMA.attribute("a"), ((0, 2),))
    p2 = Predicate(SCHEMA.attribute("a"), ((5, 7),))
    refused(backend, tampered(predicates=(p1, p2)), QueryError, "two predicates on 'a'")


def test_not_a_predicate(backend):
    refused(backend, tampered(predicates=(("a", ((0, 1),)),)), QueryError, "Predicate objects")
    refused(backend, tampered(predicates="a = 1"), QueryError, "tuple of Predicate")


@pytest.mark.parametrize(
    ("coverage", "match"),
    [
        (((5, 3),), r"interval \(5, 3\) is empty or reversed"),
        (((3, 3),), r"interval \(3, 3\) is empty or reversed"),
        (((0, 11),), r"interval \(0, 11\) leaves the domain \[0, 10\)"),
        (((-1, 2),), r"interval \(-1, 2\) leaves the domain"),
        (((10, 12),), r"leaves the domain"),
        (((0, 4), (2, 6)), "sorted, disjoint and non-adjacent"),  # overlap: counted twice
        (((6, 8), (0, 2)), "sorted, disjoint and non-adjacent"),
        (((0, 2), (2, 4)), "sorted, disjoint and non-adjacent"),
        (((0, 2), (0, 2)), "sorted, disjoint and non-adjacent"),
        (((True, 3),), "pair of integers"),
        (((0, np.bool_(True)),), "pair of integers"),
        (((0.0, 3.0),), "pair of integers"),
        (((0, 2, 3),), "pair of integers"),
        (("ab",), "pair of integers"),
        ("ab", "must be a tuple of"),
        (None, "must be a tuple of"),
    ],
)
def test_malformed_coverage(backend, coverage, match):
    refused(backend, with_coverage(coverage), QueryError, match)


def test_reversed_interval_next_to_a_valid_query_is_not_absorbed(backend):
    # The hostile query must not be answered as 0 or as anything else, even in a batch
    # where its attribute set is counted for other queries.
    good = parse_query("a BETWEEN 0 AND 3", SCHEMA)
    with pytest.raises(QueryError):
        backend.counts([good, with_coverage(((4, 1),)), good])


def test_accepted_forms(backend):
    frame_total = backend.counts([parse_query("total", SCHEMA)])[0]
    # numpy integers and lists are exact: accepted and counted like their canonical form.
    want = backend.counts([parse_query("a BETWEEN 0 AND 3 OR a = 5", SCHEMA)])[0]
    assert backend.counts([with_coverage([[np.int64(3), 7], (8, np.int32(9))])])[0] == want
    # A tautology and a contradiction given as explicit predicates.
    assert backend.counts([with_coverage(((0, 10),))])[0] == frame_total
    assert backend.counts([with_coverage(())])[0] == 0
    assert backend.clipped_sum("a", 0, 5, where=with_coverage(())) == 0
    # An equal schema built separately, with its own attribute objects.
    same = Schema.from_dict(SCHEMA.to_dict())
    q = Query.from_coverages(same, {"a": ((3, 7),)})
    assert backend.counts([q])[0] == backend.counts([parse_query("a BETWEEN 0 AND 3", SCHEMA)])[0]


def test_not_queries(backend):
    with pytest.raises(InvalidParameter, match="different schema"):
        backend.counts([tampered(schema="not a schema")])
    with pytest.raises(InvalidParameter, match="different schema"):
        backend.counts([Query.from_coverages(OTHER, {"zz": ((0, 1),)})])
    with pytest.raises(InvalidParameter, match="sequence of queries"):
        backend.counts(parse_query("total", SCHEMA))
    with pytest.raises(InvalidParameter, match="sequence of queries"):
        backend.counts("a = 1")
    with pytest.raises(InvalidParameter, match="expected a Query"):
        backend.counts([None])
    with pytest.raises(InvalidParameter, match="expected a Query"):
        backend.clipped_sum("a", 0, 1, where="a = 1")
    # A generator of queries is fine.
    qs = (parse_query(t, SCHEMA) for t in ("total", "a IN ()"))
    assert backend.counts(qs).tolist() == [500, 0]
