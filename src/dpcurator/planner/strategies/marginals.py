"""The marginals strategy: measure weighted marginal tables on the atom domain, answer
every query from all of them by generalised least squares.

Notation (McKenna, Miklau, Hay & Machanavajjhala, VLDB 2018, Sec. 6 "marginals"; Xiao,
Wang, Ding & Kifer, NeurIPS 2023, Sec. 4 "residual bases"): attributes 1..d with n_i
atoms (:mod:`.domain`), N = prod n_i; M_S is the marginal-on-S matrix, and

    M_S^T M_S = (x)_{i in S} I_{n_i} (x)_{i not in S} J_{n_i}.

These matrices commute and share the *residual* eigenbasis: per attribute the all-ones
direction and its orthogonal complement; residual subspace T (a set of attributes) takes
the complement on T and the ones direction elsewhere. M_S^T M_S has eigenvalue
prod_{i not in S} n_i on residual T when T is a subset of S, else 0. Measuring table S
with noise of precision w_S (1 / variance of its cells) gives the Gram matrix
G = sum_S w_S M_S^T M_S with eigenvalue

    lambda_T = sum_{S >= T} w_S prod_{i not in S} n_i             on residual T,

so the generalised least-squares estimate x = G^+ sum_S w_S M_S^T y_S (Li, Miklau, Hay,
McGregor & Rastogi, VLDB J. 2015, the matrix mechanism) is computed residual by
residual, and a query q (a sum of boxes, each a Kronecker product of per-attribute 0/1
vectors) has variance sum_T ||P_T q||^2 / lambda_T. For two boxes with per-attribute
sizes a, a' and overlap o, <P_T u, P_T u'> is the product over attributes of
(o - a a'/n) on T and a a'/n off T: no vector of the domain's size is ever built.

Privacy: every point of the domain is in one cell of every measured table, so a table
costs its c_S once at every point and the filter's constraint is sum_S c_S <= B.
"""

from __future__ import annotations

import itertools
import math
import string
from dataclasses import dataclass

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.strategies.costs import (
    PRUNE,
    minimise_max,
    minimise_weighted,
    precision,
    precision_slope,
)
from dpcurator.planner.strategies.domain import AtomDomain

#: The most constrained attributes a marginals strategy considers (2^d subsets).
MAX_ATTRIBUTES = 10
#: The most cells of one measured table.
MAX_TABLE_CELLS = 50_000
#: Random starts of the non-convex pure-DP search, from a fixed seed.
RANDOM_STARTS = 64
RANDOM_STARTS_SEED = 20180801

#: Relative size under which a residual's share of a query is rounding noise.
TINY = 1e-13


def attributes_of(mask: int, d: int) -> list[int]:
    """The attribute indices in subset ``mask``, in order."""
    return [i for i in range(d) if mask >> i & 1]


_attrs = attributes_of


def _cells(mask: int, sizes: tuple[int, ...]) -> int:
    return math.prod(sizes[i] for i in _attrs(mask, len(sizes)))


def residual_profile(domain: AtomDomain, q: int) -> dict[int, float]:
    """||P_T q||^2 / N for every residual T (bit mask) where it is not zero."""
    d, sizes = domain.d, domain.sizes
    boxes = domain.boxes[q]
    out: dict[int, float] = {}
    for bi, b in enumerate(boxes):
        for bj in range(bi, len(boxes)):
            b2 = boxes[bj]
            base = 1.0
            both: list[tuple[int, float, float]] = []
            for i in range(d):
                if b[i] < 0 and b2[i] < 0:
                    continue
                n = sizes[i]
                u, v = domain.vector(i, b[i]), domain.vector(i, b2[i])
                a, a2, o = float(u.sum()), float(v.sum()), float(u @ v)
                off = a * a2 / (n * n)
                if b[i] >= 0 and b2[i] >= 0:
                    both.append((i, (o - a * a2 / n) / n, off))
                else:
                    base *= off
            terms = {0: base * (1.0 if bi == bj else 2.0)}
            for i, on, off in both:
                nxt: dict[int, float] = {}
                for m, val in terms.items():
                    nxt[m] = nxt.get(m, 0.0) + val * off
                    if on != 0.0:
                        nxt[m | 1 << i] = nxt.get(m | 1 << i, 0.0) + val * on
                terms = nxt
            for m, val in terms.items():
                out[m] = out.get(m, 0.0) + val
    scale = max((abs(v) for v in out.values()), default=0.0)
    return {m: v for m, v in out.items() if v > TINY * scale}


