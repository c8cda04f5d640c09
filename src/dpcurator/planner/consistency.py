"""Consistent answers by generalised least squares: free post-processing (post-processing
immunity: Dwork & Roth 2014, Prop. 2.1).

The workload's queries cut the domain into *atoms*: on each attribute that some query
constrains, values with the same membership signature form one atom; a cell is one atom
per constrained attribute. Every query is the sum of the cells it covers (a 0/1 row of
A). Given noisy answers y with variances v, the consistent answers are A x*, where x*
minimises sum_q (A x - y)_q^2 / v_q (the weighted projection of y onto the range of A,
the best linear unbiased estimate; x itself may be negative and need not be unique).
Overlapping or nested queries then agree exactly: a total equals the sum of its
breakdowns. It reads only the released answers, never the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import lsqr

from dpcurator.errors import InvalidParameter
from dpcurator.queries import Query

#: The most cells (atoms) and the most non-zeros of A that ``consistent`` accepts.
MAX_CELLS = 2_000_000
MAX_NONZEROS = 30_000_000


def _atoms(queries: Sequence[Query], name: str, size: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Atom id per value of one attribute, and each query's covered atoms on it."""
    member = []
    for q in queries:
        cov = q.coverage(name)
        row = np.zeros(size, bool)
        for lo, hi in cov:
            row[lo:hi] = True
        member.append(row)
    m = np.array(member)  # queries x values
    _, atom_of, counts = np.unique(m.T, axis=0, return_inverse=True, return_counts=True)
    atom_of = atom_of.ravel()
    n_atoms = len(counts)
    covered = []
    for row in m:
        a = np.zeros(n_atoms, bool)
        a[atom_of[row]] = True
        covered.append(np.flatnonzero(a))
    return atom_of, covered


def cell_count(queries: Sequence[Query]) -> int:
    """How many cells (atoms) the workload cuts the domain into."""
    qs, _ = _boxes([q for q in queries if not q.is_empty])
    if not qs:
        return 0
    schema = qs[0].schema
    names = sorted({n for q in qs for n in q.attributes}, key=schema.index)
    total = 1
    for n in names:
        atom_of, _ = _atoms(qs, n, schema.attribute(n).size)
        total *= int(atom_of.max()) + 1
    return total


def cells_matrix(queries: Sequence[Query]) -> tuple[list[int], sparse.csr_matrix | None]:
    """The 0/1 matrix (non-empty queries x cells) and the non-empty queries' indices.

    Raises :class:`InvalidParameter` (before anything is released, if called first) when
    the atom space is too large."""
    qs = list(queries)
    live = [i for i, q in enumerate(qs) if not q.is_empty]  # empty queries: exactly 0
    if not live:
        return live, None
    lq, owner = _boxes([qs[i] for i in live])
    schema = lq[0].schema
    names = sorted({n for q in lq for n in q.attributes}, key=schema.index)
    per_attr = []
    shape = []
    for n in names:
        size = schema.attribute(n).size
        if size > 10_000_000:
            raise InvalidParameter(f"consistent: attribute {n!r} has too many values ({size})")
        atom_of, covered = _atoms(lq, n, size)
        per_attr.append(covered)
        shape.append(int(atom_of.max()) + 1)
    cells = int(np.prod(shape, dtype=object)) if shape else 1
    if cells > MAX_CELLS:
        raise InvalidParameter(
            f"--postprocess consistent: the workload's queries cut the domain into {cells:,} "
            f"cells, more than {MAX_CELLS:,}; use fewer or coarser queries, or another option"
        )
    nnz = 0
    for k in range(len(lq)):
        c = 1
        for j in range(len(names)):
            c *= len(per_attr[j][k])
        nnz += c
    if nnz > MAX_NONZEROS:
        raise InvalidParameter(
            f"--postprocess consistent: the least-squares system would have {nnz:,} non-zeros, "
            f"more than {MAX_NONZEROS:,}; use fewer or coarser queries, or another option"
        )
    rows, cols = [], []
    for k in range(len(lq)):
        if names:
            grids = np.meshgrid(*[per_attr[j][k] for j in range(len(names))], indexing="ij")
            flat = np.ravel_multi_index([g.ravel() for g in grids], shape)
        else:
            flat = np.zeros(1, np.int64)
        rows.append(np.full(len(flat), k))
        cols.append(flat)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    a = sparse.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(lq), cells))
    return live, a if owner is None else _fold(owner, len(live)) @ a


