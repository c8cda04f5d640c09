"""How to account for what happened: every applicable composition theorem, side by side.

``compose(events, delta=D)`` reports, for each method that applies, the epsilon at total
delta D (or, with ``epsilon=E``, the total delta at E), whether the result is a rigorous
bound or an approximation, and the theorem behind it. All methods are evaluated at the
same total delta (or epsilon), so the minimum over the rigorous ones is itself rigorous.

Every figure marked rigorous is certified: it is rounded outward (epsilon and delta up)
and its defining inequality is checked exactly or in interval arithmetic, never only in
floats (see :mod:`dpcurator.privacy._rigor`). A method that cannot produce a certified,
finite figure for the given parameters is left out of the report.

These theorems assume every mechanism's privacy parameters are fixed before the
interaction (the mechanisms themselves may be chosen adaptively). When analysts choose
parameters adaptively, only the additive filters of :mod:`dpcurator.privacy.filters` are
valid (Rogers, Roth, Ullman & Vadhan 2016; Whitehouse et al. 2023).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction
from types import MappingProxyType

from mpmath import iv

from dpcurator.errors import InvalidParameter
from dpcurator.privacy import _rigor, _validate, bounds, optimal
from dpcurator.privacy.discrete_gaussian import MAX_SIGMA as DGAUSS_MAX_SIGMA
from dpcurator.privacy.discrete_gaussian import MIN_SIGMA as DGAUSS_MIN_SIGMA
from dpcurator.privacy.discrete_gaussian import effective_gdp_mu
from dpcurator.privacy.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    Event,
    Gaussian,
    Guaranteed,
    Laplace,
)
from dpcurator.privacy.gaussian import (
    gdp_delta_float,
    gdp_delta_upper,
    gdp_epsilon_exact,
    gdp_epsilon_float,
    mu_from_pure_exact,
    mu_from_pure_float,
)
from dpcurator.privacy.guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP
from dpcurator.privacy.zcdp import zcdp_delta_upper, zcdp_epsilon_exact

#: Every method, in the order reports list them.
METHODS = ("basic", "advanced", "kov", "optimal", "pld", "zcdp", "gdp", "clt")


@dataclass(frozen=True)
class MethodResult:
    """One theorem's answer: (epsilon, delta), rigorous or not, and why."""

    method: str
    epsilon: float
    delta: float
    rigorous: bool
    theorem: str


@dataclass(frozen=True)
class Composition:
    """All applicable methods at one target; ``best`` is the tightest rigorous one."""

    events: tuple[Event, ...]
    target_delta: float | None
    target_epsilon: float | None
    methods: Mapping[str, MethodResult]

    @property
    def best(self) -> MethodResult | None:
        """Smallest epsilon (or delta, for an epsilon target) among rigorous methods."""
        rigorous = [r for r in self.methods.values() if r.rigorous]
        if not rigorous:
            return None
        key = (lambda r: r.epsilon) if self.target_delta is not None else (lambda r: r.delta)
        return min(rigorous, key=key)

    def __getitem__(self, method: str) -> MethodResult:
        return self.methods[method]


@dataclass(frozen=True)
class Accountant:
    """A method prepared for a fixed list of events: epsilon(delta) and delta(epsilon)."""

    method: str
    rigorous: bool
    theorem: str
    epsilon: Callable[[float], float | None]  # None: cannot certify this delta
    delta: Callable[[float], float]


# --- per-event views -------------------------------------------------------------------
# Each view returns exact rationals, reading every float parameter pessimistically
# (the worse of its binary and decimal values, :mod:`dpcurator.privacy._rigor`).


def _native_float(e: Event) -> tuple[float, float] | None:
    """(eps, delta) per run as floats, for mechanisms whose guarantee is natively (eps, delta)-DP."""
    match e:
        case Laplace(scale=b) | DiscreteLaplace(scale=b):
            return (1.0 / b if b >= 1e-300 else math.inf, 0.0)
        case Guaranteed(guarantee=PureDP(epsilon=eps)):
            return (eps, 0.0)
        case Guaranteed(guarantee=ApproxDP(epsilon=eps, delta=d)):
            return (eps, d)
    return None


def _native(e: Event) -> tuple[Fraction, Fraction] | None:
    """(eps, delta) per run, exact, for natively (eps, delta)-DP mechanisms."""
    match e:
        case Laplace(scale=b) | DiscreteLaplace(scale=b):
            # Laplace: Dwork, McSherry, Nissim & Smith 2006; discrete Laplace: the ratio
            # of neighbouring pmfs is at most e^{1/b} (Ghosh, Roughgarden & Sundararajan 2012).
            return (1 / _rigor.worst_low(b), Fraction(0))
        case Guaranteed(guarantee=PureDP(epsilon=eps)):
            return (_rigor.worst_high(eps), Fraction(0))
        case Guaranteed(guarantee=ApproxDP(epsilon=eps, delta=d)):
            return (_rigor.worst_high(eps), _rigor.worst_high(d))
    return None