@dataclass(frozen=True)
class MarginalsModel:
    """The queries' residual profiles and the candidate tables, ready to optimise.

    ``profiles`` (K x R) holds the distinct profiles over the needed residuals ``rows``;
    ``profile_of[q]`` is query q's (-1: an empty query, exactly 0). The candidates are
    the marginal tables ``subsets`` then the residual measurements ``residuals`` (see
    :func:`marginals_model`); ``incidence`` (R x candidates) is 1/n_S where residual T
    lies in table S, and prod_{i in T} n_i for T's own residual measurement, so that
    lambda_T / N = incidence @ w, w the candidates' row precisions. ``factor``: each
    candidate's cost at a point in units of its rows' unit cost (1 for a table)."""

    domain: AtomDomain
    subsets: tuple[int, ...]
    rows: tuple[int, ...]
    incidence: np.ndarray
    profiles: np.ndarray
    profile_of: np.ndarray
    residuals: tuple[int, ...] = ()
    factor: np.ndarray | None = None

    @property
    def factors(self) -> np.ndarray:
        n = len(self.subsets) + len(self.residuals)
        return np.ones(n) if self.factor is None else self.factor

    def variances(self, w: np.ndarray) -> np.ndarray:
        """Per profile, at table precisions ``w``."""
        lam = self.incidence @ w
        with np.errstate(divide="ignore"):
            inv = np.where(lam > 0, 1.0 / lam, np.inf)
        return self.profiles @ inv

    def fn(self, currency: str):
        inc, prof, fac = self.incidence, self.profiles, self.factors

        def f(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            lam = inc @ precision(c / fac, currency)
            if not (lam > 0).all():  # a residual lost: some answer has no estimate
                return np.full(len(prof), np.inf), np.zeros((len(prof), len(c)))
            inv = 1.0 / lam
            v = prof @ inv
            slope = precision_slope(c / fac, currency) / fac
            jac = -(prof * inv**2) @ inc * slope[None, :]
            return v, jac

        return f


def marginals_model(
    domain: AtomDomain, max_cells: int = MAX_TABLE_CELLS, currency: str | None = None
) -> MarginalsModel:
    """Profiles of every query and every candidate table (all attribute subsets with at
    most ``max_cells`` cells). Under zCDP and GDP (``currency`` rho or mu) each needed
    residual T (T not empty, at most ``max_cells`` cells) is a candidate too: the
    residual measurement with the integer rows (x)_{i in T} (n_i I - J) over the
    marginal on T (:func:`dpcurator.planner.strategies.weights.centred`), which costs
    every point prod_{i in T} n_i (n_i - 1) times its unit and informs residual T
    alone: lambda_T / N = prod_{i in T} n_i w. With every residual so measured, the
    optimal costs are ResidualPlanner's closed form (Xiao, Wang, Ding & Kifer, NeurIPS
    2023, Thm 4.3), optimal over every linear Gaussian mechanism for marginals. Under
    pure DP their L1 column norms, prod 2 (n_i - 1), make them no match for the tables.
    Raises :class:`InvalidParameter` when the strategy does not apply (too many
    attributes, or a query needs a table that is too large)."""
    d, sizes = domain.d, domain.sizes
    if d > MAX_ATTRIBUTES:
        raise InvalidParameter(
            f"the workload constrains {d} attributes, more than {MAX_ATTRIBUTES}"
        )
    keys: dict[bytes, int] = {}
    rows: dict[int, int] = {}
    raw: list[dict[int, float]] = []
    profile_of = np.full(len(domain.boxes), -1, np.int64)
    for q in range(len(domain.boxes)):
        if not domain.boxes[q]:
            continue
        prof = residual_profile(domain, q)
        key = repr(sorted((m, round(v, 14)) for m, v in prof.items())).encode()
        if key not in keys:
            keys[key] = len(raw)
            raw.append(prof)
            for m in prof:
                rows.setdefault(m, len(rows))
        profile_of[q] = keys[key]
    subsets = tuple(m for m in range(1 << d) if _cells(m, sizes) <= max_cells)
    row_masks = tuple(sorted(rows, key=lambda m: (bin(m).count("1"), m)))
    where = {m: k for k, m in enumerate(row_masks)}
    prof_mat = np.zeros((len(raw), len(row_masks)))
    for k, prof in enumerate(raw):
        for m, v in prof.items():
            prof_mat[k, where[m]] = v
    inc = np.zeros((len(row_masks), len(subsets)))
    for j, s in enumerate(subsets):
        ns = float(_cells(s, sizes))
        for k, t in enumerate(row_masks):
            if t & s == t:
                inc[k, j] = 1.0 / ns
    residuals: tuple[int, ...] = ()
    factor = np.ones(len(subsets))
    if currency in ("rho", "mu"):
        residuals = tuple(t for t in row_masks if t and _cells(t, sizes) <= max_cells)
        res = np.zeros((len(row_masks), len(residuals)))
        for j, t in enumerate(residuals):
            res[where[t], j] = float(_cells(t, sizes))
        inc = np.hstack([inc, res])
        factor = np.concatenate([factor, [float(residual_factor(t, sizes)) for t in residuals]])
    uncovered = [t for k, t in enumerate(row_masks) if not inc[k].any()]
    if uncovered:
        names = ", ".join(domain.names[i] for i in _attrs(uncovered[0], d))
        raise InvalidParameter(
            f"a query needs a marginal on ({names}), which has more than {max_cells:,} cells"
        )
    return MarginalsModel(domain, subsets, row_masks, inc, prof_mat, profile_of, residuals, factor)


def residual_factor(mask: int, sizes: tuple[int, ...]) -> int:
    """The squared column norm of residual ``mask``'s integer rows: prod n_i (n_i - 1)."""
    return math.prod(sizes[i] * (sizes[i] - 1) for i in _attrs(mask, len(sizes)))


def optimise(
    model: MarginalsModel,
    omega: np.ndarray | None,
    budget: float,
    currency: str,
) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray]:
    """The tables and residual measurements to make, and their additive costs at a
    point (summing to ``budget``), for the weighted objective ``omega`` (per profile)
    or, when None, the largest variance.

    With a residual measurement for every needed residual (zCDP and GDP), the answer is
    ResidualPlanner's: every residual measured on its own, at costs c_T proportional to
    sqrt(a_T F_T / inc_T) for a_T the weighted profiles' mass on T (the minimum of
    sum_T a_T F_T / (2 inc_T c_T) under sum_T c_T = B, by Cauchy-Schwarz), optimal
    over all linear Gaussian mechanisms for the weighted sum of variances (Xiao, Wang,
    Ding & Kifer, NeurIPS 2023, Thm 4.3); for the largest variance, the convex search
    from there. Otherwise, starts: the workload's own tables; every table; the maximal
    needed residuals; the one table over every constrained attribute, when it is a
    candidate; candidates left with less than PRUNE of the budget are dropped when what
    remains still answers every query, and the rest re-optimised."""
    subsets = model.subsets
    n_tables = len(subsets)
    m = n_tables + len(model.residuals)
    own = np.zeros(m)
    for k in range(len(model.profiles)):
        top = max(
            (t for t, v in zip(model.rows, model.profiles[k], strict=True) if v > 0), default=0
        )
        j = _smallest_superset(top, subsets, model.domain.sizes)
        own[j] += 1.0 if omega is None else float(omega[k]) + 1e-300
    maximal = np.zeros(m)
    for t in model.rows:
        if not any(t2 != t and t2 & t == t for t2 in model.rows):
            maximal[_smallest_superset(t, subsets, model.domain.sizes)] = 1.0
    tables = np.r_[np.ones(n_tables), np.zeros(m - n_tables)]
    # The program is not convex under pure DP (a precision cosh(c) - 1 of the cost):
    # structured starts, then a fixed number of random ones from a fixed seed (public,
    # data-independent and reproducible: the same workload always gets the same plan).
    starts = [np.where(own > 0, 1.0, 0.0), np.sqrt(own), tables, maximal]
    whole = 0
    for t in model.rows:
        whole |= t
    if whole in subsets:  # one table holding every needed residual, if small enough
        starts.append(np.where(np.arange(m) == subsets.index(whole), 1.0, 0.0))
    if currency == "epsilon" and m > 4:
        rng = np.random.default_rng(RANDOM_STARTS_SEED)
        starts += [rng.dirichlet(np.ones(m)) for _ in range(RANDOM_STARTS)]
    weights = np.ones(len(model.profiles)) if omega is None else omega
    rp = _residual_planner(model)
    if rp is not None:  # every needed residual measurable on its own: RP is optimal
        sub = rp
        c = _closed_form(sub, weights)
        c = budget * c / c.sum()
        if omega is None:
            c, _ = minimise_max(sub.fn(currency), budget, c)
        return sub.subsets, sub.residuals, c
    fn = model.fn(currency)
    c, _ = minimise_weighted(fn, weights, budget, starts)
    keep = c >= PRUNE * budget
    if not keep.all():
        sub = _restrict(model, keep)
        if sub is not None:
            c2, _ = minimise_weighted(sub.fn(currency), weights, budget, [c[keep]])
            model, c = sub, c2
    if omega is None:
        c, _ = minimise_max(model.fn(currency), budget, c)
        keep = c >= PRUNE * budget
        if not keep.all():
            sub = _restrict(model, keep)
            if sub is not None:
                model, c = sub, c[keep] * (budget / c[keep].sum())
    return model.subsets, model.residuals, c


