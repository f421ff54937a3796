"""The join's settings (`streamfold run --conf join.*`, docs/contracts.md "streamfold run --conf") and the
duration syntax they and trigger.interval use."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

EVENT_TIME = "event_time"
LATEST = "latest"
MODES = (EVENT_TIME, LATEST)

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def parse_duration_ms(text: str) -> int:
    """'500ms', '10s', '5m', '2h', '7d' -> milliseconds."""
    match = _DURATION.match(text.lower())
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 10s, 5m, 2h, 7d)")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


@dataclass(frozen=True)
class JoinConfig:
    mode: str = EVENT_TIME
    max_wait_ms: int = 10_000
    version_retention_ms: int = 7 * _UNIT_MS["d"]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"join.mode must be one of {MODES}, got {self.mode!r}")
        if self.max_wait_ms < 0 or self.version_retention_ms <= 0:
            raise ValueError("join.max_wait must be >= 0 and join.version_retention > 0")

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> JoinConfig:
        """Reads join.mode, join.max_wait and join.version_retention; missing keys keep the defaults."""
        defaults = cls()
        return cls(
            mode=conf.get("join.mode", defaults.mode),
            max_wait_ms=_duration_or(conf, "join.max_wait", defaults.max_wait_ms),
            version_retention_ms=_duration_or(conf, "join.version_retention", defaults.version_retention_ms),
        )


def _duration_or(conf: Mapping[str, str], key: str, default: int) -> int:
    return parse_duration_ms(conf[key]) if key in conf else default