def _rho(e: Event) -> Fraction | None:
    """zCDP rho per run, exact."""
    native = _native(e)
    if native is not None:
        # eps-DP => (eps^2/2)-zCDP (Bun & Steinke 2016, Prop. 1.4); none for delta > 0.
        return native[0] ** 2 / 2 if native[1] == 0 else None
    match e:
        case Gaussian(sigma=s) | DiscreteGaussian(sigma=s):
            # Bun & Steinke 2016, Prop. 1.6; Canonne, Kamath & Steinke 2020, Thm 4.
            return 1 / (2 * _rigor.worst_low(s) ** 2)
        case Guaranteed(guarantee=ZCDP(rho=rho)):
            return _rigor.worst_high(rho)
        case Guaranteed(guarantee=GDP(mu=mu)):
            return _rigor.worst_high(mu) ** 2 / 2
    return None


def _mu_sq(e: Event) -> Fraction | None:
    """Gaussian-DP mu^2 per run, exact or a proven upper bound (none for zCDP or delta > 0:
    they do not imply GDP)."""
    native = _native(e)
    if native is not None:
        if native[1] != 0:
            return None
        mu = mu_from_pure_exact(native[0])
        return Fraction(mu) ** 2 if math.isfinite(mu) else None
    match e:
        case Gaussian(sigma=s):
            return 1 / _rigor.worst_low(s) ** 2  # Dong, Roth & Su 2022, Thm 2.7
        case DiscreteGaussian(sigma=s):
            # Not exactly 1/sigma: its trade-off curve dips below G_{1/sigma}
            # (Canonne, Kamath & Steinke 2020, Thm 7 vs Dong, Roth & Su 2022, Cor. 2.13).
            if not DGAUSS_MIN_SIGMA <= s <= DGAUSS_MAX_SIGMA:
                return None
            return Fraction(effective_gdp_mu(s)) ** 2
        case Guaranteed(guarantee=GDP(mu=mu)):
            return _rigor.worst_high(mu) ** 2
    return None


def _mu_float(e: Event) -> float | None:
    """mu per run in floats, for the central-limit approximation only."""
    native = _native_float(e)
    if native is not None:
        return mu_from_pure_float(native[0]) if native[1] == 0 else None
    match e:
        case Gaussian(sigma=s):
            return 1 / s
        case DiscreteGaussian(sigma=s):
            ok = DGAUSS_MIN_SIGMA <= s <= DGAUSS_MAX_SIGMA
            return effective_gdp_mu(s) if ok else None
        case Guaranteed(guarantee=GDP(mu=mu)):
            return mu
    return None


def _clt_moments(e: Event) -> tuple[float, float] | None:
    """(kl, kappa_2) functionals of Dong, Roth & Su 2022, §3.3, per run."""
    native = _native_float(e)
    try:
        if native is not None:
            eps, d = native
            return (eps * math.tanh(eps / 2), eps * eps) if d == 0 else None
        mu = _mu_float(e)
        if mu is None:
            return None
        return (mu * mu / 2, mu * mu + mu**4 / 4)
    except ArithmeticError:
        return None


def _all(events: tuple[Event, ...], view: Callable[[Event], object]) -> list | None:
    out = []
    for e in events:
        v = view(e)
        if v is None:
            return None
        out.append(v)
    return out


def _total_runs(events: tuple[Event, ...]) -> int:
    return sum(e.count for e in events)


# --- accountants ---------------------------------------------------------------------


