"""dpcurator: differentially private statistics that spend the budget slowly.

See docs/design.md for the architecture and the mathematics. The pure packages are :mod:`dpcurator.privacy`
(guarantees, conversions, composition, filters, trade-off functions) and
:mod:`dpcurator.queries` (schemas, predicate queries, maximum overlap). The curator
(:class:`Curator`) is the one place where data, noise and budget meet.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpcurator.curator import Curator
    from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
    from dpcurator.privacy.composition import compose
    from dpcurator.queries import Schema, max_overlap, parse_query
    from dpcurator.queries.statistic_request import StatisticRequest

__all__ = [
    "GDP",
    "ZCDP",
    "ApproxDP",
    "Curator",
    "PureDP",
    "Schema",
    "StatisticRequest",
    "compose",
    "max_overlap",
    "parse_query",
]
__version__ = "0.1.0"


#: Where each public name lives. Imported when first asked for (PEP 562), so that a
#: process needing one corner of the package (a solver worker, ``dpcurator --help``)
#: does not pay for all of it: the privacy package pulls in SciPy, the curator DuckDB.
_HOMES = {
    "GDP": "dpcurator.privacy",
    "ZCDP": "dpcurator.privacy",
    "ApproxDP": "dpcurator.privacy",
    "PureDP": "dpcurator.privacy",
    "compose": "dpcurator.privacy.composition",
    "Schema": "dpcurator.queries",
    "max_overlap": "dpcurator.queries",
    "parse_query": "dpcurator.queries",
    "StatisticRequest": "dpcurator.queries.statistic_request",
    "Curator": "dpcurator.curator",
}


def _lazy_exports(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) for ``package`` that imports each public name
    from its home module when first asked for, and keeps it."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


__getattr__ = _lazy_exports(__name__, _HOMES)
