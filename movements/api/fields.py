"""Strict input fields: the value must already have the JSON type the schema declares.

DRF's own fields coerce (``100`` becomes ``"100"``, ``"5"`` becomes ``5``). For money and
identifiers that hides client bugs, and it makes the server accept what the published schema
says it refuses, so these fields refuse any value of the wrong JSON type instead.
"""

import json
import math
import re
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from qtg.core.venues import canonical_venue, is_chain_address

# A positive amount below 1e20 with at most 18 decimal places, in plain digits: "100",
# "100.50", "0.000001". No sign, exponent, leading zeros, whitespace or JSON number.
# Patterns are anchored with \A and \Z (``$`` would let a trailing newline through);
# drf-spectacular publishes them with ECMA anchors, so the schema states exactly what the
# server accepts.
AMOUNT_PATTERN_EXACT = r"\A(?:[1-9][0-9]{0,19}(?:\.[0-9]{1,18})?|0\.(?=[0-9]*[1-9])[0-9]{1,18})\Z"
# SQLite keeps a decimal column as a REAL when it can: only 15 significant digits survive, and
# longer amounts would be rounded silently (or fail to read back). On SQLite the API therefore
# takes at most 15 digits (an integer part >= 1), or "0." and up to 18 decimal places of which
# at most 15 are significant.
AMOUNT_PATTERN_SQLITE = (
    r"\A(?:(?:(?=[0-9]{1,15}\Z)|(?=[0-9]*\.[0-9]+\Z)(?=[0-9.]{1,16}\Z))[1-9][0-9]*(?:\.[0-9]+)?"
    r"|0\.(?=[0-9]{1,18}\Z)(?=0*[1-9][0-9]{0,14}\Z)[0-9]+)\Z"
)
AMOUNT_PATTERN = AMOUNT_PATTERN_EXACT if settings.DB_IS_POSTGRES else AMOUNT_PATTERN_SQLITE
ASSET_PATTERN = r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,31}\Z"
VENUE_PATTERN = r"\A[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}\Z"
NODE_KEY_PATTERN = r"\A[a-z][a-z0-9_]{0,63}\Z"
TEMPLATE_KEY_PATTERN = r"\A[a-z][a-z0-9_]{0,63}\Z"
TEMPLATE_EXAMPLES = ["cex_to_cex", "evm_transfer"]
VENUE_EXAMPLES = ["sandbox-exchange-a", "treasury", "0x52908400098527886E0F7030069857D2E4169EE7"]
NOT_BLANK_PATTERN = r"\A[\s\S]*\S[\s\S]*\Z"
# Visible ASCII: safe in an HTTP header, in logs and in the database. The IETF draft sends the
# key as a structured-field string ("..."): the quoted form means the same key without quotes.
IDEMPOTENCY_KEY_PATTERN = r'\A(?:[!-~]{1,255}|"[ !#-\[\]-~]{1,255}")\Z'
QUOTED_IDEMPOTENCY_KEY = re.compile(r'\A"([ !#-\[\]-~]{1,255})"\Z')


def idempotency_key_value(header: str) -> str:
    """The key a header carries: the string inside the quotes of the quoted form."""
    quoted = QUOTED_IDEMPOTENCY_KEY.match(header)
    return quoted.group(1) if quoted else header


MAX_PARAMS_DEPTH = 16


def ecma(pattern: str) -> str:
    """The pattern as an OpenAPI (ECMA 262) regular expression."""
    return pattern.replace(r"\A", "^").replace(r"\Z", "$")


def storable_text_problem(value: str) -> str | None:
    """Why a string cannot be stored as text (PostgreSQL refuses NUL; UTF-8 refuses lone
    surrogates), or None when it can."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def json_value_problem(value: Any, depth: int = 0) -> str | None:
    """Why a parsed JSON value cannot be stored in a JSON column, or None when it can."""
    if depth > MAX_PARAMS_DEPTH:
        return f"nests deeper than {MAX_PARAMS_DEPTH} levels"
    if isinstance(value, str):
        return storable_text_problem(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "numbers must be finite"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = storable_text_problem(key) or json_value_problem(item, depth + 1)
            if problem:
                return problem
    if isinstance(value, list):
        for item in value:
            problem = json_value_problem(item, depth + 1)
            if problem:
                return problem
    return None


class StrictCharField(serializers.CharField):
    """A JSON string, matched whole against ``pattern`` when one is given."""

    default_error_messages = {"invalid": "Must be a JSON string."}

    def __init__(self, *, pattern: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        if pattern:
            self.validators.append(
                RegexValidator(re.compile(pattern), message=f"Does not match {ecma(pattern)}.")
            )

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        problem = storable_text_problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not a string, a float or a boolean): ``60.0`` is refused too, though
    JSON Schema counts it as an integer (contract 1.0)."""

    default_error_messages = {"invalid": "Must be a JSON integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean (not "true", 1 or "yes")."""

    default_error_messages = {"invalid": "Must be a JSON boolean."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class JSONObjectField(serializers.DictField):
    """A JSON object of any values that can be stored as they are."""

    default_error_messages = {"not_a_dict": "Must be a JSON object."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.JSONField(), **kwargs)

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        problem = json_value_problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        limit = settings.QTG_API_MAX_PARAMS_BYTES
        size = len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
        if size > limit:
            raise serializers.ValidationError(f"larger than {limit} bytes of JSON ({size})")
        return dict(data)


class VenueField(serializers.ChoiceField):
    """A known venue (``QTG_KNOWN_VENUES``), given in any spelling of its canonical name (case, a
    trailing dot): the value is the canonical name. The schema lists the canonical names."""

    default_error_messages = {
        "invalid": "Must be a JSON string.",
        "invalid_choice": "Unknown venue {input!r}.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[], **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if is_chain_address(data):
            # A wallet on a chain: where money may go is the address book's question.
            return canonical_venue(data)
        return super().to_internal_value(canonical_venue(data))


class VenueFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of a venue: a string (never an enum of the venues this deployment knows:
    they are read at run time, ``GET /api/v1/venues/``), with its pattern and examples."""

    target_class = VenueField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {
            "type": "string",
            "pattern": ecma(VENUE_PATTERN),
            "examples": VENUE_EXAMPLES,
        }


class TemplateKeyField(serializers.CharField):
    """The key of an active route template: a string matching ``TEMPLATE_KEY_PATTERN``,
    checked against the templates at run time."""

    default_error_messages = {
        "invalid": "Must be a JSON string.",
        "unknown": "Unknown route template {input!r}: GET /api/v1/templates/ lists them.",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        from movements.services.templates import route_template_current

        if not isinstance(data, str):
            self.fail("invalid")
        if not re.search(TEMPLATE_KEY_PATTERN, data) or route_template_current(data) is None:
            self.fail("unknown", input=data)
        return data


class TemplateKeyFieldSchema(OpenApiSerializerFieldExtension):
    target_class = TemplateKeyField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {
            "type": "string",
            "pattern": ecma(TEMPLATE_KEY_PATTERN),
            "examples": TEMPLATE_EXAMPLES,
        }
