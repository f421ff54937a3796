"""Strict JSON, read the same way in Python and in Spark's native functions.

"JSON" means RFC 8259 JSON in UTF-8: no NaN/Infinity, no duplicate keys, no lone UTF-16 surrogate
escapes ("\\ud800"), nothing after the value, numbers of at most 1,000 characters and nesting of at most
~1,000 levels (Jackson's limits; Python's recursion limit is a little lower, so depths of ~950-1,000 are
the one known disagreement). An integer is a JSON integer literal that fits in 64 bits: booleans, 1.0,
1e3 and larger integers are not integers.

`loads_strict` is the Python reference (the parsers' executable specs use it); `with_json`, `json_type`
and `shown` are the same reading in Spark's functions, for the parsers that run in the job. The parsers'
differential fuzz test (tests/unit/test_parsers_spark.py) holds the two to each other.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn, TypeGuard

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Jackson's default StreamReadConstraints.maxNumberLength, which Spark's JSON parser enforces.
MAX_NUMBER_CHARS = 1000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MALFORMED = (
    "not JSON: malformed, trailing data, a duplicate key, NaN/Infinity, nesting deeper than "
    f"1000 or a number longer than {MAX_NUMBER_CHARS} characters"
)


def loads_strict(raw: bytes) -> Any:
    """Strict JSON in UTF-8 (see the module docstring); ValueError says why not."""
    try:
        text = raw.decode("utf-8")
        obj = json.loads(
            text,
            object_pairs_hook=_no_duplicate_keys,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
            parse_float=_bounded_float,
        )
    except RecursionError:
        raise ValueError("nested too deeply") from None
    stack = [obj]
    while stack:  # no lone surrogates ("\ud800" escapes) anywhere, keys included
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("lone UTF-16 surrogate escape") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return obj


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"number longer than {MAX_NUMBER_CHARS} characters")
    return int(text)


def _bounded_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"number longer than {MAX_NUMBER_CHARS} characters")
    return float(text)


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer that fits in 64 bits (bool is not an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX


# --- in Spark -------------------------------------------------------------------------------------------
# Each helper refers to its expensive input once, or reads it from a column an earlier select made:
# Spark inlines a cheap column into every use, so a parse or a schema_of_variant referred to several
# times in one expression would run several times per record (and compile into huge generated code).


def with_json(frame: DataFrame, raw: str, name: str) -> DataFrame:
    """`frame` plus `name` (binary column `raw` parsed as a VARIANT, NULL unless strict JSON) and
    `name`_error (why it is not strict JSON, NULL when it is, and for a NULL `raw`).

    Spark's parse_json refuses duplicate keys, NaN, nesting > 1000 and numbers > 1000 digits, but
    ignores anything after the first value: the value is parsed twice, inside `[...]` and inside
    `{"v": ...}`. Trailing data can close only one kind of bracket early, so both parse to exactly one
    value only when nothing follows it.
    """
    text = F.col(raw).cast("string")
    staged = frame.select(
        "*",
        F.try_parse_json(F.concat(F.lit("["), text, F.lit("]"))).alias("_json_array"),
        F.try_parse_json(F.concat(F.lit('{"v":'), text, F.lit("}"))).isNull().alias("_json_object_failed"),
    )
    # Lone surrogate escapes: drop escaped backslashes, then valid pairs; any surrogate escape left is lone.
    surrogate = r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
    unpaired = F.regexp_replace(
        F.regexp_replace(text, r"\\\\", ""),
        r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}",
        "",
    )
    array = F.col("_json_array")
    error = (
        F.when(F.col(raw).isNull(), F.lit(None))
        .when(~F.call_function("is_valid_utf8", text), "not JSON: invalid UTF-8")
        .when(
            array.isNull()
            | F.col("_json_object_failed")
            | F.try_variant_get(array, "$[0]", "variant").isNull()
            | F.try_variant_get(array, "$[1]", "variant").isNotNull(),
            MALFORMED,
        )
        .when(
            # The substring test first: a plain search, where the regexes would scan every record.
            (text.contains("\\ud") | text.contains("\\uD"))
            & text.rlike(surrogate)
            & unpaired.rlike(surrogate),
            "not JSON: lone UTF-16 surrogate escape",
        )
    )
    checked = staged.select("*", error.alias(f"{name}_error"))
    value = F.when(
        F.col(raw).isNotNull() & F.col(f"{name}_error").isNull(), F.try_variant_get(array, "$[0]", "variant")
    )
    return checked.select(*frame.columns, value.alias(name), f"{name}_error")


def json_type(value: Column) -> Column:
    """The JSON type of a VARIANT in words (NULL for NULL): object, array, string, integer (one that
    fits in 64 bits), number, boolean or null. One schema_of_variant, looked up in a map."""
    types = F.create_map(
        *(
            F.lit(word)
            for pair in (
                ("OBJ", "object"),
                ("ARR", "array"),
                ("STR", "string"),
                ("BIG", "integer"),
                ("BOO", "boolean"),
                ("VOI", "null"),
                ("-", "-"),
            )
            for word in pair
        )
    )
    prefix = F.coalesce(F.substring(F.schema_of_variant(value), 1, 3), F.lit("-"))
    return F.nullif(F.coalesce(F.try_element_at(types, prefix), F.lit("number")), F.lit("-"))


def container_type(value: Column) -> Column:
    """json_type for a value that is usually an object (an envelope, a row): an object is told by a cast
    to an empty struct, which reads nothing, where schema_of_variant would spell out the whole object's
    schema only to keep three letters."""
    return F.when(F.try_variant_get(value, "$", "struct<>").isNotNull(), F.lit("object")).otherwise(
        json_type(value)
    )


def barrier(frame: DataFrame, column: str) -> DataFrame:
    """`frame` with `column` made nondeterministic (same values), so no filter on it moves below here.

    The parsers derive `error` and `kind` through stacked selects. A later filter on them
    (`error IS NULL`, in the topology or a sink) would be pushed below those selects with every alias
    inlined into it, which multiplies the expressions: generated code past the JVM's 64 KB method
    limit, recompiled (and failing) every micro-batch, and the parse run twice. Spark pushes a filter
    only through projections whose expressions are all deterministic; spark_partition_id() is not.
    """
    return frame.withColumn(column, F.when(F.spark_partition_id() >= 0, F.col(column)))


def shown(value: Column) -> Column:
    """A field's value for a reason: its JSON text (cut at 200 characters), or 'missing'."""
    return F.coalesce(F.substring(F.to_json(value), 1, 200), F.lit("missing"))
