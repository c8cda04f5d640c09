"""Budgets in their additive currency, and the exact cost of one request.

A filter stays valid under fully adaptive choices only in an additive currency: epsilon
for pure DP (Dwork & Roth 2014, Lemma 2.6), rho for zCDP (Feldman & Zrnic 2021), mu^2
for Gaussian DP (Smith & Thakurta 2022). An (epsilon, delta) budget is enforced as the
largest rho whose conversion meets it. Every amount is an exact fraction: a float cost
is read as the shortest decimal it prints as (0.1 is 1/10), so that 0.4 + 0.4 + 0.2
fills a budget of 1 exactly and no rounding ever admits a total above the budget.
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from dpcurator.errors import BudgetExceeded, InvalidParameter
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.filters import exact, largest_zcdp_within

#: The guarantee each currency's cost is given as.
_GUARANTEE = {"epsilon": PureDP, "rho": ZCDP, "mu": GDP}


def exact_number(value: object, name: str) -> Fraction:
    """A finite, positive real number given by a caller, as the exact rational meant.

    ints, floats (read as their shortest decimal), Fractions, Decimals and numpy
    scalars are accepted; bools, strings, NaN, infinities, zero and negative numbers are
    not. Huge integers are kept exact (no float conversion that could overflow).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise InvalidParameter(f"{name} must be a number, got {value!r}")
    if isinstance(value, int | Fraction):
        out = Fraction(value)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidParameter(f"{name} must be a finite number > 0, got {value}")
        out = Fraction(value)
    else:
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise InvalidParameter(f"{name} must be a finite number > 0, got {value!r}") from None
        if not math.isfinite(f):
            raise InvalidParameter(f"{name} must be a finite number > 0, got {value!r}")
        out = exact(f)
    if out <= 0:
        raise InvalidParameter(f"{name} must be a finite number > 0, got {value!r}")
    return out


@dataclass(frozen=True)
class Cost:
    """One request's price: ``param`` in the currency's own unit (epsilon, rho or mu),
    ``amount`` in the additive unit the ledger charges (mu is squared)."""

    param: Fraction
    amount: Fraction


@dataclass(frozen=True)
class Budget:
    """A budget in its additive currency."""

    guarantee: PureDP | ApproxDP | ZCDP | GDP
    currency: str  # the keyword a cost is given with: epsilon, rho or mu
    amount: Fraction  # in the additive unit: eps, rho, or mu^2

    @staticmethod
    def of(guarantee: object) -> Budget:
        """PureDP -> eps; ZCDP -> rho; GDP -> mu^2; (eps, delta) -> the largest rho whose
        conversion meets it (Bun & Steinke 2016, Prop. 1.3; Canonne, Kamath & Steinke
        2020, Cor. 13), rounded down."""
        if isinstance(guarantee, PureDP):
            b = Budget(guarantee, "epsilon", exact(guarantee.epsilon))
        elif isinstance(guarantee, ZCDP):
            b = Budget(guarantee, "rho", exact(guarantee.rho))
        elif isinstance(guarantee, GDP):
            b = Budget(guarantee, "mu", exact(guarantee.mu) ** 2)
        elif isinstance(guarantee, ApproxDP):
            rho = largest_zcdp_within(guarantee.epsilon, guarantee.delta).rho
            b = Budget(guarantee, "rho", Fraction(rho))  # the float's exact value meets it
        else:
            raise InvalidParameter(
                "budget must be PureDP(eps), ApproxDP(eps, delta), ZCDP(rho) or GDP(mu), "
                f"got {guarantee!r}"
            )
        if b.amount <= 0:
            raise InvalidParameter(f"budget must be positive, got {guarantee!r}")
        return b

    def cost(self, epsilon: object = None, rho: object = None, mu: object = None) -> Cost:
        """The exact cost of a request that names its price in this budget's currency.

        A cost above the whole budget can never be admitted: it is refused here, before
        any noise is prepared (the refusal reads only the cost and the budget).
        """
        given = {k: v for k, v in (("epsilon", epsilon), ("rho", rho), ("mu", mu)) if v is not None}
        cur = self.currency
        if len(given) != 1 or cur not in given:
            raise InvalidParameter(
                f"give the cost as {cur}= (the budget {self.describe()} is kept in {cur})"
            )
        param = exact_number(given[cur], cur)
        c = Cost(param, self.additive(param))
        if c.amount > self.amount:
            raise BudgetExceeded(
                f"refused: {cur}={self.show(c.amount)} is more than the whole budget "
                f"{self.describe()}"
            )
        return c

    def additive(self, param: Fraction) -> Fraction:
        """A cost in the currency's unit, in the additive unit (mu is squared exactly)."""
        return param**2 if self.currency == "mu" else param

    def guarantee_of(self, param: float) -> PureDP | ZCDP | GDP:
        return _GUARANTEE[self.currency](param)

    def display(self, amount: Fraction) -> float:
        """An additive amount back in the currency's own unit (mu = sqrt of mu^2), as the
        float whose printed decimal is the largest one not above the exact amount: 0.1
        stays 0.1 (not 0.09999999999999999), and nothing is ever shown larger than it is
        (read as the decimal it prints as, which is how every cost is read)."""
        if amount <= 0:
            return 0.0
        if self.currency == "mu":
            return _decimal_at_most(amount, square=True)
        return _decimal_at_most(amount)

    def show(self, amount: Fraction) -> str:
        """An amount for a message (6 significant digits, never rounded up)."""
        if amount > 10**300:
            return f"{Decimal(amount.numerator) / Decimal(amount.denominator):.6g}"
        return f"{self.display(amount):.6g}"

    def describe(self) -> str:
        g = self.guarantee
        if isinstance(g, ApproxDP):
            return (
                f"ApproxDP(epsilon={g.epsilon:g}, delta={g.delta:g}) enforced as "
                f"rho={float(self.amount):.6g}"
            )
        return repr(g)


def _decimal_at_most(amount: Fraction, *, square: bool = False) -> float:
    """The largest float whose shortest decimal d has d <= amount (d^2 with ``square``)."""
    try:
        f = math.sqrt(float(amount)) if square else float(amount)
    except OverflowError:
        return sys.float_info.max
    while f > 0 and (exact(f) ** 2 if square else exact(f)) > amount:
        f = math.nextafter(f, 0.0)
    return f