def _residual_planner(model: MarginalsModel) -> MarginalsModel | None:
    """The model restricted to ResidualPlanner's candidates (every needed residual's own
    measurement, the total by the one-cell table), or None when some needed residual has
    no measurement of its own (too many cells)."""
    if not model.residuals:
        return None
    need = set(model.rows) - {0}
    if not need <= set(model.residuals) or (0 in model.rows and 0 not in model.subsets):
        return None
    keep = np.array(
        [s == 0 and 0 in model.rows for s in model.subsets] + [t in need for t in model.residuals]
    )
    return _restrict(model, keep)


def _closed_form(model: MarginalsModel, weights: np.ndarray) -> np.ndarray:
    """ResidualPlanner's costs (see :func:`optimise`): each needed residual measured on
    its own (the total, T empty, by the one-cell table)."""
    mass = weights @ model.profiles
    start = np.zeros(len(model.subsets) + len(model.residuals))
    own = {t: len(model.subsets) + j for j, t in enumerate(model.residuals)}
    if 0 in model.subsets:
        own.setdefault(0, model.subsets.index(0))
    fac = model.factors
    for k, t in enumerate(model.rows):
        j = own.get(t)
        if j is not None and model.incidence[k, j] > 0:
            start[j] = np.sqrt(mass[k] * fac[j] / model.incidence[k, j])
    return start