def consistent(
    queries: Sequence[Query],
    values: Sequence[float],
    variances: Sequence[float],
    system: tuple[list[int], sparse.csr_matrix | None] | None = None,
) -> np.ndarray:
    """The least-squares consistent answers (floats), one per query.

    ``system`` is :func:`consistency_system` of the queries (or :func:`cells_matrix`), if
    already built."""
    qs = list(queries)
    y = np.asarray(values, float)
    v = np.asarray(variances, float)
    if len(qs) != len(y) or len(y) != len(v):
        raise InvalidParameter("consistent: one value and one variance per query")
    if not np.all(v > 0):
        raise InvalidParameter("consistent: variances must be positive")
    live, A = consistency_system(qs) if system is None else system
    out = np.zeros(len(qs))
    if A is None:
        return out
    k, back = _weighted((live, A), v)
    out[live] = back(_lsqr(k, y[live] / np.sqrt(v[live])))
    return out


#: The most non-empty queries whose shared-cell matrix (queries x queries) is built when
#: the cell system is too large (36 million entries, about 290 MB).
MAX_GRAM_QUERIES = 6000


def gram_matrix(queries: Sequence[Query]) -> tuple[list[int], np.ndarray | None]:
    """G = A Aᵀ without A: G[q, r] is the number of cells that queries q and r share,
    the product over attributes of the atoms both cover. The range of G is the range of
    A, so the consistent answers are G z for the z minimising the same weighted
    residual: a system in as many unknowns as there are queries, however many cells the
    workload cuts the domain into."""
    qs = list(queries)
    live = [i for i, q in enumerate(qs) if not q.is_empty]
    if not live:
        return live, None
    if len(live) > MAX_GRAM_QUERIES:
        raise InvalidParameter(
            f"--postprocess consistent: {len(live):,} queries are more than "
            f"{MAX_GRAM_QUERIES:,} for a workload that cuts the domain into this many cells; "
            "use fewer or coarser queries, or another option"
        )
    lq, owner = _boxes([qs[i] for i in live])
    schema = lq[0].schema
    names = sorted({n for q in lq for n in q.attributes}, key=schema.index)
    g = np.ones((len(lq), len(lq)))
    for n in names:
        size = schema.attribute(n).size
        if size > 10_000_000:
            raise InvalidParameter(f"consistent: attribute {n!r} has too many values ({size})")
        atom_of, covered = _atoms(lq, n, size)
        m = np.zeros((len(lq), int(atom_of.max()) + 1), np.float32)
        for k, c in enumerate(covered):
            m[k, c] = 1.0
        np.multiply(g, m @ m.T, out=g)  # exact: counts below 2^24, products in float64
    if owner is not None:
        fold = _fold(owner, len(live))
        g = np.asarray((fold @ sparse.csr_matrix(g) @ fold.T).todense())
    return live, g


def _boxes(queries: list[Query]) -> tuple[list[Query], np.ndarray | None]:
    """Boolean queries as their disjoint boxes (rows of A add up per query), and the
    query each box belongs to; (queries, None) when all are boxes."""
    if all(isinstance(q, Query) for q in queries):
        return queries, None
    boxes = [b for q in queries for b in q.boxes]
    owner = np.repeat(np.arange(len(queries)), [len(q.boxes) for q in queries])
    return boxes, owner


def _fold(owner: np.ndarray, n: int) -> sparse.csr_matrix:
    """The 0/1 matrix (queries x boxes) that adds each query's boxes."""
    return sparse.csr_matrix(
        (np.ones(len(owner)), (owner, np.arange(len(owner)))), shape=(n, len(owner))
    )