def _accountants(
    events: tuple[Event, ...], wanted: frozenset[str] = frozenset(METHODS)
) -> list[Accountant]:
    out: list[Accountant] = []
    native = _all(events, _native) if wanted & {"basic", "advanced", "kov", "optimal"} else None
    if native is not None:
        runs = [(eps, d, e.count) for (eps, d), e in zip(native, events, strict=True)]
        s = bounds.Sums.of(runs)
        floats = {_native_float(e) for e in events}
        homogeneous = len(floats) == 1
        out.append(
            Accountant(
                "basic",
                True,
                "basic composition (sum eps_i, sum delta_i) (Dwork & Roth 2014, Thm 3.16)",
                lambda d: bounds.basic_epsilon(s, d),
                lambda e: bounds.basic_delta(s, e),
            )
        )
        form = "homogeneous" if homogeneous else "heterogeneous"
        out.append(
            Accountant(
                "advanced",
                True,
                f"advanced composition, {form} form (Dwork, Rothblum & Vadhan 2010; "
                "Dwork & Roth 2014, Thm 3.20)",
                lambda d: bounds.advanced_epsilon(s, d),
                lambda e: bounds.advanced_delta(s, e),
            )
        )
        out.append(
            Accountant(
                "kov",
                True,
                "Kairouz, Oh & Viswanath 2017, Thm 3.5",
                lambda d: bounds.kov_epsilon(s, d),
                lambda e: bounds.kov_delta(s, e),
            )
        )
        if homogeneous:
            # Every run is (eps0, d0)-DP for the largest exact reading among them.
            eps0 = max(eps for eps, _, _ in s.runs)
            d0 = max(d for _, d, _ in s.runs)
            if optimal.applies(eps0, s.n):
                out.append(
                    Accountant(
                        "optimal",
                        True,
                        "exact optimal composition of homogeneous (eps, delta)-DP mechanisms "
                        "(Kairouz, Oh & Viswanath 2017, Thm 3.3), certified in exact arithmetic",
                        lambda d: optimal.optimal_epsilon_exact(eps0, d0, s.n, d),
                        lambda e: optimal.optimal_delta_exact(eps0, d0, s.n, e),
                    )
                )
    pld_acc = _pld_accountant(events) if "pld" in wanted else None
    if pld_acc is not None:
        out.append(pld_acc)
    rhos = _all(events, _rho) if "zcdp" in wanted else None
    if rhos is not None:
        rho = sum((r * e.count for r, e in zip(rhos, events, strict=True)), Fraction(0))
        out.append(
            Accountant(
                "zcdp",
                True,
                f"zCDP: rho = sum rho_i = {_show_up(rho)} (Bun & Steinke 2016, Lemma 1.7), converted by "
                "the tighter of Bun & Steinke Prop. 1.3 and Canonne, Kamath & Steinke 2020, Cor. 13",
                lambda d: zcdp_epsilon_exact(rho, _rigor.worst_low(d)),
                lambda e: _delta_up(zcdp_delta_upper(rho, _rigor.worst_low(e))),
            )
        )
    mus = _all(events, _mu_sq) if "gdp" in wanted else None
    if mus is not None:
        mu_sq = sum((m * e.count for m, e in zip(mus, events, strict=True)), Fraction(0))
        out.append(
            Accountant(
                "gdp",
                True,
                f"Gaussian DP: mu = sqrt(sum mu_i^2) = {_show_up(mu_sq, root=True)} (Dong, Roth & Su "
                "2022, Cor. 3.3), exact delta(eps) (Cor. 2.13)",
                lambda d: gdp_epsilon_exact(mu_sq, _rigor.worst_low(d)),
                lambda e: _delta_up(gdp_delta_upper(mu_sq, _rigor.worst_low(e))),
            )
        )
    moments = _all(events, _clt_moments) if "clt" in wanted else None
    if moments is not None:
        kl = math.fsum(k * e.count for (k, _), e in zip(moments, events, strict=True))
        k2 = math.fsum(v * e.count for (_, v), e in zip(moments, events, strict=True))
        kl_sq = math.fsum(k * k * e.count for (k, _), e in zip(moments, events, strict=True))
        spread = k2 - kl_sq
        if spread > 0 and math.isfinite(kl) and math.isfinite(spread):
            mu_clt = 2 * kl / math.sqrt(spread)
            if math.isfinite(mu_clt):
                out.append(
                    Accountant(
                        "clt",
                        False,
                        f"central limit approximation G_mu, mu = {mu_clt:.6g} (Dong, Roth & Su "
                        "2022, Thm 3.5): an approximation, never a bound",
                        lambda d: gdp_epsilon_float(mu_clt, d),
                        lambda e: gdp_delta_float(mu_clt, e),
                    )
                )
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(out, key=lambda a: order[a.method])


def _delta_up(x: Fraction) -> float:
    return min(1.0, _rigor.float_up(x))


def _show_up(x: Fraction, root: bool = False) -> str:
    """A parameter for a theorem's text (x, or its square root): 6 digits, rounded up."""
    if root:
        with _rigor.precision():
            v = iv.sqrt(_rigor.q(x))
            x = _rigor.hi(v) if _rigor.finite(v) else Fraction(10) ** 400
    return fmt_up(_rigor.float_up(x))


def fmt_up(v: float) -> str:
    """``v`` with 6 significant digits, rounded up (so a displayed bound still holds).

    Rounds up the shortest decimal of v; the certified floats of this module are at
    least the exact figure in that reading too (:func:`dpcurator.privacy._rigor.float_up`).
    """
    if not math.isfinite(v) or v == 0:
        return f"{v:g}"
    d = Decimal(repr(v))
    r = d.quantize(Decimal(1).scaleb(d.adjusted() - 5), rounding=ROUND_CEILING)
    return f"{float(r):.6g}"  # r has at most 6 digits: this prints exactly r


