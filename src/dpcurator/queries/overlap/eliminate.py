"""Variable elimination of pendant attributes, and enumeration of a small core.

An attribute that the remaining queries link to at most one other attribute k is folded
into a unary potential on k's atoms: f(b) = max_a [U_j(a) + sum of the (j, k) queries
covering (a, b)] (max-sum variable elimination on the attribute graph; Dechter, "Bucket
elimination", 1999; single-attribute queries are unary potentials from the start).
Repeated until nothing folds, this solves any forest of attributes exactly; what is left,
the *core*, keeps its unary potentials and multi-attribute queries. A small core is
solved by evaluating every combination of its atoms (never the domain); the eliminated
attributes are then set by back-substitution.

When it applies: any component; it decides alone when the core is empty (a forest) or
small (atom combinations x queries at most a few million). Exact. Cost: one table of
atoms(j) x atoms(k) per folded attribute, plus the enumeration of the core.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dpcurator.queries.overlap.component import Component, Solution

#: Cores whose atom combinations times queries stay below this are enumerated.
_BRUTE_WORK = 4_000_000
#: Largest folding table (atoms of the attribute x atoms of its neighbour).
_FOLD_CELLS = 4_000_000


@dataclass
class Core:
    """What variable elimination leaves: the core attributes (positions), the unary
    potentials over atoms (per attribute), the multi-attribute queries still in play,
    the elimination steps (attribute, neighbour or -1, argmax table or atom) and the
    constant collected from attributes that ended up isolated."""

    attrs: np.ndarray
    unary: list[np.ndarray]
    queries: np.ndarray
    steps: list[tuple[int, int, np.ndarray | int]]
    const: float


def solve_eliminated(comp: Component, core: Core) -> Solution | None:
    """The exact optimum when the core is empty or small enough to enumerate, else None."""
    small = enumerate_core(comp, core) if len(core.attrs) else (0.0, {})
    if small is None:
        return None
    value = core.const + small[0]
    return Solution(value, value, back_substitute(comp, core, small[1]), True)


def reduce_to_core(comp: Component, fold: bool = True) -> Core:
    """Fold away every attribute that the remaining queries link to at most one other
    attribute (a unary potential on that one's atoms); exact. Without ``fold``, the core
    is the whole component: unary potentials from the single-attribute queries, every
    multi-attribute query."""
    attrs = comp.attrs
    nq = len(comp.w)
    multi = np.bincount(comp.pair_q, minlength=nq) >= 2
    unary = []
    qs_of: list[set[int]] = []
    for at in attrs:
        m = ~multi[at.qidx]
        wq = np.where(m, comp.w[at.qidx], 0.0)
        unary.append(np.where(at.cover, wq[None, :], 0.0).sum(axis=1))
        qs_of.append(set(at.qidx[~m].tolist()) if fold else set())
    if fold and not any(len({a for q in qs for a in comp.qkeys[q]}) <= 2 for qs in qs_of):
        fold = False  # nothing to eliminate (for instance all 3-way marginals)
    core = Core(np.arange(len(attrs)), unary, multi.copy(), [], 0.0)
    if fold:
        _fold(comp, core, qs_of)
    return core


def _fold(comp: Component, core: Core, qs_of: list[set[int]]) -> None:
    """Eliminate pendant attributes from ``core`` in place (``qs_of[ai]``: the
    multi-attribute queries still linking attribute ``ai``)."""
    attrs, unary, keys = comp.attrs, core.unary, comp.qkeys
    done = np.zeros(len(attrs), bool)

    def nbrs(ai: int) -> set[int]:
        out: set[int] = set()
        for q in qs_of[ai]:
            out.update(keys[q])
            if len(out) > 2:
                break
        out.discard(ai)
        return out

    queue = list(range(len(attrs)))
    while queue:
        ai = queue.pop()
        if done[ai]:
            continue
        nb = nbrs(ai)
        if len(nb) > 1:
            continue
        if not nb:
            best = int(np.argmax(unary[ai]))
            core.const += float(unary[ai][best])
            core.steps.append((ai, -1, best))
            done[ai] = True
            continue
        (k,) = nb
        nj, nk = len(unary[ai]), len(unary[k])
        if nj * nk > _FOLD_CELLS:
            continue
        qlist = sorted(qs_of[ai])
        cj = attrs[ai].cover[:, np.searchsorted(attrs[ai].qidx, qlist)]
        ck = attrs[k].cover[:, np.searchsorted(attrs[k].qidx, qlist)]
        table = unary[ai][:, None] + (cj * comp.w[qlist][None, :]) @ ck.T.astype(np.float64)
        arg = np.argmax(table, axis=0)
        unary[k] = unary[k] + table[arg, np.arange(nk)]
        qs_of[k].difference_update(qlist)
        qs_of[ai].clear()
        core.steps.append((ai, k, arg))
        done[ai] = True
        queue.append(k)
    for ai in np.flatnonzero(done).tolist():
        core.queries[attrs[ai].qidx] = False
    core.attrs = np.flatnonzero(~done)


def enumerate_core(comp: Component, core: Core) -> tuple[float, dict[int, int]] | None:
    """Exact optimum of a small core by evaluating every combination of its atoms
    (vectorised; the core's atoms, never the domain), or None if it is too large.
    Returns (value, atom per core attribute)."""
    attrs = [int(a) for a in core.attrs]
    sizes = [len(comp.attrs[a].cover) for a in attrs]
    qlist = np.flatnonzero(core.queries)
    cells = math.prod(sizes)
    if cells * (len(qlist) + len(attrs)) > _BRUTE_WORK:
        return None
    pos = {a: d for d, a in enumerate(attrs)}
    total = np.zeros(sizes)
    for d, ai in enumerate(attrs):
        shape = [1] * len(attrs)
        shape[d] = sizes[d]
        total += core.unary[ai].reshape(shape)
    for q in qlist.tolist():
        term: np.ndarray | bool = True
        for ai in comp.qkeys[q]:
            at = comp.attrs[ai]
            col = at.cover[:, int(np.searchsorted(at.qidx, q))]
            shape = [1] * len(attrs)
            shape[pos[ai]] = sizes[pos[ai]]
            term = term & col.reshape(shape)
        total += comp.w[q] * np.broadcast_to(term, total.shape)
    flat = int(np.argmax(total))
    cell = np.unravel_index(flat, total.shape)
    return float(total.flat[flat]), {a: int(c) for a, c in zip(attrs, cell, strict=True)}


def back_substitute(comp: Component, core: Core, atoms: Mapping[int, int]) -> dict[int, int]:
    """Atoms of the eliminated attributes from the core's atoms; -> value positions."""
    atom = dict(atoms)
    for ai, k, how in reversed(core.steps):
        atom[ai] = int(how) if k < 0 else int(np.asarray(how)[atom[k]])
    return {ai: int(comp.attrs[ai].pos[a]) for ai, a in atom.items()}
