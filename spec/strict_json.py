"""Strict JSON, read the same way in Python and in the JVM.

"JSON" means RFC 8259 JSON in UTF-8: no NaN/Infinity, no duplicate keys, no lone UTF-16 surrogate
escapes ("\\ud800"), nothing after the value, numbers of at most 1,000 characters and nesting of at most
~1,000 levels (Jackson's limits; Python's recursion limit is a little lower, so depths of ~950-1,000 are
the one known disagreement). An integer is a JSON integer literal that fits in 64 bits: booleans, 1.0,
1e3 and larger integers are not integers.

`loads_strict` is the Python reference (the parsers' executable specs use it);
jvm/src/main/java/io/streamfold/json/StrictJson.java is the same reading for the parsers that run in the
job. The parsers' differential fuzz test (tests/unit/test_parsers_spark.py) holds the two to each other.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn, TypeGuard

# Jackson's default StreamReadConstraints.maxNumberLength (StrictJson.MAX_NUMBER_CHARS).
MAX_NUMBER_CHARS = 1000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


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