#: Beyond this many runs dp-accounting's PLD becomes slow or unreliable: left out.
PLD_MAX_RUNS = 10**7


def _pld_accountant(events: tuple[Event, ...]) -> Accountant | None:
    if any(isinstance(e, Guaranteed) and isinstance(e.guarantee, ZCDP) for e in events):
        return None  # zCDP is not a single trade-off curve: no PLD
    if _total_runs(events) > PLD_MAX_RUNS or not all(_pld_sane(e) for e in events):
        return None
    from dpcurator.privacy import pld  # lazy: dp-accounting is slow to import

    try:
        composed = pld.compose_pld(list(events))
    except (ArithmeticError, ValueError, MemoryError):
        return None
    if composed is None:
        return None
    interval = pld.discretisation(list(events))
    slack = pld.numerical_slack(list(events))

    def epsilon(d: float) -> float | None:
        if d <= 2 * slack:
            return None
        try:
            eps = float(composed.get_epsilon_for_delta(d - slack))
        except (ArithmeticError, ValueError):
            return None
        return eps if math.isfinite(eps) else None

    def delta(e: float) -> float:
        try:
            return min(1.0, float(composed.get_delta_for_epsilon(e)) + slack)
        except (ArithmeticError, ValueError):
            return 1.0

    return Accountant(
        "pld",
        True,
        f"numerical privacy-loss distribution, pessimistic discretisation {interval:g}, "
        f"plus {slack:.0e} in delta for FFT truncation (dp-accounting; Doroshenko, Ghazi, "
        "Kamath, Kumar & Manurangsi 2022)",
        epsilon,
        delta,
    )


def _pld_sane(e: Event) -> bool:
    """Parameters for which dp-accounting builds a PLD without overflowing."""
    native = _native_float(e)
    if native is not None:
        return 1e-6 <= native[0] <= 50 and native[1] < 0.5
    match e:
        case Gaussian(sigma=s) | DiscreteGaussian(sigma=s):
            return 1e-3 <= s <= 1e4
        case Guaranteed(guarantee=GDP(mu=mu)):
            return 1e-4 <= mu <= 1e3
    return False


# --- the public entry point -------------------------------------------------------------


def as_events(items: Iterable[Event | Guarantee]) -> tuple[Event, ...]:
    """Accept events, or bare guarantees (each a single run)."""
    out: list[Event] = []
    for item in items:
        if isinstance(item, PureDP | ApproxDP | ZCDP | GDP):
            out.append(Guaranteed(item))
        elif isinstance(item, Laplace | DiscreteLaplace | Gaussian | DiscreteGaussian | Guaranteed):
            out.append(item)
        else:
            raise InvalidParameter(f"not a mechanism or guarantee: {item!r}")
    if not out:
        raise InvalidParameter("nothing to compose: give at least one mechanism")
    return tuple(out)


def accountants(items: Iterable[Event | Guarantee]) -> list[Accountant]:
    """Every applicable method for these events, prepared (for plots and profiles)."""
    return _accountants(as_events(items))


def compose(
    items: Iterable[Event | Guarantee],
    *,
    delta: float | None = None,
    epsilon: float | None = None,
    methods: Iterable[str] | None = None,
) -> Composition:
    """Compose with every applicable theorem, at total ``delta`` or at ``epsilon``.

    Exactly one of ``delta`` (0 < delta < 1) and ``epsilon`` (>= 0) must be given.
    A method that cannot certify the target delta (e.g. when sum delta_i already
    exceeds it) is left out. ``methods`` restricts the report to some methods.
    """
    if (delta is None) == (epsilon is None):
        raise InvalidParameter("give exactly one of delta= and epsilon=")
    if delta is not None:
        delta = _validate.open_probability("delta", delta)
    if epsilon is not None:
        epsilon = _validate.nonnegative("epsilon", epsilon)
    wanted = set(METHODS if methods is None else methods)
    unknown = wanted - set(METHODS)
    if unknown:
        raise InvalidParameter(f"unknown method(s) {sorted(unknown)}; known: {', '.join(METHODS)}")
    events = as_events(items)
    results: dict[str, MethodResult] = {}
    for acc in _accountants(events, frozenset(wanted)):
        if acc.method not in wanted:
            continue
        try:
            if delta is not None:
                eps = acc.epsilon(delta)
                if eps is None or not math.isfinite(eps):
                    continue
                result = MethodResult(acc.method, eps, delta, acc.rigorous, acc.theorem)
            else:
                assert epsilon is not None
                d = acc.delta(epsilon)
                result = MethodResult(acc.method, epsilon, d, acc.rigorous, acc.theorem)
        except ArithmeticError:
            continue  # the parameters are beyond what this method can evaluate: left out
        results[acc.method] = result
    return Composition(events, delta, epsilon, MappingProxyType(results))