def _smallest_superset(t: int, subsets: tuple[int, ...], sizes: tuple[int, ...]) -> int:
    """Index of the smallest candidate table containing residual t."""
    best = min(
        (j for j, s in enumerate(subsets) if t & s == t), key=lambda j: _cells(subsets[j], sizes)
    )
    return best


def _restrict(model: MarginalsModel, keep: np.ndarray) -> MarginalsModel | None:
    """The model with only the kept candidates, or None if some query would be lost."""
    inc = model.incidence[:, keep]
    if not inc.any(axis=1).all():
        return None
    n = len(model.subsets)
    subsets = tuple(s for s, k in zip(model.subsets, keep[:n], strict=True) if k)
    residuals = tuple(s for s, k in zip(model.residuals, keep[n:], strict=True) if k)
    return MarginalsModel(
        model.domain,
        subsets,
        model.rows,
        inc,
        model.profiles,
        model.profile_of,
        residuals,
        model.factors[keep],
    )


def restricted(
    model: MarginalsModel, tables: tuple[int, ...], residuals: tuple[int, ...] = ()
) -> MarginalsModel:
    """``model`` with exactly ``tables`` and ``residuals`` (some of its candidates) as
    candidates."""
    keep = np.array(
        [s in set(tables) for s in model.subsets] + [t in set(residuals) for t in model.residuals]
    )
    sub = _restrict(model, keep)
    if sub is None:
        raise InvalidParameter("these tables do not answer every query")
    return sub


