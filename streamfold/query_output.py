"""`streamfold query`'s output, printed as the rows arrive: a drawn table of the first rows, or CSV or
JSON lines of every row (for machines). Each returns how many rows it printed and whether it stopped
before the last."""

from __future__ import annotations

import csv
import itertools
import json
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.table import Table


def table(columns: list[str], rows: Iterator[tuple], cap: int, title: str | None) -> tuple[int, bool]:
    """The first `cap` rows (0: all) as one table: drawing it needs them all in memory, hence the cap."""
    drawn = Table(*columns, title=title)
    printed = 0
    for row in _capped(rows, cap):
        drawn.add_row(*(_text(v) for v in row))
        printed += 1
    cut = _cut(rows, printed, cap)
    Console(width=200 if not sys.stdout.isatty() else None).print(drawn)
    return printed, cut


def lines(fmt: str, columns: list[str], rows: Iterator[tuple], cap: int) -> tuple[int, bool]:
    """CSV (a header line, then a line per row) or JSON lines (an object per row), each row written as
    it arrives."""
    out = sys.stdout
    writer = csv.writer(out, lineterminator="\n")
    if fmt == "csv":
        writer.writerow(columns)
    printed = 0
    for row in _capped(rows, cap):
        if fmt == "csv":
            writer.writerow([_text(v) for v in row])
        else:  # what JSON has no type for (numeric, bytea) as its exact text
            out.write(json.dumps(dict(zip(columns, row, strict=True)), default=_text) + "\n")
        printed += 1
    out.flush()
    return printed, _cut(rows, printed, cap)


def _capped(rows: Iterator[tuple], cap: int) -> Iterator[tuple]:
    return itertools.islice(rows, cap) if cap > 0 else rows


def _cut(rows: Iterator[tuple], printed: int, cap: int) -> bool:
    """Whether rows remain after the cap."""
    return cap > 0 and printed == cap and next(rows, None) is not None


def _text(value: Any) -> str:
    """A value as PostgreSQL prints it: bytea in hex, null as nothing."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    return str(value)
