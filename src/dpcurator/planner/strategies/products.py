"""Kronecker products of per-attribute p-Identity strategies, for range (and box)
workloads on one or several attributes.

The workload's constrained attributes are cut into atoms (:mod:`.domain`); the strategy
measures the whole atom table once with the rows A = A_1 (x) ... (x) A_d, each A_i an
integer p-Identity strategy of attribute i (:mod:`.p_identity`; McKenna, Miklau, Hay &
Machanavajjhala, VLDB 2018, Sec. 5-6, "OPT_(x)"). Its column norms multiply, so every
point costs the same, the whole budget: one charge everywhere. The least-squares
estimate factorises too, (A^T A)^-1 = (x)_i (A_i^T A_i)^-1, so a box b (a product of
per-attribute 0/1 vectors u_bi) and a query made of boxes have variances

    Var(sum_b u_b) = v sum_{b, b'} prod_i u_bi^T S_i u_b'i,   S_i = (A_i^T A_i)^-1,

v the variance of one row's noise: nothing of the table's size squared is built.

Choosing the factors: for one attribute, the p-Identity optimum for the workload's Gram
matrix W^T diag(omega) W. For several, a workload of boxes is not a product, and the
factors are found by alternating (HDMM's approach for unions of products): with the
other factors fixed, the objective is tr(Omega_i S_i) for the Gram matrix
Omega_i = sum_q omega_q sum_{b,b'} (prod_{j != i} u_bj^T S_j u_b'j) u_bi u_b'i^T, which
attribute i's p-Identity optimises; three rounds from the identity, the first choosing
each attribute's p from random starts, the others refining it from where it was.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.strategies import p_identity as pid
from dpcurator.planner.strategies.domain import AtomDomain
from dpcurator.planner.strategies.measurements import (
    Measurement,
    StrategyPlan,
    per_profile,
    priced,
)
from dpcurator.planner.strategies.weights import KroneckerWeights

#: The most atoms of one attribute (dense n x n algebra, O(p n^2) per iteration).
MAX_ATOMS = 256
#: The most cells (and rows) of the measured table.
MAX_CELLS = 50_000
#: Rounds of the alternating optimisation over several attributes.
ROUNDS = 3


@dataclass(frozen=True)
class BoxModel:
    """The workload's distinct queries as boxes over the atoms: per attribute, the
    coverages' 0/1 vectors (``vectors[i]``, one extra all-ones row last, for a box that
    leaves attribute i free), and per distinct query its boxes as rows of indices."""

    domain: AtomDomain
    vectors: tuple[np.ndarray, ...]  # per attribute: (coverages + 1) x n_i
    queries: tuple[np.ndarray, ...]  # per distinct query: boxes x d (indices into vectors)
    profile_of: np.ndarray  # query -> distinct query (-1: empty)

    @classmethod
    def of(cls, dom: AtomDomain) -> BoxModel:
        vectors = tuple(np.vstack([m.astype(float), np.ones((1, m.shape[1]))]) for m in dom.members)
        keys: dict[tuple, int] = {}
        rows: list[np.ndarray] = []
        profile_of = np.full(len(dom.boxes), -1, np.int64)
        for q, boxes in enumerate(dom.boxes):
            if not boxes:
                continue
            idx = tuple(
                tuple(c if c >= 0 else len(vectors[i]) - 1 for i, c in enumerate(b)) for b in boxes
            )
            key = tuple(sorted(idx))
            if key not in keys:
                keys[key] = len(rows)
                rows.append(np.array(key, np.int64).reshape(len(key), dom.d))
            profile_of[q] = keys[key]
        return cls(dom, vectors, tuple(rows), profile_of)

    def pair_terms(self, grams: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per attribute: its coverages' Gram under ``grams[i]`` (u^T S_i u')."""
        return [v @ g @ v.T for v, g in zip(self.vectors, grams, strict=True)]

    @cached_property
    def single(self) -> np.ndarray:
        """The distinct queries of one box each, as a (queries x d) index array (the
        common case, computed without a Python loop), and -1 rows for the others."""
        out = np.full((len(self.queries), self.domain.d), -1, np.int64)
        for k, boxes in enumerate(self.queries):
            if len(boxes) == 1:
                out[k] = boxes[0]
        return out

    def variances(self, grams: Sequence[np.ndarray]) -> np.ndarray:
        """Per distinct query: sum over its pairs of boxes of prod_i u_bi^T S_i u_b'i."""
        return self._pairs(self.pair_terms(grams), np.ones(len(self.queries)), None)[0]

    def attribute_gram(self, i: int, grams: Sequence[np.ndarray], omega: np.ndarray) -> np.ndarray:
        """Omega_i (see the module doc) over attribute i's atoms."""
        weights = self._pairs(self.pair_terms(grams), omega, i)[1]
        v = self.vectors[i]
        return v.T @ weights @ v

    def _pairs(
        self, terms: list[np.ndarray], omega: np.ndarray, skip: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per distinct query, omega_q sum_{b,b'} prod_{j != skip} terms_j[b_j, b'_j];
        and those products gathered on attribute ``skip``'s coverage pairs."""
        one = self.single
        alone = one[:, 0] >= 0
        out = np.zeros(len(self.queries))
        size = len(self.vectors[skip]) if skip is not None else 1
        weights = np.zeros((size, size))
        prod = omega[alone].astype(float)
        for j, t in enumerate(terms):
            if j != skip:
                prod = prod * t[one[alone, j], one[alone, j]]
        out[alone] = prod
        if skip is not None:
            np.add.at(weights, (one[alone, skip], one[alone, skip]), prod)
        for k in np.flatnonzero(~alone):
            boxes = self.queries[k]
            pp = np.full((len(boxes), len(boxes)), float(omega[k]))
            for j, t in enumerate(terms):
                if j != skip:
                    pp *= t[np.ix_(boxes[:, j], boxes[:, j])]
            out[k] = pp.sum()
            if skip is not None:
                np.add.at(weights, (boxes[:, skip][:, None], boxes[:, skip][None, :]), pp)
        return out, weights


def _check(dom: AtomDomain) -> None:
    if dom.d == 0:
        raise InvalidParameter("no query constrains any attribute")
    big = [n for n, s in zip(dom.names, dom.sizes, strict=True) if s > MAX_ATOMS]
    if big:
        raise InvalidParameter(
            f"the workload cuts {big[0]!r} into more than {MAX_ATOMS} atoms, too many for a "
            "p-Identity strategy"
        )
    if math.prod(dom.sizes) > MAX_CELLS:
        raise InvalidParameter(
            f"the table of {' x '.join(dom.names)} has {math.prod(dom.sizes):,} cells, more "
            f"than {MAX_CELLS:,}"
        )


def optimise(
    model: BoxModel, omega: np.ndarray, currency: str, scale: int = pid.SCALE
) -> list[pid.PIdentity]:
    """Per attribute, its integer p-Identity factor (alternating over attributes)."""
    d = model.domain.d
    grams = [np.eye(n) for n in model.domain.sizes]
    found: list[pid.PIdentity | None] = [None] * d
    for round_ in range(1 if d == 1 else ROUNDS):
        for i in range(d):
            om_i = model.attribute_gram(i, grams, omega)
            before = found[i]
            if round_ == 0 or before is None or before.p == 0:
                f = pid.best(om_i, currency, scale=scale)
            else:  # later rounds: the same p, refined from where it was
                f = pid.best(om_i, currency, (before.p,), scale, before.theta)
            found[i] = f
            a = f.rows.astype(float) / scale
            grams[i] = np.linalg.inv(a.T @ a)
    return [f for f in found if f is not None]


def factor_scale(budget: PlanBudget, d: int) -> int:
    """Each factor's integer scale: :data:`p_identity.SCALE`, but small enough that the
    column norm, the product of the factors' (scale^d, or scale^2d in squares), stays
    within 2^40 (its unit cost is the budget over it); and under GDP, whose discrete
    Gaussian is certified up to sigma = MAX_SIGMA only, one row's sigma, about
    scale^d / mu, below MAX_SIGMA / 2."""
    order = 1 if budget.currency == "epsilon" else 2
    k = min(pid.SCALE, math.floor(2 ** (40 / (order * d)) + 1e-9))
    if budget.currency == "mu":
        from dpcurator.privacy.discrete_gaussian import MAX_SIGMA

        k = min(k, math.floor((MAX_SIGMA * math.sqrt(budget.amount) / 2) ** (1.0 / d)))
    if k < 2:
        raise InvalidParameter(
            f"a GDP budget of mu = {math.sqrt(budget.amount):.3g} is too small for p-Identity rows"
        )
    return k


def plan_products(dom: AtomDomain, omega: np.ndarray | None, budget: PlanBudget) -> StrategyPlan:
    """The Kronecker product of per-attribute p-Identity strategies on the workload's
    atom domain ``dom``, optimised for ``omega`` (None: equal weights; the figures then
    report the largest variance)."""
    _check(dom)
    model = BoxModel.of(dom)
    om = per_profile(omega, model.profile_of, len(model.queries))
    weights = np.ones(len(model.queries)) if om is None else om
    factors = optimise(model, weights, budget.currency, factor_scale(budget, dom.d))
    rows = math.prod(len(f.rows) for f in factors)
    if rows > MAX_CELLS:
        raise InvalidParameter(f"the strategy has {rows:,} rows, more than {MAX_CELLS:,}")
    kw = KroneckerWeights(tuple(f.rows for f in factors))
    column = kw.column_factor(budget.currency)
    unit_factor = int(column[0])
    if not (column == unit_factor).all():  # by construction (p_identity.integer_rows)
        raise InvalidParameter("internal error: a p-Identity's columns differ in norm")
    values, noises = priced(
        budget, np.array([budget.amount / unit_factor]), np.array([[unit_factor]])
    )
    noise = noises[0]
    v = noise.variance()
    grams = [np.linalg.inv(f.rows.T.astype(float) @ f.rows) for f in factors]
    by_query = v * model.variances(grams)
    var = np.where(model.profile_of >= 0, by_query[np.maximum(model.profile_of, 0)], 0.0)
    maps = [g @ f.rows.T.astype(float) for g, f in zip(grams, factors, strict=True)]

    def rebuild(arrays: Sequence[np.ndarray]) -> np.ndarray:
        (y,) = arrays
        x = np.asarray(y, float).reshape([len(f.rows) for f in factors])
        for axis, m in enumerate(maps):
            x = np.moveaxis(np.tensordot(m, x, axes=([1], [axis])), 0, axis)
        return _answers(dom, x)

    cells = tuple(
        {dom.names[i]: dom.pieces[i][a] for i, a in enumerate(combo)}
        for combo in itertools.product(*(range(n) for n in dom.sizes))
    )
    names = " x ".join(f"{n} ({s} atoms)" for n, s in zip(dom.names, dom.sizes, strict=True))
    ps = ", ".join(str(f.p) for f in factors)
    label = f"p-Identity({', '.join(dom.names)}): {kw.rows:,} weighted rows"
    m = Measurement(label, cells, values[0], noise, {}, kw)
    kind = "p-Identity" if dom.d == 1 else "Kronecker product of p-Identities"
    detail = f"{kind} over {names}, p = {ps}"
    return StrategyPlan("p-identity", detail, (m,), var, rebuild)


def _answers(dom: AtomDomain, x: np.ndarray) -> np.ndarray:
    """Every workload query's value on the estimated atom table ``x``: the sum over its
    boxes of x contracted with the boxes' per-attribute vectors."""
    owners, per_axis = [], [[] for _ in range(dom.d)]
    for q, boxes in enumerate(dom.boxes):
        for b in boxes:
            owners.append(q)
            for i, c in enumerate(b):
                per_axis[i].append(dom.vector(i, c))
    out = np.zeros(len(dom.boxes))
    if not owners:
        return out
    letters = string.ascii_letters[1 : dom.d + 1]
    spec = letters + "," + ",".join("a" + c for c in letters) + "->a"
    vals = np.einsum(spec, x, *(np.array(v) for v in per_axis), optimize=True)
    np.add.at(out, np.asarray(owners), vals)
    return out


__all__ = ["MAX_ATOMS", "MAX_CELLS", "BoxModel", "optimise", "plan_products"]
