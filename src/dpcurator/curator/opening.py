"""Opening a curator: the data loaded into a backend per table, the ledger opened or
created (after the data loaded, so that a bad file creates nothing), and every
parameter checked before either.

A mixin of :class:`~dpcurator.curator.curator.Curator`, whose constructor takes what
this builds.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from dpcurator.curator import requests
from dpcurator.curator.budget import Budget
from dpcurator.curator.ledger import Ledger
from dpcurator.curator.overlap_filter import SOLVER_TIME_LIMIT
from dpcurator.curator.privacy_unit import PrivacyUnit
from dpcurator.errors import InvalidParameter, LedgerMissing
from dpcurator.mechanisms.randomness import RandomSource, ensure_secure
from dpcurator.queries import Schema

#: The single table's name when the curator is opened with ``data=`` and ``schema=``.
DEFAULT_TABLE = "data"


class CuratorOpening:
    """:meth:`open` (mixed into :class:`~dpcurator.curator.curator.Curator`)."""

    @classmethod
    def open(
        cls,
        data: object = None,
        schema: Schema | str | Path | Mapping[str, Any] | None = None,
        *,
        budget: object,
        ledger: str | Path | None = None,
        anchor: str | Path | bool | None = True,
        verify_every: float | None = None,
        privacy_unit: tuple[str, int] | tuple[str, int, str] | PrivacyUnit | None = None,
        unit_key: bytes | None = None,
        tables: Mapping[str, tuple[object, Schema | str | Path]] | None = None,
        rng: RandomSource | None = None,
        allow_insecure: bool = False,
        solver_time_limit: float = SOLVER_TIME_LIMIT,
        request_time_limit: float | None = None,
        solver_threads: int = 4,
        solver_processes: bool = True,
        limits: requests.RequestLimits | None = None,
        backend: str = "duckdb",
        spark: object = None,
        **load_options: Any,
    ) -> Self:
        """Load the data, open (or create) the ledger, and rebuild the filter from it.

        ``privacy_unit=("user_id", k)``: each person keeps k of their rows, a uniformly
        random choice made by a keyed hash of each row's content (a rule that reads only
        that person's rows; see :mod:`dpcurator.backends.unit_rows`), and every cost is
        a per-person cost: the noise is calibrated to sensitivity k, which is the k-fold
        group privacy of the per-row mechanism (Dwork & Roth 2014, Lemma 2.8; Bun &
        Steinke 2016, Prop. 1.9 for zCDP; Dong, Roth & Su 2022 for GDP). ``("tailnum", 50, "aircraft")`` or a
        :class:`~dpcurator.curator.privacy_unit.PrivacyUnit` also names the unit for
        people to read ("per aircraft"; default "person"). The key of
        that hash (32 secret bytes) is drawn from the operating system's CSPRNG when the
        ledger is created and kept in it, sealed by its hash chain
        (:mod:`dpcurator.curator.unit_key`): every later open, process and replica, on
        either backend and whatever the file order, keeps the same rows. ``unit_key``:
        the key a new ledger is created with instead (an existing ledger keeps its own,
        and refuses another). ``ledger``: an SQLite file, or
        ``postgresql://user@host/dbname[?schema=NAME]`` for a ledger that curators on
        several hosts share (see :mod:`dpcurator.curator.stores`); ``ledger=None`` keeps
        the ledger in memory only. ``anchor``: the file outside the ledger's store where
        its heads are appended, so that a rollback of the store is refused (``True``:
        ``<file>.anchor`` beside an SQLite ledger, none for PostgreSQL; ``None``: none);
        ``verify_every``: seconds between re-verifications of the whole ledger while it is
        open (see :class:`~dpcurator.curator.ledger.Ledger`). ``solver_time_limit``: seconds the exact maximum-overlap checks of
        one request may take before safe bounds are used (refusals then conservative).
        ``request_time_limit``: seconds the whole decision of one request may take
        (parsing, bounds, waiting for the solver, the exact checks); past it the request
        raises :class:`~dpcurator.errors.Undecided` and nothing is charged (None: no
        limit but the solver's). ``solver_threads``: how many exact checks run at once
        (each analyst's one at a time); ``solver_processes``: whether their search runs
        in as many worker processes (so that it never holds the interpreter lock the
        other requests need; see :mod:`dpcurator.curator.solver_processes`). The
        workers are fresh interpreters started on first need, one at a time; until one
        is ready a check runs in the request's thread.
        ``backend="spark"`` counts on Spark (the ``spark`` extra): ``spark`` is a
        SparkSession, a master URL (``"spark://host:7077"``) or None for a local session.
        """
        from dpcurator.backends import DuckDBBackend
        from dpcurator.backends.unit_rows import KEY_BYTES, SCHEME

        if backend not in ("duckdb", "spark"):
            raise InvalidParameter(f"backend must be 'duckdb' or 'spark', got {backend!r}")
        if spark is not None and backend != "spark":
            raise InvalidParameter("spark= applies to backend='spark' only")
        loader: Any = DuckDBBackend.load
        if backend == "spark":
            import functools

            from dpcurator.backends.spark_backend import SparkBackend

            loader = functools.partial(SparkBackend.load, spark=spark)

        b = Budget.of(budget)
        source = ensure_secure(rng, allow_insecure=allow_insecure)
        if (
            isinstance(solver_time_limit, bool)
            or not isinstance(solver_time_limit, int | float)
            or not 0 <= solver_time_limit <= 3600
        ):
            raise InvalidParameter(
                f"solver_time_limit must be a number of seconds in [0, 3600], got {solver_time_limit!r}"
            )
        if request_time_limit is not None and (
            isinstance(request_time_limit, bool)
            or not isinstance(request_time_limit, int | float)
            or not 0 < request_time_limit <= 3600
        ):
            raise InvalidParameter(
                "request_time_limit must be None or a number of seconds in (0, 3600], "
                f"got {request_time_limit!r}"
            )
        if (
            isinstance(solver_threads, bool)
            or not isinstance(solver_threads, int)
            or not 1 <= solver_threads <= 64
        ):
            raise InvalidParameter(
                f"solver_threads must be an integer in [1, 64], got {solver_threads!r}"
            )
        if not isinstance(solver_processes, bool):
            raise InvalidParameter(
                f"solver_processes must be true or false, got {solver_processes!r}"
            )
        unit = PrivacyUnit.of(privacy_unit)
        if tables is None:
            if data is None or schema is None:
                raise InvalidParameter("give data= and schema=, or tables={name: (data, schema)}")
            tables = {DEFAULT_TABLE: (data, schema)}
        elif data is not None or schema is not None:
            raise InvalidParameter("give either data= and schema=, or tables=, not both")
        if not isinstance(tables, Mapping) or not tables:
            raise InvalidParameter("tables= must be a non-empty {name: (data, schema)} mapping")
        for name, pair in tables.items():
            if not isinstance(name, str) or not name:
                raise InvalidParameter(f"table names must be non-empty text, got {name!r}")
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise InvalidParameter(f"table {name!r} must be given as (data, schema)")
        schemas = {name: Schema.of(s) for name, (_, s) in tables.items()}
        identity = {
            "budget": b.describe(),
            "currency": b.currency,
            "amount": str(b.amount),
            "tables": {n: s.to_dict() for n, s in schemas.items()},
            "privacy_unit": list(unit.pair) if unit else None,  # the name changes no number
        }

        def open_ledger(create: bool, key: bytes | None) -> Ledger:
            return Ledger(
                ledger, identity, create=create, anchor=anchor, verify_every=verify_every,
                unit_key=key,
            )  # fmt: skip

        led, key = None, None
        if unit is not None:  # the rows are chosen with the key the ledger keeps
            if ledger is not None:
                with contextlib.suppress(LedgerMissing):  # then made below, with the data
                    led = open_ledger(False, unit_key)
            key = led.unit_key if led is not None else unit_key or secrets.token_bytes(KEY_BYTES)
        scheme = led.unit_rows if led is not None else SCHEME  # a new ledger: the current
        backends = {}
        try:
            for name, (d, _) in tables.items():
                backends[name] = loader(
                    d,
                    schemas[name],
                    privacy_unit=unit.pair if unit else None,
                    unit_key=key,
                    unit_rows=scheme,
                    name=name,
                    **load_options,
                )
            if led is None:  # created only once the data loaded (a bad file creates nothing)
                led = open_ledger(True, key)
        except BaseException:
            for be in backends.values():
                be.close()
            if led is not None:
                led.close()
            raise
        if limits is not None and not isinstance(limits, requests.RequestLimits):
            raise InvalidParameter("limits must be a RequestLimits")
        return cls(
            backends,
            b,
            led,
            rng=source,
            privacy_unit=unit,
            solver_time_limit=solver_time_limit,
            limits=limits,
            request_time_limit=request_time_limit,
            solver_threads=solver_threads,
            solver_processes=solver_processes,
        )
