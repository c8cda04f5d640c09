"""Branch and bound over attributes with a Lagrangian bound, for cores without structure.

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
never correctness.

Depth-first search fixes one attribute at a time (most query weight first). The
children of a node are bounded together, vectorised over the atoms: fixing x_b = a
removes the queries that miss a, settles those with nothing else undecided, and moves
lam_{q,b} of the survivors onto their other undecided attributes (keeping sum = w_q),
so the parent's multipliers stay feasible and are re-optimised for a few steps only
near the root. With one attribute left the bound is the exact value. Identical queries
(same attributes and atoms) are merged first, their weights added.

A starting point comes from coordinate ascent (each attribute in turn takes its best
atom given the others) from the best unary atoms and a few random restarts: on
random-subset workloads it usually is the optimum, and the search only has to prove it.
Under a time limit the search first tries to prove the best point optimal; if that does
not finish, it certifies thresholds T ("nothing exceeds T") by bisection between the best
point and the smallest bound proved so far, each run pruning every node whose bound is
at most T.

Pruning with floating-point bounds: bounds are sums of at most a few thousand terms,
padded by a relative 1e-9 before comparing; with integral weights (the optimum is an
integer) a node is pruned when floor(bound + pad) <= T, otherwise when bound + pad <=
T + eps (the solver's tolerance for equal weights), and a certified T is reported as
T + eps. Every reported bound is thus >= the true maximum.

When it applies: a core (what elimination leaves) of at most a few million atom-query
incidences, with at most a tenth of its weight in families of pairwise-disjoint queries
and a root Lagrangian bound below the families' bound (random subsets; not grids of
marginals or histogram bins, which the bound above ignores and the 0/1 program's family
rows capture: its LP bound for marginal tables is the number of tables). Exact, or an upper bound at the
deadline. Cost: exponential in the worst case; about 0.1-0.3 ms per node.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from dpcurator.queries.overlap.component import Component, Solution
from dpcurator.queries.overlap.eliminate import Core, back_substitute

#: Largest atom-query incidence table (pairs x atoms) and attribute score table
#: (attributes x atoms) the search takes on; larger cores go to the 0/1 program.
_MAX_CELLS, _MAX_SCORES = 4_000_000, 200_000
#: Subgradient steps at the root, and at the nodes of depth < _OPT_DEPTH.
_ROOT_STEPS, _NODE_STEPS, _OPT_DEPTH = 300, 10, 3
#: Random restarts of coordinate ascent (stopping after _STALE in a row find nothing
#: better), and the share of the time limit (and cap, in seconds) they may take; the
#: same for the root multipliers.
_RESTARTS, _STALE, _ASCENT_SHARE, _ROOT_SHARE = 30, 8, (0.05, 1.0), (0.1, 5.0)
#: Subgradient steps after which the root gives up if its bound is not below the
#: disjoint-family bound.
_ROOT_TRIAL = 30
#: Largest share of the core's query weight in disjoint families (two or more queries)
#: for this search: the families' rows make the 0/1 program stronger than this bound.
_FAMILY_SHARE = 0.1
#: Share of the remaining time for the first attempt at an exact answer.
_EXACT_SHARE = 0.3


def solve_lagrangian(comp: Component, core: Core, deadline: float) -> Solution | None:
    """The component's optimum by Lagrangian branch and bound on ``core``: exact, or an
    upper bound at ``deadline``; None when the core is too large, has more than a tenth
    of its weight in disjoint families, or its root Lagrangian bound is not below the
    families' bound (the 0/1 program is then the better tool)."""
    if _family_share(comp, core) > _FAMILY_SHARE:
        return None
    integral = bool(np.all(comp.w == np.round(comp.w)))
    search = LagrangianSearch.from_core(comp, core, integral)
    if search is None:
        return None
    start = time.monotonic()
    family = comp.bound(np.ones(len(comp.w), bool))
    x = search.coordinate_ascent(
        np.argmax(search.u, axis=1), _share(start, deadline, _ASCENT_SHARE)
    )
    best = search.value(x)
    lam, root = search.root(best, family - core.const, _share(start, deadline, _ROOT_SHARE))
    if core.const + root >= family:
        return None
    if not search.prunes(root, best):  # a better point saves nodes
        best, x = search.restarts(best, x, _share(start, deadline, _ASCENT_SHARE))
    upper, best, x, exact = search.run(lam, root, best, x, deadline)
    assign = back_substitute(comp, core, search.atoms(x))
    got = float(comp.w[comp.covered(assign)].sum())
    total = core.const + best
    if exact and got >= total - max(comp.eps, 1e-7 * max(1.0, abs(total))):
        return Solution(got, got, assign, True)
    upper = core.const + upper
    upper = math.floor(upper + 1e-6) if integral else upper
    return Solution(got, max(min(upper, family), got), assign, False)


