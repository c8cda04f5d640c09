"""dpcurator: differentially private statistics that spend the budget slowly.

See DESIGN.md for the architecture. The pure packages are :mod:`dpcurator.privacy`
(guarantees, conversions, composition, filters, trade-off functions) and
:mod:`dpcurator.queries` (schemas, predicate queries, maximum overlap).
"""

from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP

__all__ = ["GDP", "ZCDP", "ApproxDP", "PureDP"]
__version__ = "0.1.0"
