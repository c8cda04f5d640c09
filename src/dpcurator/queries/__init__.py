"""Predicate queries and their maximum overlap: pure set logic, no data, no randomness.

Schemas describe public attribute domains; a query is any boolean combination of
single-attribute predicates, kept as a union of disjoint boxes (conjunctions; Smith et
al., PoPETs 2022, define maximum overlap for any predicate); :func:`max_overlap` computes the
largest (weighted) number of queries sharing a point of the domain, which is what
parallel composition lets the curator charge.
"""

from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.overlap import (
    ColouringResult,
    OverlapResult,
    colouring_bound,
    max_overlap,
    overlap_graph,
)
from dpcurator.queries.parser import parse_query
from dpcurator.queries.predicates import Predicate, Query, common_point, disjoint
from dpcurator.queries.schema import Attribute, Schema
from dpcurator.queries.workload import Workload, parse_workload, parse_workload_text

__all__ = [
    "Attribute",
    "BooleanQuery",
    "ColouringResult",
    "OverlapResult",
    "Predicate",
    "Query",
    "Schema",
    "Workload",
    "colouring_bound",
    "common_point",
    "disjoint",
    "max_overlap",
    "overlap_graph",
    "parse_query",
    "parse_workload",
    "parse_workload_text",
]