def _family_share(comp: Component, core: Core) -> float:
    """The share of the core queries' weight in families of two or more queries."""
    qs = np.flatnonzero(core.queries)
    total = float(comp.w[qs].sum())
    if not total:
        return 0.0
    gid = comp.families.gid[qs]
    _, inv, counts = np.unique(gid, return_inverse=True, return_counts=True)
    return float(comp.w[qs][counts[inv.ravel()] > 1].sum()) / total


def _share(start: float, deadline: float, share: tuple[float, float]) -> float:
    """When a preliminary step must stop: a share of the time limit, at most some seconds."""
    part, cap = share
    if math.isfinite(deadline):
        return start + min(part * max(deadline - start, 0.0), cap)
    return start + cap


@dataclass
class _Node:
    """A node of the search: alive queries, undecided attributes, multipliers per
    (query, attribute) pair, settled weight, attribute scores and the atoms fixed."""

    depth: int
    alive: np.ndarray
    und: np.ndarray
    lam: np.ndarray
    sat: float
    scores: np.ndarray | None
    x: np.ndarray


@dataclass
class _Children:
    """What the children of a node share: the branching attribute, the queries on it,
    their other open pairs and the multipliers moved onto them, the atoms killing each
    query, the settled weights and the changed score rows."""

    node: _Node
    b: int
    rel: np.ndarray
    others: np.ndarray
    r_of: np.ndarray
    moved: np.ndarray
    kills: np.ndarray
    sat: np.ndarray
    touched: np.ndarray
    rows: np.ndarray  # (atoms of b, len(touched), atoms)
    pq: np.ndarray
    rel_q: np.ndarray

    def child(self, v: int) -> _Node:
        parent = self.node
        alive = parent.alive.copy()
        alive[self.rel_q[self.kills[v]]] = False
        lam = parent.lam.copy()
        keep = ~self.kills[v][self.r_of]
        lam[self.others[keep]] += self.moved[keep]
        lam[self.rel] = 0.0
        lam[~alive[self.pq]] = 0.0
        und = parent.und.copy()
        und[self.b] = False
        assert parent.scores is not None
        scores = parent.scores.copy()
        scores[self.touched] = self.rows[v]
        x = parent.x.copy()
        x[self.b] = v
        return _Node(parent.depth + 1, alive, und, lam, float(self.sat[v]), scores, x)


