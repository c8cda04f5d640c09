"""The Lagrangian relaxation of a core's maximum weighted overlap: its bound and multipliers.

The core's objective is sum_j U_j(x_j) + sum_q w_q [x_j in C_{q,j} for every j in A_q]
(unary potentials U_j over atoms, multi-attribute queries q). Split each query's weight
among its attributes, lam_{q,j} >= 0 with sum_j lam_{q,j} = w_q: a point covered by q
gets w_q = sum_j lam_{q,j} [x_j in C_{q,j}], a point outside gets 0 <= that sum, so

    gamma_w <= L(lam) = sum_j max_a (U_j(a) + sum_q lam_{q,j} [a in C_{q,j}])

for *every* such lam (Lagrangian relaxation of the copies of x_j, Held & Karp 1971;
Fisher, "The Lagrangian relaxation method for solving integer programming problems",
Management Science 1981). min over lam of L is the LP bound of the 0/1 program without
family rows (153 for 136 on 300 random-subset queries over 12 attributes); projected
subgradient steps (Polyak 1969, towards the best point) get within a few percent of it.
The bound is valid whatever lam the steps reach, so inexact optimisation costs time,
never correctness. Identical queries (same attributes and atoms) are merged first, their
weights added.

Pruning with floating-point bounds: bounds are sums of at most a few thousand terms,
padded by a relative 1e-9 before comparing; with integral weights (the optimum is an
integer) a node is pruned when floor(bound + pad) <= T, otherwise when bound + pad <=
T + eps (the solver's tolerance for equal weights), and a certified T is reported as
T + eps. Every reported bound is thus >= the true maximum.

The search over these bounds is :mod:`dpcurator.queries.overlap.lagrangian_search`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Self

import numpy as np
from scipy import sparse

from dpcurator.queries.overlap.component import Component
from dpcurator.queries.overlap.eliminate import Core

#: Largest atom-query incidence table (pairs x atoms) and attribute score table
#: (attributes x atoms) the search takes on; larger cores go to the 0/1 program.
_MAX_CELLS, _MAX_SCORES = 4_000_000, 200_000
#: Subgradient steps at the root.
_ROOT_STEPS = 300
#: Subgradient steps after which the root gives up if its bound is not below the
#: disjoint-family bound.
_ROOT_TRIAL = 30


class LagrangianBound:
    """One core's pairs (query, attribute) with their atoms' membership, and the
    Lagrangian bound over them."""

    def __init__(
        self,
        unary: Sequence[np.ndarray],
        pq: np.ndarray,
        pa: np.ndarray,
        cover: Sequence[np.ndarray],
        w: np.ndarray,
        integral: bool,
        eps: float,
    ) -> None:
        """``unary[j]``: potentials over the atoms of attribute j; pair p is (query
        ``pq[p]``, attribute ``pa[p]``) with ``cover[p]`` (bool over the atoms of
        ``pa[p]``); ``w``: the queries' weights. Identical queries are merged."""
        na = len(unary)
        self.na = na
        self.sizes = np.array([len(u) for u in unary], np.int64)
        self.nv = nv = int(self.sizes.max())
        self.u = np.full((na, nv), -np.inf)
        for j, uu in enumerate(unary):
            self.u[j, : len(uu)] = uu
        pq, pa = np.asarray(pq, np.int64), np.asarray(pa, np.int64)
        order = np.lexsort((pa, pq))
        pq, pa = pq[order], pa[order]
        member = np.zeros((len(pq), nv), bool)
        for i, p in enumerate(order.tolist()):
            member[i, : len(cover[p])] = cover[p]
        pq, pa, member, w = _merge(pq, pa, member, np.asarray(w, np.float64))
        self.pq, self.pa, self.member, self.w = pq, pa, member, w
        self.mf = member.astype(np.float64)
        self.nq = nq = len(w)
        npairs = len(pq)
        self.ends = sparse.csr_matrix(
            (np.ones(npairs), (pa, np.arange(npairs))), shape=(na, npairs)
        )
        counts = np.bincount(pq, minlength=nq)
        kmax = int(counts.max()) if npairs else 1
        rank = np.arange(npairs) - np.r_[0, np.cumsum(counts)[:-1]][pq]
        self.qpairs = np.full((nq, kmax), -1, np.int64)
        self.qpairs[pq, rank] = np.arange(npairs)
        self.integral = integral
        self.eps = eps
        #: the component's attribute position of each attribute here
        self.core_attrs: list[int] = list(range(na))
        finite = np.where(np.isfinite(self.u), np.abs(self.u), 0.0)
        self.pad = 1e-9 * max(1.0, float(w.sum()) + float(finite.max(axis=1).sum()))
        load = np.bincount(pa, weights=w[pq], minlength=na)
        self.rank = np.empty(na, np.int64)
        self.rank[np.argsort(-load, kind="stable")] = np.arange(na)
        self.nodes = 0

    @classmethod
    def from_core(cls, comp: Component, core: Core, integral: bool) -> Self | None:
        """The search on the core's attributes and multi-attribute queries, or None when
        it is too large (or has no multi-attribute query)."""
        attrs = [int(a) for a in core.attrs]
        qlist = np.flatnonzero(core.queries)
        if not attrs or not len(qlist):
            return None
        local = np.full(len(comp.w), -1, np.int64)
        local[qlist] = np.arange(len(qlist))
        pq: list[np.ndarray] = []
        pa: list[np.ndarray] = []
        cover: list[np.ndarray] = []
        nv = max(len(comp.attrs[ai].cover) for ai in attrs)
        for d, ai in enumerate(attrs):
            at = comp.attrs[ai]
            ks = np.flatnonzero(local[at.qidx] >= 0)
            pq.append(local[at.qidx[ks]])
            pa.append(np.full(len(ks), d, np.int64))
            cover.extend(at.cover[:, k] for k in ks.tolist())
        n_pairs = sum(len(p) for p in pq)
        if n_pairs * nv > _MAX_CELLS or len(attrs) * nv > _MAX_SCORES:
            return None
        search = cls(
            [core.unary[ai] for ai in attrs],
            np.concatenate(pq),
            np.concatenate(pa),
            cover,
            comp.w[qlist],
            integral,
            comp.eps,
        )
        search.core_attrs = attrs
        return search

    def atoms(self, x: np.ndarray) -> dict[int, int]:
        """The point as atoms of the component's attributes."""
        return {ai: int(x[d]) for d, ai in enumerate(self.core_attrs)}

    # ------------------------------------------------------------------ bounds

    def scores(self, lam: np.ndarray) -> np.ndarray:
        """U_j(a) + sum_q lam_{q,j} [a in C_{q,j}], per attribute and atom."""
        return self.u + self.ends @ (lam[:, None] * self.mf)

    def prunes(self, bound: float, target: float) -> bool:
        """Nothing under a node with this bound can exceed ``target``."""
        if not math.isfinite(bound):
            return bound < 0
        if self.integral:
            return math.floor(bound + self.pad) <= target
        return bound + self.pad <= target + self.eps

    def certified(self, target: float) -> float:
        """What a completed search at ``target`` proves about the maximum."""
        return target if self.integral else target + self.eps

    def root(self, best: float, give_up: float, stop: float) -> tuple[np.ndarray, float]:
        """Multipliers and bound at the root, from an even split of each weight; stops
        early at ``stop``, or when the bound is still >= ``give_up`` after a few steps."""
        n = np.bincount(self.pq, minlength=self.nq)
        lam = self.w[self.pq] / n[self.pq]
        und = np.ones(self.na, bool)
        open_ = np.ones(len(self.pq), bool)
        lam, bound = self._optimise(lam, open_, und, 0.0, best, _ROOT_TRIAL, stop)
        if bound >= give_up:
            return lam, bound
        return self._optimise(lam, open_, und, 0.0, best, _ROOT_STEPS - _ROOT_TRIAL, stop)

    def _project(self, y: np.ndarray, open_: np.ndarray) -> np.ndarray:
        """Per query, the Euclidean projection of its open pairs' multipliers onto
        {lam >= 0, sum = w_q} (sort-based, Held, Wolfe & Crowder 1974)."""
        qp = self.qpairs
        valid = qp >= 0
        idx = np.where(valid, qp, 0)
        m = valid & open_[idx]
        z = np.where(m, y[idx], -np.inf)
        s = -np.sort(-z, axis=1)
        fin = np.isfinite(s)
        cs = np.cumsum(np.where(fin, s, 0.0), axis=1)
        k = np.arange(1, z.shape[1] + 1)
        cond = fin & (s - (cs - self.w[:, None]) / k > 0)
        r = np.maximum(cond.sum(axis=1), 1)
        theta = (cs[np.arange(self.nq), r - 1] - self.w) / r
        out = np.zeros_like(y)
        out[qp[m]] = np.maximum(z - theta[:, None], 0.0)[m]
        return out

    def _optimise(
        self,
        lam: np.ndarray,
        open_: np.ndarray,
        und: np.ndarray,
        sat: float,
        target: float,
        steps: int,
        stop: float = math.inf,
    ) -> tuple[np.ndarray, float]:
        """Projected subgradient steps on L (Polyak step sizes towards ``target``), until
        ``stop``; returns the best multipliers met and their bound."""
        best_bound, best_lam = math.inf, lam
        pq, pa, mf = self.pq, self.pa, self.mf
        n_open = np.maximum(np.bincount(pq, weights=open_, minlength=self.nq), 1)
        for step in range(steps):
            if step % 10 == 9 and time.monotonic() > stop:
                break
            s = self.scores(lam)
            bound = sat + float(s[und].max(axis=1).sum()) if und.any() else sat
            if bound < best_bound:
                best_bound, best_lam = bound, lam
            if self.prunes(bound, target):
                break
            g = np.where(open_, mf[np.arange(len(pq)), s.argmax(axis=1)[pa]], 0.0)
            mean = np.bincount(pq, weights=g, minlength=self.nq) / n_open
            gp = np.where(open_, g - mean[pq], 0.0)
            norm = float((gp * gp).sum())
            if norm == 0.0:
                break
            lam = self._project(lam - (max(bound - target, 0.5) / norm) * g, open_)
        return best_lam, best_bound


def _merge(
    pq: np.ndarray, pa: np.ndarray, member: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge queries with the same attributes and atoms (pairs sorted by query): one
    query with the summed weight (the same points, the same total)."""
    nq = len(w)
    if not len(pq):
        return pq, pa, member, w
    packed = np.packbits(member, axis=1)
    keys: dict[bytes, int] = {}
    starts = np.r_[0, np.cumsum(np.bincount(pq, minlength=nq))]
    group = np.empty(nq, np.int64)
    for q in range(nq):
        s, e = starts[q], starts[q + 1]
        key = pa[s:e].tobytes() + packed[s:e].tobytes()
        group[q] = keys.setdefault(key, len(keys))
    if len(keys) == nq:
        return pq, pa, member, w
    first = np.full(len(keys), -1, np.int64)
    for q in range(nq - 1, -1, -1):
        first[group[q]] = q
    merged_w = np.bincount(group, weights=w, minlength=len(keys))
    keep_q = np.zeros(nq, bool)
    keep_q[first] = True
    keep = keep_q[pq]
    return group[pq[keep]], pa[keep], member[keep], merged_w
