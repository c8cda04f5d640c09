"""Boolean queries (AND, OR, NOT across columns) against brute force on small domains:
parsing, disjoint boxes, labels that parse back, maximum overlap, DuckDB counts."""

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.backends import DuckDBBackend
from dpcurator.errors import QueryError
from dpcurator.queries import BooleanQuery, Query, Schema, max_overlap, parse_query
from dpcurator.queries.boxes import MAX_BOXES

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 5},
            {"name": "c", "type": "categorical", "values": ["x", "y", "z", "?"], "missing": "?"},
            {"name": "o", "type": "categorical", "values": ["lo", "mid", "hi"], "ordered": True},
        ]
    }
)
POINTS = [
    {"a": a, "c": c, "o": o}
    for a, c, o in itertools.product(range(6), ["x", "y", "z", "?"], ["lo", "mid", "hi"])
]

# --- random expressions, with a Python evaluator as the reference ----------------------

atoms = st.one_of(
    st.tuples(
        st.just("a"),
        st.sampled_from(["<", "<=", ">", ">=", "=", "!=", "<>", "=="]),
        st.integers(-3, 9),
    ),
    st.tuples(st.just("c"), st.sampled_from(["=", "!="]), st.sampled_from(["x", "y", "z", "?"])),
    st.tuples(
        st.just("o"), st.sampled_from(["<", ">=", "="]), st.sampled_from(["lo", "mid", "hi"])
    ),
    st.tuples(st.just("c"), st.sampled_from(["IS NULL", "IS NOT NULL"]), st.none()),
    st.tuples(st.just("a"), st.just("BETWEEN"), st.tuples(st.integers(-2, 7), st.integers(-2, 7))),
    st.tuples(st.just("c"), st.just("IN"), st.sets(st.sampled_from(["x", "y", "z"]), max_size=3)),
    st.tuples(st.just("TRUE"), st.none(), st.none()),
    st.tuples(st.just("FALSE"), st.none(), st.none()),
)


def atom_text(atom) -> str:
    name, op, v = atom
    if name in ("TRUE", "FALSE"):
        return name
    if op.startswith("IS"):
        return f"{name} {op}"
    if op == "BETWEEN":
        return f"{name} BETWEEN {v[0]} AND {v[1]}"
    if op == "IN":
        return f"{name} IN ({', '.join(repr(x) for x in sorted(v))})"
    lit = v if name == "a" else repr(v)
    return f"{name} {op} {lit}"


ORDER = {"lo": 0, "mid": 1, "hi": 2}


def atom_eval(atom, p) -> bool:
    name, op, v = atom
    if name == "TRUE":
        return True
    if name == "FALSE":
        return False
    if op == "IS NULL":
        return p["c"] == "?"
    if op == "IS NOT NULL":
        return p["c"] != "?"
    if op == "BETWEEN":
        return v[0] <= p["a"] <= v[1]
    if op == "IN":
        return p["c"] in v
    x = p[name]
    if name == "o":
        x, v = ORDER[x], ORDER[v]
    return {
        "<": x < v,
        "<=": x <= v,
        ">": x > v,
        ">=": x >= v,
        "=": x == v,
        "==": x == v,
        "!=": x != v,
        "<>": x != v,
    }[op]


def exprs():
    return st.recursive(
        atoms.map(lambda a: (atom_text(a), lambda p, a=a: atom_eval(a, p))),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR", "and", "Or"]), inner).map(
                lambda t: (
                    f"({t[0][0]}) {t[1]} ({t[2][0]})",
                    (lambda p, t=t: t[0][1](p) and t[2][1](p))
                    if t[1].upper() == "AND"
                    else (lambda p, t=t: t[0][1](p) or t[2][1](p)),
                )
            ),
            inner.map(lambda e: (f"NOT ({e[0]})", lambda p, e=e: not e[1](p))),
        ),
        max_leaves=8,
    )


def valid(text: str) -> bool:
    # equality with a value outside the domain is an error by design (a typo)
    try:
        parse_query(text, SCHEMA)
        return True
    except QueryError as err:
        assert "outside the domain" in str(err)
        return False


@settings(max_examples=300, deadline=None)
@given(exprs())
def test_coverage_is_the_boolean_expression_at_every_point(expr):
    text, truth = expr
    if not valid(text):
        return
    q = parse_query(text, SCHEMA)
    for p in POINTS:
        assert q.covers(p) == truth(p), (text, p)
    # disjoint boxes: no point in two of them
    for p in POINTS:
        assert sum(b.covers(p) for b in q.boxes) == (1 if truth(p) else 0)
    # the label parses back to the same coverage
    back = parse_query(q.to_text(), SCHEMA)
    assert all(back.covers(p) == truth(p) for p in POINTS), q.to_text()
    assert isinstance(q, BooleanQuery) == (len(q.boxes) > 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(exprs(), st.integers(1, 5)), min_size=1, max_size=8))
def test_max_overlap_of_boolean_queries_is_brute_force(items):
    items = [(e, w) for e, w in items if valid(e[0])]
    if not items:
        return
    qs = [parse_query(e[0], SCHEMA) for e, _ in items]
    ws = [w for _, w in items]
    best = max(sum(w for (e, w) in items if e[1](p)) for p in POINTS)
    res = max_overlap(qs, weights=ws)
    assert res.exact and res.value == best
    # the witness point is covered by exactly the witness queries, of that weight
    covered = [i for i, q in enumerate(qs) if q.covers(dict(res.witness))]
    assert sum(ws[i] for i in covered) == best
    assert set(res.witness_queries) <= set(covered)