class LagrangianSearch:
    """The search over one core: pairs (query, attribute) with their atoms' membership."""

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
    def from_core(cls, comp: Component, core: Core, integral: bool) -> LagrangianSearch | None:
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

    # ------------------------------------------------------------------ points

    def value(self, x: np.ndarray) -> float:
        """The objective at the point ``x`` (an atom per attribute)."""
        ok = self.member[np.arange(len(self.pq)), x[self.pa]]
        bad = np.bincount(self.pq[~ok], minlength=self.nq)
        return float(self.u[np.arange(self.na), x].sum() + self.w[bad == 0].sum())

    def coordinate_ascent(self, x: np.ndarray, stop: float = math.inf) -> np.ndarray:
        """Each attribute in turn takes its best atom given the others, until none moves
        (or ``stop``: every point is a valid start)."""
        x = x.copy()
        pairs = np.arange(len(self.pq))
        by_attr = [np.flatnonzero(self.pa == j) for j in range(self.na)]
        moved = True
        while moved and time.monotonic() < stop:
            moved = False
            for j in range(self.na):
                ok = self.member[pairs, x[self.pa]]
                bad = np.bincount(self.pq[~ok], minlength=self.nq)
                ps = by_attr[j]
                free = bad[self.pq[ps]] - (~ok[ps]) == 0  # satisfied elsewhere
                score = self.u[j] + (self.w[self.pq[ps]] * free) @ self.mf[ps]
                v = int(np.argmax(score))
                if score[v] > score[x[j]] + self.pad:
                    x[j] = v
                    moved = True
        return x

    def restarts(self, best: float, x: np.ndarray, stop: float) -> tuple[float, np.ndarray]:
        """The best of ``x`` and coordinate ascent from a few random points (always the
        same ones, so that a run is reproducible), until ``stop``."""
        rng = np.random.default_rng(0)
        stale = 0
        for _ in range(_RESTARTS):
            if time.monotonic() > stop or stale >= _STALE:
                break
            y = rng.random(self.na) * self.sizes
            y = self.coordinate_ascent(y.astype(np.int64), stop)
            v = self.value(y)
            stale = stale + 1 if v <= best + self.pad else 0
            if v > best:
                best, x = v, y
        return best, x

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

    def _children(self, node: _Node, b: int, open_: np.ndarray) -> tuple[np.ndarray, _Children]:
        """The bounds of the children x_b = a of ``node``, vectorised over the atoms a."""
        nq, nv = self.nq, self.nv
        pq, pa, w = self.pq, self.pa, self.w
        assert node.scores is not None
        rel = np.flatnonzero(open_ & (pa == b))  # the open pair on b of each query
        rel_q = pq[rel]
        slot = np.full(nq, -1, np.int64)
        slot[rel_q] = np.arange(len(rel))
        others = np.flatnonzero(open_ & (pa != b) & (slot[pq] >= 0))
        r_of = slot[pq[others]]
        lo = node.lam[others]
        tot = np.bincount(r_of, weights=lo, minlength=len(rel))[r_of]
        cnt = np.bincount(r_of, minlength=len(rel))
        share = np.where(tot > 0, lo / np.where(tot > 0, tot, 1.0), 1.0 / np.maximum(cnt[r_of], 1))
        moved = node.lam[rel][r_of] * share  # lam_{q,b} spread over q's other open pairs
        kills = ~self.member[rel].T  # (atoms, len(rel)): atom a misses the query
        live = 1.0 - kills
        settled = w[rel_q] * (cnt == 0)
        sat = node.sat + self.u[b] + live @ settled
        touched, t_of = np.unique(pa[others], return_inverse=True)
        nt = len(touched)
        rows = np.broadcast_to(node.scores[touched], (nv, nt, nv)).copy()
        if len(others):
            # a surviving query moves lam_{q,b} in, a killed one takes all its lam out
            cols = t_of[:, None] * nv + np.arange(nv)[None, :]
            gain = (moved[:, None] * self.mf[others]).ravel()
            delta = np.zeros((len(others), nt * nv))
            np.put_along_axis(delta, cols, (-lo - moved)[:, None] * self.mf[others], axis=1)
            base = np.bincount(cols.ravel(), gain, nt * nv)
            rows += (base[None, :] + kills[:, r_of].astype(np.float64) @ delta).reshape(nv, nt, nv)
        und = node.und.copy()
        und[b] = False
        best_rest = node.scores.max(axis=1)
        still = und.copy()
        still[touched] = False
        bounds = sat + float(best_rest[still].sum())
        in_und = und[touched]
        if in_und.any():
            bounds = bounds + rows[:, in_und, :].max(axis=2).sum(axis=1)
        bounds[self.sizes[b] :] = -math.inf
        kids = _Children(node, b, rel, others, r_of, moved, kills, sat, touched, rows, pq, rel_q)
        return bounds, kids

    # ------------------------------------------------------------------ search

    def search(
        self, lam: np.ndarray, target: float, best: float, x: np.ndarray, deadline: float
    ) -> tuple[float, np.ndarray, bool, float]:
        """Depth-first search proving that no point exceeds max(target, best), or
        finding one that does. Returns (best, its point, finished, largest bound of the
        nodes left open)."""
        na, pq, pa = self.na, self.pq, self.pa
        threshold = max(target, best)
        root = _Node(0, np.ones(self.nq, bool), np.ones(na, bool), lam, 0.0, None, x * 0)
        stack: list[tuple[float, _Children | _Node, int]] = [(math.inf, root, -1)]
        while stack:
            bound, parent, v = stack.pop()
            if self.prunes(bound, threshold):
                continue
            self.nodes += 1
            if self.nodes % 16 == 0 and time.monotonic() > deadline:
                return best, x, False, max(bound, max((s[0] for s in stack), default=bound))
            node = parent.child(v) if isinstance(parent, _Children) else parent
            open_ = node.alive[pq] & node.und[pa]
            if node.depth < _OPT_DEPTH:
                node.lam, got = self._optimise(
                    node.lam, open_, node.und, node.sat, threshold, _NODE_STEPS
                )
                node.scores = None
                if self.prunes(got, threshold):
                    continue
            if node.scores is None:
                node.scores = self.scores(node.lam)
            cand = np.flatnonzero(node.und)
            b = int(cand[np.argmin(self.rank[cand])])
            bounds, kids = self._children(node, b, open_)
            if len(cand) == 1:  # the bounds are the children's values
                a = int(np.argmax(bounds))
                if not self.prunes(bounds[a], threshold):
                    y = node.x.copy()
                    y[b] = a
                    val = self.value(y)
                    if val > best:
                        best, x = val, y
                        threshold = max(threshold, best)
                continue
            for a in np.argsort(bounds, kind="stable").tolist():  # best child on top
                if not self.prunes(bounds[a], threshold):
                    stack.append((float(bounds[a]), kids, a))
        return best, x, True, -math.inf

    def run(
        self, lam: np.ndarray, root: float, best: float, x: np.ndarray, deadline: float
    ) -> tuple[float, float, np.ndarray, bool]:
        """Prove the best point optimal, or the smallest threshold the time allows.
        Returns (upper bound, best value, its point, exact)."""
        upper = self.certified(math.floor(root + self.pad)) if self.integral else root + self.pad
        if self.prunes(root, best):
            return upper, best, x, True
        now = time.monotonic()
        first = now + _EXACT_SHARE * (deadline - now) if math.isfinite(deadline) else deadline
        best, x, done, left = self.search(lam, best, best, x, first)
        if done:
            return self.certified(best), best, x, True
        # every node left open is bounded by ``left``; the others were pruned at best
        if math.isfinite(left):
            left = math.floor(left + self.pad) if self.integral else left + self.pad
            upper = min(upper, max(left, self.certified(best)))
        lo = best
        while time.monotonic() < deadline:
            target: float
            if self.integral:
                if upper - lo < 1:
                    break
                target = math.floor((lo + upper) / 2)
            else:
                if upper - lo <= 2 * self.eps + self.pad:
                    break
                target = (lo + upper) / 2
            now = time.monotonic()
            stop = now + (deadline - now) / 2 if upper - lo > 2 else deadline
            best, x, done, left = self.search(lam, target, best, x, stop)
            if done:
                upper = min(upper, self.certified(max(target, best)))
                if best >= upper - (0 if self.integral else self.eps):
                    return best, best, x, True
            else:
                lo = max(lo, target)
            lo = max(lo, best)
        return max(upper, best), best, x, False


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