def consistency_system(queries: Sequence[Query]) -> tuple[list[int], Any]:
    """The system :func:`consistent` solves: the cell matrix A when the workload cuts the
    domain into few enough cells, else the shared-cell matrix G (:func:`gram_matrix`).
    Raises :class:`InvalidParameter` when neither fits (call it before releasing)."""
    try:
        return cells_matrix(queries)
    except InvalidParameter as err:
        if "too many values" in str(err):
            raise
        live = [q for q in queries if not q.is_empty]
        if len(live) > MAX_GRAM_QUERIES:
            raise
        return gram_matrix(queries)


#: The most non-empty queries whose consistent answers' variances are all computed at once
#: (one dense eigendecomposition of a queries x queries matrix).
MAX_DENSE_VARIANCES = 2000


def _weighted(system: tuple[list[int], Any], v: np.ndarray):
    """(K, back): K = W^(1/2) A (or W^(1/2) G S, columns scaled to unit norm), whose
    range is W^(1/2) range(A); back(u) maps a least-squares solution to answers."""
    live, m = system
    s = 1.0 / np.sqrt(v[live])
    if sparse.issparse(m):
        return sparse.diags(s) @ m, lambda u: m @ u
    k = s[:, None] * m
    norms = np.linalg.norm(k, axis=0)
    scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
    k *= scale[None, :]
    return k, lambda u: m @ (scale * u)


def _lsqr(k: Any, b: np.ndarray) -> np.ndarray:
    return lsqr(k, b, atol=1e-14, btol=1e-14, iter_lim=max(10_000, 4 * k.shape[0]))[0]


def consistent_variances(
    queries: Sequence[Query],
    variances: Sequence[float],
    rows: Sequence[int],
    system: tuple[list[int], Any] | None = None,
) -> np.ndarray:
    """The exact variance of the consistent answers of ``rows`` (indices into
    ``queries``), when the noisy answers are independent with ``variances``.

    The consistent answers are W^(-1/2) P W^(1/2) y with P the orthogonal projection onto
    W^(1/2) range(A), W = diag(1/v); so Var = v_q P_qq, never above v_q (P_qq <= 1): the
    consistent answer is never noisier than the raw one. One least-squares solve per
    row (P e_q); empty queries are exactly 0."""
    qs = list(queries)
    v = np.asarray(variances, float)
    if len(v) != len(qs) or not np.all(v > 0):
        raise InvalidParameter("consistent: one positive variance per query")
    live, m = consistency_system(qs) if system is None else system
    out = np.zeros(len(rows))
    if m is None:
        return out
    k, _ = _weighted((live, m), v)
    where = {q: j for j, q in enumerate(live)}
    wanted = [(i, where[int(r)]) for i, r in enumerate(rows) if int(r) in where]
    n = k.shape[0]
    if len(wanted) > 1 and n <= MAX_DENSE_VARIANCES:
        # Every P_jj at once: range(K) = range(W^(1/2) G W^(1/2)) with G = A Aᵀ, so P is
        # the projection onto the eigenvectors of that matrix with non-zero eigenvalues.
        g = (m @ m.T).toarray() if sparse.issparse(m) else m
        w = 1.0 / np.sqrt(v[live])
        lam, vec = np.linalg.eigh(w[:, None] * g * w[None, :])
        tol = max(lam.max(initial=0.0), 0.0) * n * np.finfo(float).eps * 10
        lev = np.sum(vec[:, lam > tol] ** 2, axis=1)
        for i, j in wanted:
            out[i] = v[rows[i]] * min(1.0, float(lev[j]))
        return out
    if not sparse.issparse(k):
        k = k.astype(np.float32)  # a variance needs no more digits; twice as fast
    for i, j in wanted:
        e = np.zeros(n, k.dtype)
        e[j] = 1.0
        p_jj = float((k @ _lsqr(k, e))[j])
        out[i] = v[rows[i]] * min(1.0, max(0.0, p_jj))
    return out


def exact_variances_cheap(system: tuple[list[int], Any]) -> bool:
    """Whether :func:`consistent_variances` of every query is one dense eigen-
    decomposition (seconds at most) rather than one least-squares solve per query."""
    return len(system[0]) <= MAX_DENSE_VARIANCES
