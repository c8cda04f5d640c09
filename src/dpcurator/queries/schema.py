"""Public schemas: attributes with finite, public domains (see docs/design.md).

The domain of a schema is the product of its attributes' domains (Smith et
al., PoPETs 2022: "a domain is the Cartesian product of attributes"). It may have
10^20000 points, so nothing here ever enumerates it: every value is addressed by its
*position* ``0 .. size-1`` inside its attribute, and sets of values are sorted lists of
half-open position intervals.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dpcurator.errors import SchemaError

AttributeType = Literal["integer", "categorical"]


def _text(s: str) -> bool:
    """Whether ``s`` can be written as UTF-8 (no lone surrogates): every name and value
    ends up in JSON answers, the ledger and the dashboard."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Attribute:
    """One attribute and its public domain.

    ``integer``: the inclusive range ``[min, max]`` (always ordered).
    ``categorical``: a list of distinct string values; ``ordered`` allows ranges, which
    compare values by their position in ``values``.

    ``missing``: the attribute may be missing, and this is its missing value (what
    ``IS NULL`` means, and what blank and NULL cells load as). A declared value (a
    categorical's ``"?"``, an integer inside ``[min, max]``) is that value's cell;
    anything else (``-1`` below ``min``, ``"NA"``, ``""``, a categorical's undeclared
    ``"Unknown"``) is one more cell after the declared values, position
    :attr:`value_count`, which no range includes. Either way the missing value is a
    cell of the domain like any other: ``NOT`` and ``!=`` include it, so a query and its
    negation always partition the rows.
    """

    name: str
    type: AttributeType
    values: tuple[str, ...] = ()
    min: int = 0
    max: int = -1
    ordered: bool = False
    missing: int | str | None = None  # the value that means "missing" (IS NULL)
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    #: Whether the missing value is a cell of its own, after the declared values.
    _extra: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SchemaError("attribute name must be a non-empty string")
        if not _text(self.name):
            raise SchemaError(f"attribute name {self.name!r} is not valid Unicode text")
        if self.type == "integer":
            if isinstance(self.min, bool) or isinstance(self.max, bool):
                raise SchemaError(f"attribute {self.name!r}: min and max must be integers")
            if not isinstance(self.min, int) or not isinstance(self.max, int):
                raise SchemaError(f"attribute {self.name!r}: min and max must be integers")
            if self.min > self.max:
                raise SchemaError(
                    f"attribute {self.name!r}: min {self.min} is greater than max {self.max}"
                )
            object.__setattr__(self, "ordered", True)
        elif self.type == "categorical":
            values = tuple(self.values)
            if not values:
                raise SchemaError(f"attribute {self.name!r}: a categorical needs values")
            for v in values:
                if not isinstance(v, str):
                    raise SchemaError(f"attribute {self.name!r}: value {v!r} is not a string")
                if not _text(v):
                    raise SchemaError(
                        f"attribute {self.name!r}: value {v!r} is not valid Unicode text"
                    )
            index = {v: i for i, v in enumerate(values)}
            if len(index) != len(values):
                dup = next(v for v in values if values.count(v) > 1)
                raise SchemaError(f"attribute {self.name!r}: duplicate value {dup!r}")
            object.__setattr__(self, "values", values)
            object.__setattr__(self, "_index", index)
        else:
            raise SchemaError(
                f"attribute {self.name!r}: unknown type {self.type!r} "
                "(expected 'integer' or 'categorical')"
            )
        object.__setattr__(self, "_extra", False)  # derived below, whatever was passed
        if self.missing is not None:
            m = self.missing
            if self.type == "integer" and (isinstance(m, bool) or not isinstance(m, int | str)):
                raise SchemaError(
                    f"attribute {self.name!r}: its missing value must be an integer (e.g. "
                    f'{self.min - 1}, below min) or text (e.g. "NA"), got {m!r}'
                )
            if self.type == "categorical" and not isinstance(m, str):
                raise SchemaError(
                    f"attribute {self.name!r}: its missing value must be text, like its "
                    f'values (e.g. "?"), got {m!r}'
                )
            declared = (
                isinstance(m, int) and self.min <= m <= self.max
                if self.type == "integer"
                else m in self._index
            )
            object.__setattr__(self, "_extra", not declared)

    @property
    def value_count(self) -> int:
        """Number of declared values: positions ``0 .. value_count - 1`` (the ordered
        part of the domain, where ranges live)."""
        if self.type == "integer":
            return self.max - self.min + 1
        return len(self.values)

    @property
    def size(self) -> int:
        """Number of values in the domain (the declared ones and, when the missing
        value is not one of them, its own cell)."""
        return self.value_count + (1 if self._extra else 0)

    @property
    def missing_position(self) -> int | None:
        """Position of the missing value (None if the attribute may not be missing)."""
        if self.missing is None:
            return None
        return self.value_count if self._extra else self.position(self.missing)

    @property
    def missing_cell(self) -> bool:
        """Whether the missing value is a cell of its own, after the declared values."""
        return self._extra

    def position(self, value: int | str) -> int:
        """Position of ``value`` in the domain; :class:`KeyError` if it is not there."""
        if self._extra and type(value) is type(self.missing) and value == self.missing:
            return self.value_count
        if self.type == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                raise KeyError(value)
            if not self.min <= value <= self.max:
                raise KeyError(value)
            return value - self.min
        if not isinstance(value, str):
            raise KeyError(value)
        return self._index[value]

    def value(self, position: int) -> int | str:
        """The value at ``position`` (the inverse of :meth:`position`)."""
        if not 0 <= position < self.size:
            raise IndexError(position)
        if position == self.value_count:  # the missing value's own cell
            assert self.missing is not None
            return self.missing
        if self.type == "integer":
            return self.min + position
        return self.values[position]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form read by :meth:`Schema.from_dict`."""
        d: dict[str, Any]
        if self.type == "integer":
            d = {"name": self.name, "type": "integer", "min": self.min, "max": self.max}
        else:
            d = {"name": self.name, "type": "categorical"}
            if self.ordered:
                d["ordered"] = True
            d["values"] = list(self.values)
        if self.missing is not None:
            d["missing"] = self.missing
        return d


@dataclass(frozen=True)
class Schema:
    """A list of attributes with distinct names; the domain is their product."""

    attributes: tuple[Attribute, ...]
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    _names: tuple[str, ...] = field(default=(), compare=False, repr=False)
    _folded: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        attrs = tuple(self.attributes)
        if not attrs:
            raise SchemaError("a schema needs at least one attribute")
        index: dict[str, int] = {}
        for i, a in enumerate(attrs):
            if not isinstance(a, Attribute):
                raise SchemaError(f"attribute {i} is not an Attribute")
            if a.name in index:
                raise SchemaError(f"duplicate attribute name {a.name!r}")
            index[a.name] = i
        folded: dict[str, tuple[str, ...]] = {}
        for a in attrs:
            folded[a.name.lower()] = (*folded.get(a.name.lower(), ()), a.name)
        # Built once: a query's parse then costs what its own text costs, whatever the
        # schema's width (a 10,000-attribute schema is looked up, never scanned).
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_names", tuple(a.name for a in attrs))
        object.__setattr__(self, "_folded", folded)

    def __len__(self) -> int:
        return len(self.attributes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def index(self, name: str) -> int:
        """Position of attribute ``name``; :class:`KeyError` if unknown."""
        return self._index[name]

    def attribute(self, name: str) -> Attribute:
        """The attribute called ``name``; :class:`KeyError` if unknown."""
        return self.attributes[self._index[name]]

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def named_like(self, name: str) -> tuple[str, ...]:
        """The attributes whose names equal ``name`` up to case."""
        return self._folded.get(name.lower(), ())

    def log10_size(self) -> float:
        """log10 of the number of points of the domain (it may not fit in a float)."""
        return sum(math.log10(a.size) for a in self.attributes)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Schema:
        """Build a schema from its JSON form: ``{"attributes": [{...}, ...]}``."""
        if not isinstance(d, Mapping) or "attributes" not in d:
            raise SchemaError('a schema is an object with an "attributes" list')
        raw = d["attributes"]
        if not isinstance(raw, Sequence) or isinstance(raw, str):
            raise SchemaError('"attributes" must be a list')
        attrs = []
        for i, a in enumerate(raw):
            if not isinstance(a, Mapping):
                raise SchemaError(f"attribute {i} must be an object")
            name = a.get("name")
            if not isinstance(name, str) or not name:
                raise SchemaError(f"attribute {i} needs a non-empty string 'name'")
            kind = a.get("type")
            if kind == "integer":
                extra = set(a) - {"name", "type", "min", "max", "ordered", "missing"}
                if "min" not in a or "max" not in a:
                    raise SchemaError(f"attribute {name!r}: an integer needs 'min' and 'max'")
                if a.get("ordered", True) is not True:
                    raise SchemaError(f"attribute {name!r}: integer attributes are ordered")
                attr = Attribute(
                    name, "integer", min=a["min"], max=a["max"], missing=a.get("missing")
                )
            elif kind == "categorical":
                extra = set(a) - {"name", "type", "values", "ordered", "missing"}
                values = a.get("values")
                if not isinstance(values, Sequence) or isinstance(values, str):
                    raise SchemaError(f"attribute {name!r}: 'values' must be a list of strings")
                ordered = a.get("ordered", False)
                if not isinstance(ordered, bool):
                    raise SchemaError(f"attribute {name!r}: 'ordered' must be true or false")
                attr = Attribute(
                    name,
                    "categorical",
                    values=tuple(values),
                    ordered=ordered,
                    missing=a.get("missing"),
                )
            else:
                raise SchemaError(
                    f"attribute {name!r}: unknown type {kind!r} "
                    "(expected 'integer' or 'categorical')"
                )
            if extra:
                raise SchemaError(f"attribute {name!r}: unknown key {sorted(extra)[0]!r}")
            attrs.append(attr)
        return cls(tuple(attrs))

    @classmethod
    def of(cls, schema: object) -> Schema:
        """A schema given as a :class:`Schema`, a path to its JSON file, or its
        dictionary (the form :meth:`from_dict` reads); anything else is an error."""
        if isinstance(schema, Schema):
            return schema
        if isinstance(schema, str | Path):
            return cls.load(schema)
        if isinstance(schema, Mapping):
            return cls.from_dict(schema)
        raise SchemaError(
            "schema must be a Schema, a path to a JSON schema or a dictionary, "
            f"got {type(schema).__name__}"
        )

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema from a JSON file; errors name the file."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as err:
            raise SchemaError(f"{p}: cannot read schema: {err.strerror or err}") from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as err:
            raise SchemaError(f"{p}:{err.lineno}: invalid JSON: {err.msg}") from None
        try:
            return cls.from_dict(d)
        except SchemaError as err:
            raise SchemaError(f"{p}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form read by :meth:`from_dict`."""
        return {"attributes": [a.to_dict() for a in self.attributes]}
