"""Predicate queries and their maximum overlap: pure set logic, no data, no randomness.

Schemas describe public attribute domains; queries are conjunctions of per-attribute
predicates (seed 002, Smith et al., PoPETs 2022); :func:`max_overlap` computes the
largest (weighted) number of queries sharing a point of the domain, which is what
parallel composition lets the curator charge.
"""

from dpcurator.queries.overlap import (
    ColouringResult,
    OverlapResult,
    colouring_bound,
    max_overlap,
    overlap_graph,
)
from dpcurator.queries.parser import Workload, parse_query, parse_workload, parse_workload_text
from dpcurator.queries.predicates import Predicate, Query, common_point, disjoint
from dpcurator.queries.schema import Attribute, Schema

__all__ = [
    "Attribute",
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