# --- reconstruction -------------------------------------------------------------------


def reconstruct(
    model: MarginalsModel,
    measured: dict[int, np.ndarray],
    w: dict[int, float],
    residuals: dict[int, np.ndarray] | None = None,
    residual_w: dict[int, float] | None = None,
) -> np.ndarray:
    """The least-squares answers of every query from the noisy tables ``measured``
    (mask -> array shaped by its attributes' atoms) of row precisions ``w``, and the
    noisy residual measurements ``residuals`` (mask -> rows shaped likewise) of row
    precisions ``residual_w``.

    A residual measurement y_T = C_T x_T + z, C_T = (x)_{i in T} (n_i I - J), adds
    w C_T y_T to residual T of the normal equations (C_T is symmetric and maps into
    residual T) and w prod_{i in T} n_i to lambda_T / N."""
    d, sizes = model.domain.d, model.domain.sizes
    res, res_w = residuals or {}, residual_w or {}
    lam = {t: sum(w[s] / _cells(s, sizes) for s in measured if t & s == t) for t in model.rows}
    for t in res:
        lam[t] = lam.get(t, 0.0) + res_w[t] * _cells(t, sizes)
    acc: dict[int, np.ndarray] = {}
    for t in model.rows:
        ax_t = _attrs(t, d)
        total = np.zeros([sizes[i] for i in ax_t])
        for s, y in measured.items():
            if t & s != t:
                continue
            ax_s = _attrs(s, d)
            drop = tuple(k for k, i in enumerate(ax_s) if not t >> i & 1)
            r = y.sum(axis=drop) if drop else y.astype(float)
            r = r / math.prod(sizes[i] for i in ax_s if not t >> i & 1)
            for k in range(len(ax_t)):  # centre along every axis of T
                r = r - r.mean(axis=k, keepdims=True)
            total = total + w[s] * r
        if t in res:
            r = np.asarray(res[t], float)
            for k, i in enumerate(ax_t):
                r = sizes[i] * r - r.sum(axis=k, keepdims=True)
            total = total + res_w[t] * r
        acc[t] = total
    dom = model.domain
    out = np.zeros(len(dom.boxes))
    for t in model.rows:
        ax_t = _attrs(t, d)
        owners, coefs, vecs = [], [], [[] for _ in ax_t]
        for q, boxes in enumerate(dom.boxes):
            for b in boxes:
                if any(b[i] < 0 for i in ax_t):
                    continue
                coef = 1.0
                for i in range(d):
                    if not t >> i & 1 and b[i] >= 0:
                        coef *= float(dom.members[i][b[i]].sum()) / sizes[i]
                owners.append(q)
                coefs.append(coef)
                for k, i in enumerate(ax_t):
                    vecs[k].append(b[i])
        if not owners:
            continue
        nt = float(math.prod(sizes[i] for i in ax_t))
        if ax_t:
            letters = string.ascii_letters
            sub = "".join(letters[1 : len(ax_t) + 1])
            spec = sub + "," + ",".join("a" + c for c in sub) + "->a"
            mats = [dom.members[i][np.asarray(vecs[k])].astype(float) for k, i in enumerate(ax_t)]
            vals = np.einsum(spec, acc[t], *mats, optimize=True)
        else:
            vals = np.full(len(owners), float(acc[t]))
        np.add.at(out, np.asarray(owners), np.asarray(coefs) * vals / (nt * lam[t]))
    return out


def table_cells(domain: AtomDomain, mask: int) -> list[dict[str, tuple]]:
    """The cells of table ``mask`` in row-major order of its atoms: attribute -> intervals."""
    ax = _attrs(mask, domain.d)
    return [
        {domain.names[i]: domain.pieces[i][a] for i, a in zip(ax, combo, strict=True)}
        for combo in itertools.product(*(range(domain.sizes[i]) for i in ax))
    ]


def table_shape(domain: AtomDomain, mask: int) -> tuple[int, ...]:
    return tuple(domain.sizes[i] for i in _attrs(mask, domain.d))


def table_name(domain: AtomDomain, mask: int) -> str:
    names = [domain.names[i] for i in _attrs(mask, domain.d)]
    return f"marginal({', '.join(names)})" if names else "total"
