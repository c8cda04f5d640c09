"""Privacy filters: the budgets that stay valid when parameters are chosen adaptively.

A filter answers a request only if the running total, in an *additive currency*, stays
within the budget; otherwise it refuses, and the refusal depends only on the costs,
never on the data (Dwork & Roth 2014, Lemma 2.6). Valid currencies:

- pure DP, sum eps_i <= B: Dwork & Roth 2014, Lemma 2.6, the delta = 0 case
  of the filters of Rogers, Roth, Ullman & Vadhan, *Privacy Odometers and Filters:
  Pay-as-you-Go Composition* (NeurIPS 2016);
- zCDP, sum rho_i <= B: Feldman & Zrnic, *Individual Privacy Accounting via a Rényi
  Filter* (NeurIPS 2021), their Rényi filter applied at every order alpha (rho-zCDP is
  (alpha, alpha rho)-RDP for all alpha > 1);
- Gaussian DP, sum mu_i^2 <= B^2: Smith & Thakurta, *Fully Adaptive Composition for
  Gaussian Differential Privacy* (2022), their main theorem.

Advanced composition, KOV, optimal composition and PLD are *not* valid filters with
adaptively chosen parameters (Rogers et al. 2016; Whitehouse, Ramdas, Rogers & Wu 2023).

Amounts are kept as exact fractions of the *decimal* value a float prints as (0.4 is
2/5), so that 0.4 + 0.4 + 0.2 spends a budget of 1.0 exactly and a total above the
budget is never admitted by rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from dpcurator.errors import BudgetExceeded, InvalidParameter
from dpcurator.privacy import _validate
from dpcurator.privacy.guarantees import GDP, ZCDP, Guarantee, PureDP


def exact(value: float | Fraction | int) -> Fraction:
    """The exact rational a user means by ``value``: its shortest decimal form."""
    if isinstance(value, Fraction | int):
        return Fraction(value)
    return Fraction(repr(float(value)))


@dataclass
class AdditiveFilter:
    """A budget in one additive currency; ``spend`` checks and charges atomically."""

    currency: str  # "epsilon", "rho" or "mu^2"
    budget: Fraction
    spent: Fraction = field(default=Fraction(0))
    #: Costs are given as mu and charged as mu^2 (squared exactly, so 0.6 and 0.8 fill 1.0).
    squared: bool = False

    def _cost(self, cost: float | Fraction) -> Fraction:
        unit = "mu" if self.squared else self.currency
        if isinstance(cost, Fraction):
            if cost < 0:
                raise InvalidParameter(f"cost in {unit} must be >= 0, got {cost}")
            c = cost
        else:
            c = exact(_validate.nonnegative(f"cost in {unit}", cost))
        return c * c if self.squared else c

    @property
    def remaining(self) -> Fraction:
        return self.budget - self.spent

    def can_spend(self, cost: float | Fraction) -> bool:
        """Whether the total would stay within the budget (compared exactly)."""
        return self.spent + self._cost(cost) <= self.budget

    def spend(self, cost: float | Fraction) -> Fraction:
        """Charge ``cost`` or raise :class:`BudgetExceeded` (charging nothing); return what remains."""
        c = self._cost(cost)
        if self.spent + c > self.budget:
            raise BudgetExceeded(
                f"refused: cost {float(c):.6g} {self.currency} exceeds the remaining "
                f"{float(self.remaining):.6g} of the budget {float(self.budget):.6g} {self.currency}"
            )
        self.spent += c
        return self.remaining


def pure_filter(budget: PureDP | float) -> AdditiveFilter:
    """Sum of eps_i <= B (Dwork & Roth 2014, Lemma 2.6; Rogers et al. 2016)."""
    eps = budget.epsilon if isinstance(budget, PureDP) else budget
    return AdditiveFilter("epsilon", exact(_validate.nonnegative("budget epsilon", eps)))


def zcdp_filter(budget: ZCDP | float) -> AdditiveFilter:
    """Sum of rho_i <= B (Feldman & Zrnic 2021, Rényi filter, order by order)."""
    rho = budget.rho if isinstance(budget, ZCDP) else budget
    return AdditiveFilter("rho", exact(_validate.nonnegative("budget rho", rho)))


def gdp_filter(budget: GDP | float) -> AdditiveFilter:
    """Sum of mu_i^2 <= B^2 (Smith & Thakurta 2022). Costs are given as mu_i."""
    mu = budget.mu if isinstance(budget, GDP) else budget
    return AdditiveFilter("mu^2", exact(_validate.nonnegative("budget mu", mu)) ** 2, squared=True)


def filter_for(budget: Guarantee) -> AdditiveFilter:
    """The filter enforcing ``budget`` in its own currency.

    An (eps, delta) budget is not additive; the curator converts it to the largest zCDP
    budget whose conversion meets it (:func:`largest_zcdp_within`) before building a filter.
    """
    if isinstance(budget, PureDP):
        return pure_filter(budget)
    if isinstance(budget, ZCDP):
        return zcdp_filter(budget)
    if isinstance(budget, GDP):
        return gdp_filter(budget)
    return zcdp_filter(largest_zcdp_within(budget.epsilon, budget.delta))


def largest_zcdp_within(epsilon: float, delta: float) -> ZCDP:
    """The largest rho found such that rho-zCDP provably implies (epsilon, delta)-DP.

    The conversion is the tighter of Bun & Steinke 2016, Prop. 1.3 and Canonne, Kamath &
    Steinke 2020, Cor. 13 (:func:`dpcurator.privacy.zcdp.zcdp_delta_upper`), whose delta
    grows with rho. A float bisection finds the boundary; the candidate is then stepped
    *down* by ulps until the interval-arithmetic upper bound on its delta at epsilon is
    within delta, both read at the smaller of their binary and decimal values. The rho
    returned, taken as its exact binary value, meets the budget.
    """
    from dpcurator.privacy import _rigor
    from dpcurator.privacy.zcdp import zcdp_delta_bun_steinke, zcdp_delta_cks, zcdp_delta_upper

    epsilon = _validate.nonnegative("budget epsilon", epsilon)
    delta = _validate.probability("budget delta", delta)
    if delta <= 0:
        raise InvalidParameter(
            "an (epsilon, delta) budget needs delta > 0 to be enforced in zCDP; "
            "use PureDP(epsilon) for delta = 0"
        )
    eps, target = _rigor.worst_low(epsilon), _rigor.worst_low(delta)

    def ok(rho: float) -> bool:
        return zcdp_delta_upper(Fraction(rho), eps) <= target

    def float_ok(rho: float) -> bool:
        return min(zcdp_delta_bun_steinke(rho, epsilon), zcdp_delta_cks(rho, epsilon)) <= delta

    lo, hi = 0.0, max(1.0, epsilon)
    while float_ok(hi):
        lo, hi = hi, hi * 2
        if hi > 1e300:
            break
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if float_ok(mid):
            lo = mid
        else:
            hi = mid
    rho = _rigor.step_down(lo, ok, 0.0)
    return ZCDP(0.0 if rho is None else rho)