def test_duckdb_counts_of_boolean_queries_equal_pandas(tmp_path):
    rng = np.random.default_rng(5)
    df = pd.DataFrame(
        {
            "a": rng.integers(0, 6, 500),
            "c": rng.choice(["x", "y", "z", "?"], 500),
            "o": rng.choice(["lo", "mid", "hi"], 500),
        }
    )
    texts = [
        "a < 2 OR c = 'x'",
        "NOT (a BETWEEN 1 AND 3) AND (o = 'hi' OR c IS NULL)",
        "(a = 0 AND c = 'y') OR (a = 5 AND o < 'hi') OR c = 'z'",
        "NOT (a > 2 OR c != 'x')",
        "c IS NOT NULL OR a >= 4",
        "a < 200",
        "a > 95",
    ]
    pandas = [
        (df.a < 2) | (df.c == "x"),
        ~df.a.between(1, 3) & ((df.o == "hi") | (df.c == "?")),
        ((df.a == 0) & (df.c == "y")) | ((df.a == 5) & df.o.isin(["lo", "mid"])) | (df.c == "z"),
        ~((df.a > 2) | (df.c != "x")),
        (df.c != "?") | (df.a >= 4),
        df.a < 200,
        df.a > 95,
    ]
    with DuckDBBackend.load(df, SCHEMA) as be:
        qs = [parse_query(t, SCHEMA) for t in texts]
        assert list(be.counts(qs)) == [int(m.sum()) for m in pandas]
        got = be.clipped_sum("a", 1, 4, qs[0])
        assert got == int(df.a[pandas[0]].clip(1, 4).sum())


def test_too_many_boxes_is_a_clear_error():
    schema = Schema.from_dict(
        {
            "attributes": [
                {"name": f"x{i}", "type": "integer", "min": 0, "max": 3} for i in range(22)
            ]
        }
    )
    # (x0 = 1 OR x1 = 2) AND (x2 = 1 OR x3 = 2) AND ...: 2^k disjoint boxes
    clauses = [f"(x{2 * i} = 1 OR x{2 * i + 1} = 2)" for i in range(11)]
    assert len(parse_query(" AND ".join(clauses[:9]), schema).boxes) == 2**9
    with pytest.raises(QueryError, match=f"more than {MAX_BOXES} disjoint boxes"):
        parse_query(" AND ".join(clauses), schema)


def test_hand_built_boolean_queries_must_be_disjoint():
    a = Query.from_coverages(SCHEMA, {"a": ((0, 3),)})
    b = Query.from_coverages(SCHEMA, {"a": ((2, 5),)})
    with pytest.raises(QueryError, match="disjoint"):
        BooleanQuery(SCHEMA, (a, b))
    u = BooleanQuery.from_boxes(SCHEMA, [a, b])  # made disjoint: one box [0, 5)
    assert isinstance(u, Query) and u.coverage("a") == ((0, 5),)
    c = Query.from_coverages(SCHEMA, {"c": ((0, 1),)})
    v = BooleanQuery.from_boxes(SCHEMA, [a, c])
    assert isinstance(v, BooleanQuery)
    assert all(v.covers(p) == (p["a"] < 3 or p["c"] == "x") for p in POINTS)


def test_consistency_with_boolean_queries():
    from dpcurator.planner import consistent

    texts = ["total", "a < 3 OR c = 'x'", "NOT (a < 3 OR c = 'x')", "a < 3", "a >= 3"]
    qs = [parse_query(t, SCHEMA) for t in texts]
    rng = np.random.default_rng(1)
    y = rng.normal(50, 5, len(qs))
    c = consistent(qs, y, np.ones(len(qs)))
    assert c[0] == pytest.approx(c[1] + c[2], abs=1e-6) == pytest.approx(c[3] + c[4], abs=1e-6)


def test_every_workload_label_parses_back_to_its_query():
    from dpcurator.queries import parse_workload

    adult = Schema.load("examples/adult/schema.json")
    wl = parse_workload(
        "marginal(sex, race)\nhistogram(age, bins=[17, 30, 91])\nhistogram(workclass)\n"
        "age < 30 OR sex = 'Female'\nNOT (race = 'White') AND workclass IS NOT NULL\ntotal\n",
        adult,
    )
    for q in wl.queries:
        assert parse_query(q.text, adult) == q, q.text
        assert parse_query(q.to_text(), adult) == q, q.to_text()


def test_names_that_need_quotes_round_trip():
    odd = Schema.from_dict(
        {
            "attributes": [
                {"name": 'we"ird', "type": "integer", "min": 0, "max": 3},
                {"name": "two words", "type": "categorical", "values": ["a", "it's"]},
                {"name": "AND", "type": "integer", "min": 0, "max": 1},
            ]
        }
    )
    q = parse_query('"we""ird" < 2 OR ("two words" = \'it\'\'s\' AND "AND" = 1)', odd)
    assert isinstance(q, BooleanQuery)
    assert parse_query(q.to_text(), odd) == q
