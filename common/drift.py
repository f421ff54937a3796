"""Why a carried column of a change is unknown (schema drift): the reason texts the CDC fold gives
(spec/envelopes.py; the same words in jvm/.../cdc/ProfileValues.java), which db/capture.py finds again in
the profile history's `incomplete`. Here, at the ground floor, so both read one copy."""

from __future__ import annotations

# How each drifted column's reason ends: a column the change lacks, or holds with another type.
RENAMED = "renamed or dropped?"
RETYPED = "retyped?"
ENDINGS = (RENAMED, RETYPED)

MISSING = f"missing from the change event: {RENAMED}"


def retyped(kind: str, expected: str) -> str:
    """A column whose value is of a JSON `kind` its type (`expected`, said in words) cannot take."""
    return f"{kind} in the change event where the column takes {expected}: {RETYPED}"
