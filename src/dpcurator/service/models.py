"""The HTTP API's typed request and response bodies.

Requests are *strict* (no "0.1" read as 0.1, no unknown fields): what an analyst sends is
either exactly a valid body or a 422. Values are then validated again by the curator,
which is the only judge of what a request may cost. Responses mirror the Python
:class:`~dpcurator.curator.answers.Answer` and friends one to one, so that
:class:`dpcurator.client.Client` can rebuild them exactly.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

Number = float | int
#: A value as a request writes it: a number (exact when an integer or decimal text such
#: as "30.5"; a JSON float by its shortest decimal), ISO 8601 text for a time or a date,
#: or text for a categorical; never coerced from one kind into another.
Value = StrictInt | StrictFloat | StrictStr


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _Cost(_Body):
    epsilon: Number | None = Field(default=None, description="cost, for a pure-DP budget")
    rho: Number | None = Field(default=None, description="cost, for a zCDP or (eps, delta) budget")
    mu: Number | None = Field(default=None, description="cost, for a Gaussian-DP budget")
    table: str | None = Field(default=None, description="the table, if the curator has several")

    def cost_args(self) -> dict[str, object]:
        return {"epsilon": self.epsilon, "rho": self.rho, "mu": self.mu, "table": self.table}


class CountRequest(_Cost):
    query: str | None = Field(
        default=None, description='a predicate, e.g. "age < 30"; none: all rows'
    )

    def args(self) -> dict[str, object]:
        return {"query": self.query, **self.cost_args()}


class UnitsRequest(_Cost):
    query: str | None = Field(
        default=None,
        description="a predicate, e.g. \"origin = 'EWR'\"; none: every unit with a kept row",
    )

    def args(self) -> dict[str, object]:
        return {"condition": self.query, **self.cost_args()}


class SqlRequest(_Body):
    query: str = Field(
        description="a SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=...) ..., or EXPLAIN "
        "SELECT ... (see docs/sql.md); its OPTIONS say what it costs"
    )


class SqlOut(BaseModel):
    """A SELECT's answer as a table: one row per group, group columns first, then each
    aggregate's value and the low and high ends of its interval."""

    query: str
    columns: list[str]
    rows: list[list[int | float | str | bool | None]]
    cost: float
    currency: str
    remaining: float | None
    remaining_exact: bool = True
    charge_id: int | None = None
    explain: bool = False
    admitted: bool | None = Field(
        default=None, description="an EXPLAIN's: whether the SELECT would be admitted now"
    )


class HistogramRequest(_Cost):
    attribute: str
    bins: list[Value] | None = Field(
        default=None,
        description="half-open bin edges, as the attribute's values are written (numbers; "
        "ISO 8601 text for a timestamp or a date)",
    )
    where: str | None = None

    def args(self) -> dict[str, object]:
        return {
            "attribute": self.attribute,
            "bins": self.bins,
            "where": self.where,
            **self.cost_args(),
        }


class MarginalRequest(_Cost):
    attributes: list[str]
    where: str | None = None

    def args(self) -> dict[str, object]:
        return {"attributes": self.attributes, "where": self.where, **self.cost_args()}


class SumRequest(_Cost):
    attribute: str
    lower: StrictInt | StrictFloat
    upper: StrictInt | StrictFloat
    where: str | None = None

    def args(self) -> dict[str, object]:
        return {
            "attribute": self.attribute,
            "lower": self.lower,
            "upper": self.upper,
            "where": self.where,
            **self.cost_args(),
        }


class _Statistic(_Cost):
    attribute: str
    where: str | None = Field(default=None, description='the rows read, e.g. "age < 30"')
    by: list[str] | str | None = Field(
        default=None, description="group by these attributes: one result per combination"
    )

    def args(self) -> dict[str, object]:
        return self.model_dump(exclude_none=True)


class MomentsRequest(_Statistic):
    """A mean, variance or standard deviation of ``attribute`` clipped to [lower, upper]."""

    lower: StrictInt | StrictFloat = Field(description="a number, e.g. 30.5")
    upper: StrictInt | StrictFloat = Field(description="a number, e.g. 60.5")


