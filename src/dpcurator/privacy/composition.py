"""How to account for what happened: every applicable composition theorem, side by side.

``compose(events, delta=D)`` reports, for each method that applies, the epsilon at total
delta D (or, with ``epsilon=E``, the total delta at E), whether the result is a rigorous
bound or an approximation, and the theorem behind it. All methods are evaluated at the
same total delta (or epsilon), so the minimum over the rigorous ones is itself rigorous
(DESIGN.md §11).

These theorems assume every mechanism's privacy parameters are fixed before the
interaction (the mechanisms themselves may be chosen adaptively). When analysts choose
parameters adaptively, only the additive filters of :mod:`dpcurator.privacy.filters` are
valid (Rogers, Roth, Ullman & Vadhan 2016; Whitehouse et al. 2023).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dpcurator.errors import InvalidParameter
from dpcurator.privacy import _validate, bounds, optimal
from dpcurator.privacy.discrete_gaussian import effective_gdp_mu
from dpcurator.privacy.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    Event,
    Gaussian,
    Guaranteed,
    Laplace,
)
from dpcurator.privacy.gaussian import gdp_delta, gdp_epsilon, mu_from_pure
from dpcurator.privacy.guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP
from dpcurator.privacy.zcdp import zcdp_delta, zcdp_epsilon

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


def _native(e: Event) -> tuple[float, float] | None:
    """(eps, delta) per run, for mechanisms whose guarantee is natively (eps, delta)-DP."""
    match e:
        case Laplace(scale=b) | DiscreteLaplace(scale=b):
            # Laplace: Dwork, McSherry, Nissim & Smith 2006; discrete Laplace: the ratio
            # of neighbouring pmfs is at most e^{1/b} (Ghosh, Roughgarden & Sundararajan 2012).
            return (1 / b, 0.0)
        case Guaranteed(guarantee=PureDP(epsilon=eps)):
            return (eps, 0.0)
        case Guaranteed(guarantee=ApproxDP(epsilon=eps, delta=d)):
            return (eps, d)
    return None


def _rho(e: Event) -> float | None:
    """zCDP rho per run."""
    native = _native(e)
    if native is not None:
        # eps-DP => (eps^2/2)-zCDP (Bun & Steinke 2016, Prop. 1.4); none for delta > 0.
        return native[0] ** 2 / 2 if native[1] == 0 else None
    match e:
        case Gaussian(sigma=s) | DiscreteGaussian(sigma=s):
            # Bun & Steinke 2016, Prop. 1.6; Canonne, Kamath & Steinke 2020, Thm 4.
            return 1 / (2 * s * s)
        case Guaranteed(guarantee=ZCDP(rho=rho)):
            return rho
        case Guaranteed(guarantee=GDP(mu=mu)):
            return mu * mu / 2
    return None


def _mu(e: Event) -> float | None:
    """Gaussian-DP mu per run (none for zCDP or delta > 0: they do not imply GDP)."""
    native = _native(e)
    if native is not None:
        return mu_from_pure(native[0]) if native[1] == 0 else None
    match e:
        case Gaussian(sigma=s):
            return 1 / s  # Dong, Roth & Su 2022, Thm 2.7
        case DiscreteGaussian(sigma=s):
            return effective_gdp_mu(s)  # DESIGN.md §9: not exactly 1/sigma
        case Guaranteed(guarantee=GDP(mu=mu)):
            return mu
    return None


def _clt_moments(e: Event) -> tuple[float, float] | None:
    """(kl, kappa_2) functionals of Dong, Roth & Su 2022, §3.3, per run."""
    native = _native(e)
    if native is not None:
        eps, d = native
        return (eps * math.tanh(eps / 2), eps * eps) if d == 0 else None
    mu = _mu(e)
    if mu is None:
        return None
    return (mu * mu / 2, mu * mu + mu**4 / 4)


def _all(events: tuple[Event, ...], view: Callable[[Event], object]) -> list | None:
    out = [view(e) for e in events]
    return None if any(v is None for v in out) else out


# --- accountants ---------------------------------------------------------------------


def _accountants(
    events: tuple[Event, ...], wanted: frozenset[str] = frozenset(METHODS)
) -> list[Accountant]:
    out: list[Accountant] = []
    native = _all(events, _native)
    if native is not None:
        runs = [(eps, d, e.count) for (eps, d), e in zip(native, events, strict=True)]
        s = bounds.Sums.of(runs)
        homogeneous = len({(eps, d) for eps, d, _ in runs}) == 1
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
            eps0, d0, _ = runs[0]
            out.append(
                Accountant(
                    "optimal",
                    True,
                    "exact optimal composition of homogeneous (eps, delta)-DP mechanisms "
                    "(Kairouz, Oh & Viswanath 2017, Thm 3.3)",
                    lambda d: optimal.optimal_epsilon(eps0, d0, s.n, d),
                    lambda e: min(1.0, optimal.optimal_delta(eps0, d0, s.n, e)),
                )
            )
    pld_acc = _pld_accountant(events) if "pld" in wanted else None
    if pld_acc is not None:
        out.append(pld_acc)
    rhos = _all(events, _rho)
    if rhos is not None:
        rho = math.fsum(r * e.count for r, e in zip(rhos, events, strict=True))
        out.append(
            Accountant(
                "zcdp",
                True,
                f"zCDP: rho = sum rho_i = {rho:.6g} (Bun & Steinke 2016, Lemma 1.7), converted by "
                "the tighter of Bun & Steinke Prop. 1.3 and Canonne, Kamath & Steinke 2020, Cor. 13",
                lambda d: zcdp_epsilon(rho, d),
                lambda e: zcdp_delta(rho, e),
            )
        )
    mus = _all(events, _mu)
    if mus is not None:
        mu = math.sqrt(math.fsum(m * m * e.count for m, e in zip(mus, events, strict=True)))
        out.append(
            Accountant(
                "gdp",
                True,
                f"Gaussian DP: mu = sqrt(sum mu_i^2) = {mu:.6g} (Dong, Roth & Su 2022, Cor. 3.3), "
                "exact delta(eps) (Cor. 2.13)",
                lambda d: gdp_epsilon(mu, d),
                lambda e: gdp_delta(mu, e),
            )
        )
    moments = _all(events, _clt_moments)
    if moments is not None:
        kl = math.fsum(k * e.count for (k, _), e in zip(moments, events, strict=True))
        k2 = math.fsum(v * e.count for (_, v), e in zip(moments, events, strict=True))
        kl_sq = math.fsum(k * k * e.count for (k, _), e in zip(moments, events, strict=True))
        spread = k2 - kl_sq
        if spread > 0:
            mu_clt = 2 * kl / math.sqrt(spread)
            out.append(
                Accountant(
                    "clt",
                    False,
                    f"central limit approximation G_mu, mu = {mu_clt:.6g} (Dong, Roth & Su 2022, "
                    "Thm 3.5): an approximation, never a bound",
                    lambda d: gdp_epsilon(mu_clt, d),
                    lambda e: gdp_delta(mu_clt, e),
                )
            )
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(out, key=lambda a: order[a.method])


def _pld_accountant(events: tuple[Event, ...]) -> Accountant | None:
    if any(isinstance(e, Guaranteed) and isinstance(e.guarantee, ZCDP) for e in events):
        return None  # zCDP is not a single trade-off curve: no PLD
    from dpcurator.privacy import pld  # lazy: dp-accounting is slow to import

    composed = pld.compose_pld(list(events))
    if composed is None:
        return None
    interval = pld.discretisation(list(events))
    slack = pld.numerical_slack(list(events))

    def epsilon(d: float) -> float | None:
        if d <= 2 * slack:
            return None
        eps = float(composed.get_epsilon_for_delta(d - slack))
        return eps if math.isfinite(eps) else None

    return Accountant(
        "pld",
        True,
        f"numerical privacy-loss distribution, pessimistic discretisation {interval:g}, "
        f"plus {slack:.0e} in delta for FFT truncation (dp-accounting; Doroshenko, Ghazi, "
        "Kamath, Kumar & Manurangsi 2022)",
        epsilon,
        lambda e: min(1.0, float(composed.get_delta_for_epsilon(e)) + slack),
    )


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
        if delta is not None:
            eps = acc.epsilon(delta)
            if eps is None:
                continue
            results[acc.method] = MethodResult(acc.method, eps, delta, acc.rigorous, acc.theorem)
        else:
            assert epsilon is not None
            d = acc.delta(epsilon)
            results[acc.method] = MethodResult(acc.method, epsilon, d, acc.rigorous, acc.theorem)
    return Composition(events, delta, epsilon, MappingProxyType(results))
