"""dpcurator: differentially private statistics that spend the budget slowly.

See docs/design.md for the architecture and the mathematics. The pure packages are :mod:`dpcurator.privacy`
(guarantees, conversions, composition, filters, trade-off functions) and
:mod:`dpcurator.queries` (schemas, predicate queries, maximum overlap). The curator
(:class:`Curator`) is the one place where data, noise and budget meet.
"""

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


def __getattr__(name: str) -> object:
    # The curator pulls in DuckDB; import it only when asked for.
    if name == "Curator":
        from dpcurator.curator import Curator

        return Curator
    raise AttributeError(f"module 'dpcurator' has no attribute {name!r}")
