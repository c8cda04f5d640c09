"""What a body the service cannot read gets told: one line that says what to change.

FastAPI reports a body it cannot turn into the route's model as a list of pydantic
errors (``{"type": "json_invalid", "loc": ("body", 37), ...}``); read as is, they say
"37: JSON decode error" or a bare "Field required". :func:`describe` turns the first of
them into a sentence that names the field (or the line and column of broken JSON),
what it must be, what was sent, and, for an empty body or an unknown field, the fields
the route takes. Everything it repeats comes from the request itself and the route's
public model, never from the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

#: What each pydantic error type asks for, in the API's words (JSON types).
_WANTS = {
    "string_type": "must be text",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "list_type": "must be a list",
    "bool_type": "must be true or false",
    "dict_type": "must be an object",
    "model_attributes_type": "must be an object",
}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the text {shown!r}"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _fields(model: type[BaseModel] | None) -> str:
    """The route's fields, the required ones first: ``attribute (required), bins, ...``."""
    if model is None:
        return ""
    names: list[str] = []  # the route's own fields first, then the shared cost fields
    for cls in model.__mro__:
        names += [n for n in vars(cls).get("__annotations__", {}) if n in model.model_fields]
    names = list(dict.fromkeys(names))
    required = [n for n in names if model.model_fields[n].is_required()]
    optional = [n for n in names if not model.model_fields[n].is_required()]
    return ", ".join([f"{n} (required)" for n in required] + optional)


def _where(loc: Sequence[Any]) -> str:
    """A field's path: ``bins[1]`` (a union's member tag, such as ``float``, left out)."""
    name = str(loc[0])
    return name + "".join(f"[{i}]" for i in loc[1:] if isinstance(i, int))


def _position(body: object, at: int) -> str:
    """``line L, column C`` of character ``at`` of the body (when it is known)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if not isinstance(text, str) or not 0 <= at <= len(text):
        return f"character {at}"
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return f"line {line}, column {column}"


def describe(
    errors: Sequence[Mapping[str, Any]], model: type[BaseModel] | None, body: object = None
) -> tuple[str, str]:
    """``(field, message)`` for the first validation error: ``field`` is the top-level
    field it concerns ("" for the body as a whole), ``message`` one line."""
    first = errors[0] if errors else {}
    kind = str(first.get("type", ""))
    loc = tuple(first.get("loc", ()))
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]  # where the field was sent: its name says enough
    fields = _fields(model)
    if kind == "json_invalid":
        at = loc[0] if loc and isinstance(loc[0], int) else 0
        why = str((first.get("ctx") or {}).get("error", "")).strip() or "invalid JSON"
        return "", (
            f"the body is not valid JSON at {_position(body, at)}: {why[0].lower() + why[1:]}; "
            "send one JSON object"
        )
    if not loc:  # the body as a whole: missing, empty, null, or not an object
        if kind == "missing":
            return "", f"the body is empty: send a JSON object with the fields {fields}"
        got = _json_type(first.get("input"))
        return "", f"the body must be a JSON object with the fields {fields}; got {got}"
    field = str(loc[0]) if not isinstance(loc[0], int) else ""
    where = _where(loc) if field else str(loc[0])
    if kind == "missing":
        return field, f"{where}: a required field is missing; the fields are {fields}"
    if kind == "extra_forbidden":
        return field, f"{where}: unknown field; the fields are {fields}"
    want = _WANTS.get(kind)
    if want is None:
        msg = str(first.get("msg", "")).strip() or "is invalid"
        want = "must be " + msg[16:] if msg.startswith("Input should be ") else msg
    return field, f"{where}: {want}, got {_json_type(first.get('input'))}"


def body_model(route: object) -> type[BaseModel] | None:
    """The pydantic model of a FastAPI route's body (None if it takes none)."""
    field = getattr(route, "body_field", None)
    info = getattr(field, "field_info", None)
    model = getattr(info, "annotation", None) or getattr(field, "type_", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None