class ShareRequest(_Cost):
    """The fraction of the rows read (``where``, per group of ``by``) where ``condition``
    holds, with a rigorous 95% interval."""

    condition: str = Field(description='e.g. "arr_delay > 15"')
    where: str | None = Field(default=None, description='the rows read, e.g. "age < 30"')
    by: list[str] | str | None = Field(
        default=None, description="group by these attributes: one result per combination"
    )

    def args(self) -> dict[str, object]:
        return self.model_dump(exclude_none=True)


class _Selection(_Statistic):
    candidates: list[Value | StrictBool] | None = Field(
        default=None, description="the values to choose from (default: the whole domain)"
    )


class QuantileRequest(_Selection):
    q: Number = Field(description="in [0, 1], at most six decimals")


class QuantilesRequest(_Selection):
    qs: list[Number] = Field(description="each in [0, 1], at most six decimals")


class MedianRequest(_Selection):
    pass


class ReleaseRequest(_Cost):
    """Either a workload to plan (``workload``, with an optional total cost and an
    allocation) or a batch of queries with a cost each (``queries`` and ``costs``)."""

    workload: str | None = Field(
        default=None, description="workload text: a query, histogram(...) or marginal(...) a line"
    )
    allocation: Literal["sequential", "uniform", "optimal"] = "optimal"
    objective: Literal["total", "per-table", "max"] = Field(
        default="per-table",
        description="what the optimal allocation minimises: the total squared error, "
        "each workload line's mean squared error weighing the same, or the largest error",
    )
    strategy: Literal["auto", "direct", "marginals", "identity", "tree", "p-identity"] = Field(
        default="auto",
        description="what to measure: the asked queries (direct), marginal tables (and, "
        "under zCDP, residual measurements), the histogram or a tree of ranges of one "
        "ordered attribute, or weighted p-Identity rows (a Kronecker product over several "
        "attributes), answers derived by least squares; auto: the least expected error",
    )
    queries: list[str] | None = None
    costs: list[Number] | None = None


class EstimateRequest(_Cost):
    """Any query route's body, with the route's name as ``kind``."""

    kind: Literal[
        "count",
        "histogram",
        "marginal",
        "sum",
        "mean",
        "variance",
        "stdev",
        "share",
        "quantile",
        "quantiles",
        "median",
        "units",
    ]
    query: str | None = None
    condition: str | None = None
    attribute: str | None = None
    attributes: list[str] | None = None
    bins: list[Value] | None = None
    where: str | None = None
    lower: StrictInt | StrictFloat | None = None
    upper: StrictInt | StrictFloat | None = None
    by: list[str] | str | None = None
    q: Number | None = None
    qs: list[Number] | None = None
    candidates: list[Value | StrictBool] | None = None

    def args(self) -> dict[str, object]:
        given = self.model_dump(exclude={"kind"}, exclude_none=True)
        args = {k: v for k, v in given.items() if k in _FIELDS[self.kind]}
        if self.kind == "units" and "query" in args:  # Curator.units(condition, ...)
            args["condition"] = args.pop("query")
        return args

    def stray(self) -> list[str]:
        given = self.model_dump(exclude={"kind"}, exclude_none=True)
        return sorted(k for k in given if k not in _FIELDS[self.kind])


_COST_FIELDS = {"epsilon", "rho", "mu", "table"}
_FIELDS = {
    "count": {"query"} | _COST_FIELDS,
    "histogram": {"attribute", "bins", "where"} | _COST_FIELDS,
    "marginal": {"attributes", "where"} | _COST_FIELDS,
    "sum": {"attribute", "lower", "upper", "where"} | _COST_FIELDS,
    "mean": {"attribute", "lower", "upper", "where", "by"} | _COST_FIELDS,
    "variance": {"attribute", "lower", "upper", "where", "by"} | _COST_FIELDS,
    "stdev": {"attribute", "lower", "upper", "where", "by"} | _COST_FIELDS,
    "share": {"condition", "where", "by"} | _COST_FIELDS,
    "quantile": {"attribute", "q", "where", "by", "candidates"} | _COST_FIELDS,
    "quantiles": {"attribute", "qs", "where", "by", "candidates"} | _COST_FIELDS,
    "median": {"attribute", "where", "by", "candidates"} | _COST_FIELDS,
    "units": {"query"} | _COST_FIELDS,
}


class AddAnalystRequest(_Body):
    name: str
    quota: Number | None = None
    admin: bool = False


# --- responses --------------------------------------------------------------------------


class CostOut(BaseModel):
    amount: float
    currency: str


