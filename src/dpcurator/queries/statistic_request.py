"""What an analyst asks for when she asks for a statistic: one typed request.

The statistics methods (``Curator.mean``, ``AnalystSession.mean``, ``Client.mean``, ...),
the workload language (``mean(income, 0, 200000, by=sex)``), ``estimate`` and the HTTP
bodies, and every aggregate of a DP SELECT all build a :class:`StatisticRequest`. The
constructors below (:meth:`StatisticRequest.mean` and its siblings) are the one place each
statistic's parameters are declared: the methods of the curator, of a session and of the
client are made from them (:func:`statistic_method`), and :meth:`StatisticRequest.of`
binds keyword arguments (an HTTP body, ``estimate``'s) against them. Pure: no schema is
needed to build one; the curator checks it against the table's schema, every bound, name
and limit, before anything is charged.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcurator.errors import InvalidParameter, QueryError

if TYPE_CHECKING:
    from dpcurator.queries.boolean import BooleanQuery
    from dpcurator.queries.predicates import Query
    from dpcurator.queries.schema import Schema


__all__ = ["KINDS", "PAID", "STATISTICS", "StatisticRequest", "statistic_method"]

#: The statistics answered as a :class:`~dpcurator.curator.answers.StatisticAnswer`
#: (``Curator.statistic`` and the methods of these names).
STATISTICS = ("mean", "variance", "stdev", "share", "quantile", "quantiles", "median")
#: Every kind of request: the statistics, ``units`` (distinct privacy units, a workload
#: line and ``COUNT(DISTINCT <unit>)``), and SQL's grouped ``count`` (of rows, or of rows
#: with a value of ``attribute``) and clipped ``sum``.
KINDS = (*STATISTICS, "units", "count", "sum")


@dataclass(frozen=True)
class StatisticRequest:
    """One statistic, as asked: its kind and parameters, not yet checked against a schema.

    ``attribute`` is the column summarised ("" for a share, ``units`` and a count of
    rows); ``lower``/``upper`` the clip bounds of a mean, variance, deviation or sum (and
    the candidates' range of a SQL percentile); ``qs`` the quantiles (a median's is 1/2);
    ``by`` the group terms (attributes or parts of times such as ``month(t)``);
    ``candidates`` a quantile's values to choose from; ``where`` the rows read; and
    ``condition`` a share's (or ``units``') condition.
    """

    kind: str
    attribute: str = ""
    lower: Any = None  # as given: an int, a decimal (Fraction, Decimal, text) or a float
    upper: Any = None
    qs: tuple[Any, ...] = ()
    by: tuple[str, ...] = ()
    candidates: tuple[Any, ...] | None = None
    where: str | Query | BooleanQuery | None = None
    condition: str | Query | BooleanQuery | None = None

    # --- the constructors: each statistic's parameters, declared once ---------------------

    @classmethod
    def mean(
        cls,
        attribute: str,
        lower: int | float | str | Fraction,
        upper: int | float | str | Fraction,
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
    ) -> StatisticRequest:
        """The mean of ``attribute`` clipped to the public bounds [lower, upper], over the
        rows ``where`` covers, per group of ``by`` (one term or a list): a noisy centred
        sum over a noisy count, half the cost each (docs/aggregations.md). Each result has
        a rigorous 95% interval."""
        return cls("mean", attribute, lower, upper, by=_terms(by), where=where)

    @classmethod
    def variance(
        cls,
        attribute: str,
        lower: int | float | str | Fraction,
        upper: int | float | str | Fraction,
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
    ) -> StatisticRequest:
        """The (population) variance of ``attribute`` clipped to [lower, upper], from a
        noisy count, centred sum and centred sum of squares, a third of the cost each."""
        return cls("variance", attribute, lower, upper, by=_terms(by), where=where)

    @classmethod
    def stdev(
        cls,
        attribute: str,
        lower: int | float | str | Fraction,
        upper: int | float | str | Fraction,
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
    ) -> StatisticRequest:
        """The standard deviation of ``attribute`` clipped to [lower, upper]: the square
        root of the variance's estimate, with the interval's ends' square roots."""
        return cls("stdev", attribute, lower, upper, by=_terms(by), where=where)

    @classmethod
    def share(
        cls,
        condition: str | Query | BooleanQuery,
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
    ) -> StatisticRequest:
        """The fraction of the rows ``where`` covers (per group of ``by``) that satisfy
        ``condition``, counted as a count query counts it: the mean of its 0/1 indicator,
        a noisy sum over a noisy count, half the cost each, with a rigorous 95% interval
        within [0, 1] (docs/aggregations.md). Charged once on the rows read."""
        return cls("share", by=_terms(by), where=where, condition=condition)

    @classmethod
    def quantile(
        cls,
        attribute: str,
        q: float | str | Fraction,
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
        candidates: Sequence[Any] | None = None,
    ) -> StatisticRequest:
        """The q-th quantile (q in [0, 1], at most six decimals) of an ordered attribute,
        a value of its domain (or of ``candidates``), chosen exactly by permute-and-flip
        (epsilon, mu budgets) or the exponential mechanism (rho) on the rank score."""
        return cls(
            "quantile", attribute, qs=(q,), by=_terms(by), candidates=_listed(candidates),
            where=where,
        )  # fmt: skip

    @classmethod
    def quantiles(
        cls,
        attribute: str,
        qs: Sequence[float | str | Fraction],
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
        candidates: Sequence[Any] | None = None,
    ) -> StatisticRequest:
        """Several quantiles at once, the cost split equally between them (composed in
        the budget's currency); results per group, in the order of ``qs``."""
        return cls(
            "quantiles", attribute, qs=_listed(qs), by=_terms(by),
            candidates=_listed(candidates), where=where,
        )  # fmt: skip

    @classmethod
    def median(
        cls,
        attribute: str,
        where: str | Query | BooleanQuery | None = None,
        *,
        by: str | Sequence[str] | None = None,
        candidates: Sequence[Any] | None = None,
    ) -> StatisticRequest:
        """The median: the quantile with q = 0.5."""
        return cls(
            "median", attribute, qs=(Fraction(1, 2),), by=_terms(by),
            candidates=_listed(candidates), where=where,
        )  # fmt: skip

    @classmethod
    def units(cls, condition: str | Query | BooleanQuery | None = None) -> StatisticRequest:
        """The number of privacy units with a kept row satisfying ``condition``."""
        return cls("units", where=condition)

    # --- binding ---------------------------------------------------------------------------

    @classmethod
    def of(cls, kind: object, args: Mapping[str, Any]) -> StatisticRequest:
        """The request ``kind`` with keyword arguments ``args`` (an HTTP body,
        ``estimate``'s arguments), bound against its constructor: an unknown, missing or
        repeated argument is a one-line :class:`~dpcurator.errors.InvalidParameter`."""
        return cls.build(kind, (), args)

    @classmethod
    def build(
        cls, kind: object, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> StatisticRequest:
        """The request ``kind`` from positional and keyword arguments, as its
        constructor takes them."""
        make = _constructor(kind)
        for k in kwargs:
            if not isinstance(k, str) or k.startswith("_"):
                raise InvalidParameter(f"{kind}: unknown argument {str(k)[:40]!r}")
        try:
            inspect.signature(make).bind(*args, **kwargs)
        except TypeError as err:  # an unknown, missing or repeated argument
            raise InvalidParameter(f"{kind}: {err}") from None
        return make(*args, **kwargs)

    def args(self) -> dict[str, Any]:
        """The keyword arguments of this request's constructor (the inverse of
        :meth:`of`): what a client sends and a curator's method of that name takes."""
        if self.kind == "units":
            return {"condition": self.where}
        d: dict[str, Any] = (
            {"condition": self.condition} if self.kind == "share" else {"attribute": self.attribute}
        )
        if self.kind in ("mean", "variance", "stdev"):
            d["lower"], d["upper"] = self.lower, self.upper
        elif self.kind == "quantile":
            d["q"] = self.qs[0] if isinstance(self.qs, tuple) and self.qs else None
        elif self.kind == "quantiles":
            d["qs"] = _unlisted(self.qs)
        if self.where is not None:
            d["where"] = self.where
        if self.by != ():
            d["by"] = _unlisted(self.by)
        if self.candidates is not None:
            d["candidates"] = _unlisted(self.candidates)
        return d

    def cells(self, schema: Schema) -> int:
        """The cells this line asks for, from the public schema alone: one per group of
        ``by``, times candidates x quantiles for a quantile (the scores its selections
        compute). What a request's total is counted in, before anything is built."""
        if self.kind == "units":  # one number
            return 1
        by = [self.by] if isinstance(self.by, str) else self.by
        if not isinstance(by, tuple | list):
            raise QueryError(f"by must be a list of attribute names, got {by!r}")
        for n in (self.attribute,) if self.kind != "share" else ():
            if not isinstance(n, str) or n not in schema:
                raise QueryError(f"unknown attribute {n!r}")
        from dpcurator.queries.parts import group_term

        groups = math.prod(group_term(schema, n).groups for n in set(by))
        if self.kind in ("mean", "variance", "stdev", "share"):
            return groups
        attr = schema.attribute(self.attribute)
        if self.candidates is None:
            choices = attr.size - (attr.missing is not None)
        elif isinstance(self.candidates, tuple | list):
            choices = len(self.candidates)
        else:
            raise QueryError(f"candidates must be a list, got {self.candidates!r}")
        return groups * choices * max(1, len(self.qs))


def _constructor(kind: object) -> Callable[..., StatisticRequest]:
    if not isinstance(kind, str) or kind not in (*STATISTICS, "units"):
        kinds = ", ".join((*STATISTICS, "units"))
        raise InvalidParameter(f"kind must be one of {kinds}, got {str(kind)[:40]!r}")
    make: Callable[..., StatisticRequest] = getattr(StatisticRequest, kind)
    return make


#: The keyword-only parameters every method that asks for a statistic takes after the
#: request's own: the cost in the ledger's currency, and the table.
PAID = tuple(
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
    for name, annotation in (
        ("epsilon", "float | None"),
        ("rho", "float | None"),
        ("mu", "float | None"),
        ("table", "str | None"),
    )
)
_PAYING = (
    "\n\n        Charged ``epsilon``, ``rho`` or ``mu`` (the ledger's currency) on the rows"
    "\n        read, of ``table`` (the default table if None)."
)


def statistic_method(kind: str, *, private: bool = False) -> Any:
    """The method ``kind`` of a class with a ``statistic(request, *, epsilon, rho, mu,
    table)`` method (the curator, an analyst's session, the client): it builds its
    request from its arguments and answers it. It is named, documented and signed as the
    request's constructor followed by :data:`PAID` (what ``help()``, IDEs and the docs
    show), so ``Curator.mean``, ``AnalystSession.mean`` and ``Client.mean`` declare
    nothing of their own. With ``private`` (the curator's), the private ``_analyst``
    argument is passed on; elsewhere it is refused as any unknown argument."""

    def ask(
        self: Any,
        *args: Any,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        **kwargs: Any,
    ) -> Any:
        passed = {"_analyst": kwargs.pop("_analyst")} if private and "_analyst" in kwargs else {}
        request = StatisticRequest.build(kind, args, kwargs)
        return self.statistic(request, epsilon=epsilon, rho=rho, mu=mu, table=table, **passed)

    own = inspect.signature(_constructor(kind))
    first = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ask.__name__ = ask.__qualname__ = kind
    ask.__doc__ = (getattr(StatisticRequest, kind).__doc__ or "") + _PAYING
    ask.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[first, *own.parameters.values(), *PAID], return_annotation="StatisticAnswer"
    )
    return ask


def _terms(by: object) -> tuple[str, ...] | Any:
    """``by`` as a tuple when it is a name or a list of them (anything else is kept, to
    be refused by the curator in one line)."""
    if by is None:
        return ()
    if isinstance(by, str):
        return (by,)
    return _listed(by)


def _listed(values: object) -> tuple[Any, ...] | Any:
    """A list or tuple as a tuple (a frozen request holds no list); anything else as it
    is, for the curator to refuse with the parameter named."""
    if isinstance(values, list | tuple):
        return tuple(values)
    return values


def _unlisted(values: object) -> object:
    """A tuple back as the list it was given as (anything else as it is)."""
    return list(values) if isinstance(values, tuple) else values
