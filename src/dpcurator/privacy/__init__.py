"""Pure privacy mathematics: guarantees, conversions, composition, filters, trade-offs.

No I/O, no randomness, no data.
"""

from dpcurator.privacy.guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP

__all__ = ["GDP", "ZCDP", "ApproxDP", "Guarantee", "PureDP"]
