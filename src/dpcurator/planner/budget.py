"""Budgets in their additive currency, as the planner and the curator see them.

An ``(eps, delta)`` target is enforced, like the curator's ledger does, as the largest
zCDP budget whose conversion meets it (docs/design.md §3 and §5), so a planned release can be
charged through :meth:`dpcurator.curator.Curator.release`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import ROUND_FLOOR, Decimal

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms import noise_for_cost
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.filters import largest_zcdp_within

#: Significant digits of a planned cost (rounded *down*, so rounding never overspends).
COST_DIGITS = 6
#: ... of a weighted measurement's unit cost: a point pays it F times (F up to 10^12),
#: so its rounding would otherwise waste up to F x 10^-6 of it.
UNIT_DIGITS = 12


def round_down(x: float, digits: int = COST_DIGITS) -> float:
    """The largest number with ``digits`` significant decimal digits that is <= x.

    Its ``repr`` is that short decimal, which is exactly what the curator charges
    (:func:`dpcurator.privacy.filters.exact`)."""
    if not (x > 0 and math.isfinite(x)):
        raise InvalidParameter(f"a cost must be a finite number > 0, got {x!r}")
    d = Decimal(x)
    exp = d.adjusted() - digits + 1
    q = d.quantize(Decimal(1).scaleb(exp), rounding=ROUND_FLOOR)
    out = float(q)
    if Decimal(repr(out)) > d:  # cannot happen for <= 15 digits; be safe anyway
        out = math.nextafter(out, 0.0)
    return out


@dataclass(frozen=True)
class PlanBudget:
    """A budget, the currency it is charged in and its amount in the additive unit.

    ``currency`` is ``epsilon`` (pure DP, discrete Laplace), ``rho`` (zCDP or an
    (eps, delta) target, discrete Gaussian) or ``mu`` (Gaussian DP, discrete Gaussian;
    additive in mu^2). ``amount`` is eps, rho or mu^2.

    ``sensitivity`` is every planned count's: 1 for one row per person, k under a privacy
    unit of k rows. It is the one place the planner learns it: :meth:`noise` is the noise
    the curator adds at that sensitivity, so every figure read from the noise (a plan's
    noises, expected errors, variances, intervals) is the released answers' own. The
    allocation never reads it (see :attr:`coefficient`).
    """

    guarantee: PureDP | ApproxDP | ZCDP | GDP
    currency: str
    amount: float
    sensitivity: int = 1

    @staticmethod
    def of(guarantee: object, sensitivity: int = 1) -> PlanBudget:
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
            raise InvalidParameter(
                f"sensitivity must be a positive integer (rows per unit), got {sensitivity!r}"
            )
        if isinstance(guarantee, PureDP):
            b = PlanBudget(guarantee, "epsilon", guarantee.epsilon, sensitivity)
        elif isinstance(guarantee, ZCDP):
            b = PlanBudget(guarantee, "rho", guarantee.rho, sensitivity)
        elif isinstance(guarantee, GDP):
            b = PlanBudget(guarantee, "mu", guarantee.mu**2, sensitivity)
        elif isinstance(guarantee, ApproxDP):
            rho = largest_zcdp_within(guarantee.epsilon, guarantee.delta).rho
            b = PlanBudget(guarantee, "rho", rho, sensitivity)
        else:
            raise InvalidParameter(
                "budget must be PureDP(eps), ApproxDP(eps, delta), ZCDP(rho) or GDP(mu), "
                f"got {guarantee!r}"
            )
        if not b.amount > 0:
            raise InvalidParameter(f"budget must be positive, got {guarantee!r}")
        return b

    def with_amount(self, amount: float) -> PlanBudget:
        """The same currency and sensitivity with a smaller additive amount (what a ledger
        has left)."""
        return replace(self, amount=amount)

    # --- the variance model the optimiser uses: Var = a / c^p, c additive -----------------

    @property
    def exponent(self) -> int:
        """p: Laplace variance ~ 2/eps^2 (p = 2); Gaussian ~ 1/(2 rho) = 1/mu^2 (p = 1)."""
        return 2 if self.currency == "epsilon" else 1

    @property
    def coefficient(self) -> float:
        """a of the model Var = a / c^p, per unit of sensitivity squared.

        At sensitivity k every model variance is k^2 a / c^p: a factor common to every
        query, which scales each allocation's objective (a weighted sum of these, or
        their maximum) and leaves its minimiser, the split, unchanged. So the allocation
        is computed at sensitivity 1, the same split for every k (and the same numbers
        bit for bit); only the figures read from :meth:`noise` depend on k."""
        return {"epsilon": 2.0, "rho": 0.5, "mu": 1.0}[self.currency]

    # --- additive amounts <-> the values the curator is given --------------------------

    def value(self, additive: float, digits: int = COST_DIGITS) -> float:
        """The cost to hand to the curator for an additive amount, rounded down (to
        ``digits`` significant digits)."""
        return round_down(math.sqrt(additive) if self.currency == "mu" else additive, digits)

    def additive(self, value: float) -> float:
        """The additive amount the curator charges for a value (mu is squared)."""
        return value * value if self.currency == "mu" else value

    def cost_guarantee(self, value: float) -> PureDP | ZCDP | GDP:
        return {"epsilon": PureDP, "rho": ZCDP, "mu": GDP}[self.currency](value)

    def noise(self, value: float):  # -> Noise
        """The exact noise the curator adds for a cost ``value`` on a count of this
        budget's sensitivity (scale k/eps, sigma k/sqrt(2 rho) or about k/mu under a
        privacy unit of k rows)."""
        return noise_for_cost(self.cost_guarantee(value), self.sensitivity)

    def describe(self) -> str:
        g = self.guarantee
        if isinstance(g, ApproxDP):
            return f"({g.epsilon:g}, {g.delta:g})-DP, enforced as rho = {self.amount:.6g} zCDP"
        if isinstance(g, PureDP):
            return f"{g.epsilon:g}-DP"
        if isinstance(g, ZCDP):
            return f"{g.rho:g}-zCDP"
        return f"{g.mu:g}-GDP"