class NoiseOut(BaseModel):
    name: str
    parameter: float


class AnswerOut(BaseModel):
    query: str
    value: int | float = Field(description="an integer; a float attribute's sum: a number")
    interval: tuple[int | float, int | float]
    confidence: float = 0.95
    half_width: int | float
    cost: CostOut
    noise: NoiseOut
    remaining: float
    charge_id: int
    remaining_exact: bool = Field(
        True,
        description="remaining is exactly what GET /v1/budget reports on these points; "
        "false: a lower bound (never more than truly remains)",
    )


class TableAnswerOut(BaseModel):
    request: str
    cells: list[AnswerOut]
    cost: CostOut
    remaining: float
    charge_id: int
    remaining_exact: bool = True


class DerivedAnswerOut(BaseModel):
    """An asked query's least-squares estimate from a strategy's measured tables."""

    query: str
    value: float
    variance: float
    interval: tuple[float, float]
    confidence: float = 0.95
    half_width: float
    strategy: str
    currency: str
    remaining: float
    charge_ids: list[int]


class StatisticOut(BaseModel):
    """One result: ``interval`` (means, variances, standard deviations) covers the
    group's statistic of the clipped values with probability >= 95% (rigorous);
    ``rank_error`` (quantiles) bounds the rank's distance to the quantile's, in rows, with
    probability >= 95%; ``std_error`` is first order (approximate)."""

    group: str
    value: int | float | str | None = Field(
        description="null for a small group (small_group: true)"
    )
    q: float | None = None
    interval: tuple[float, float] | None = None
    rank_error: int | None = None
    std_error: float | None = None
    count: int | None = None
    small_group: bool = Field(
        default=False,
        description="the group's noisy count is too small to carry information: no value, "
        "and the interval is the statistic's whole range",
    )


class StatisticAnswerOut(BaseModel):
    request: str
    statistic: str
    results: list[StatisticOut]
    mechanism: str
    cost: CostOut
    confidence: float = 0.95
    remaining: float
    charge_id: int
    position: int | None = Field(
        default=None, description="in a workload release: its place among the answers"
    )


class StrategyOut(BaseModel):
    strategy: str
    detail: str
    objective_value: float | None
    total_squared_error: float | None
    worst_answer_squared_error: float | None
    per_table_squared_error: float | None
    lower_bound: bool
    seconds: float
    note: str


class ReleaseOut(BaseModel):
    answers: list[AnswerOut]
    derived: list[DerivedAnswerOut] = []
    statistics: list[StatisticAnswerOut] = []
    strategy: str | None = None
    strategies: list[StrategyOut] = []
    allocation: str | None = None
    objective: str | None = None
    gamma: float | None = None
    utility_gain: float | None = None
    notes: list[str] = []


class EstimateOut(BaseModel):
    kind: str
    request: str
    cells: int
    cost: CostOut
    noise: NoiseOut
    expected_abs_error: float
    half_width: int | float
    confidence: float = 0.95
    admitted: bool
    exact: bool
    error_scale: float | None = None
    error: str = ""


class BudgetOut(BaseModel):
    budget: str
    currency: str
    remaining: float = Field(
        description="the smaller of what is left for everyone and of your quota"
    )
    remaining_budget: float
    quota: float | None
    quota_remaining: float | None
    query: str | None
    exact: bool


class HistoryOut(BaseModel):
    charge_id: int
    created: float
    analyst: str | None
    table: str
    kind: str
    request: str
    cost: float
    currency: str
    noise: str
    answer: object | None


class AnalystOut(BaseModel):
    name: str
    quota: float | None
    admin: bool
    active: bool


class NewAnalystOut(AnalystOut):
    token: str


class HealthOut(BaseModel):
    status: str


class PrivacyUnitOut(BaseModel):
    column: str = Field(description="the id column: a unit is the rows sharing one value")
    max_rows: int = Field(description="the most rows one unit may own (k)")
    name: str = Field(description='what one unit is, e.g. "person" or "aircraft"')


class SchemaOut(BaseModel):
    tables: dict[str, dict]
    budget: str
    currency: str
    privacy_unit: PrivacyUnitOut | None = Field(
        default=None,
        description="whom every cost protects: one unit, with up to max_rows rows, is "
        "protected as a whole (group privacy); null: every row on its own",
    )


class ErrorOut(BaseModel):
    error: str
    message: str
