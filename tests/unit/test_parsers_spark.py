"""Differential fuzz: the Spark-native parsers agree with their pure-Python references, record by record.

One seeded generator makes a few thousand click payloads (valid ones, each kind of invalid one, random
bytes, nested junk, unicode, huge numbers) and Debezium envelopes; each set runs through Spark as ONE
DataFrame, and every row must match `parse_event` (the default event spec) / `parse_envelope`: accept or
reject, the parsed fields, and the category of the reason. Another makes random event specs (field names,
types, required flags, key type, time format, count or none, limits) and payloads for each, valid and not:
a few specs per Spark job, every row again matched to `parse_event` with its spec.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from common import names, plan
from common import pipeline_file as pf
from pipeline import cdc_fold, events, field_types
from pipeline.events import MAX_RECORD_BYTES
from spec.envelopes import MISSING, UNAVAILABLE, BadEnvelope, Change, Progress, Truncate, parse_envelope
from spec.events import ISO_TIME, MAX_MICROS, MIN_MICROS, Event, Rejected, parse_event

# The default pipeline file's event spec (the demo's clicks).
DEFAULT_EVENT_SPEC = plan.of(pf.load()).event_spec

pytestmark = pytest.mark.spark

NOW = 1_763_800_000_000
SEED = 20261122
GOOD = {"userid": "User_1", "url": "/home", "device_id": "mobile", "ip": "10.0.0.1", "event_time": NOW - 5}
# The reason's category: its words up to the offending value.
CLICK_CATEGORIES = (
    "empty record",
    "exceeds the",
    "not JSON",
    "expected a JSON object",
    "clicks must be",
    "userid must be",
    "userid of",
    "url must be",
    "device_id must be",
    "ip must be",
    "event_time must be",
    "is outside the plausible range",
)
CDC_CATEGORIES = (
    "heartbeat with a null value",
    "heartbeat is not JSON",
    "heartbeat is not a JSON object",
    "heartbeat.ts_ms must be",
    "heartbeat.ts_ms is outside",
    "change event of",
    "change event is not JSON",
    "change event is not a JSON object",
    "not a Debezium row change",
    "source.ts_ms must be",
    "userid of",
    "after.regionid of",
    "source.ts_ms is outside",
    "source.lsn must be",
    "without an 'after' row",
    "'before' is not an object",
    "without a userid",
    "Debezium's unavailable-value placeholder",
)
CATEGORIES = (*CDC_CATEGORIES, *CLICK_CATEGORIES)


def parse_click(payload: bytes | None, now_ms: int) -> Event:
    return parse_event(payload, now_ms, DEFAULT_EVENT_SPEC)


def category(reason: str) -> str:
    found = [c for c in CATEGORIES if c in re.sub(r"ts_ms -?\d+ is outside", "ts_ms is outside", reason)]
    assert found, reason
    return found[0]


def junk_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(12 if depth < 4 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, 1, -1, 7, 2**31, 2**63 - 1, -(2**63), 2**63, 10**30, NOW, NOW + 10**6])
    if kind == 3:
        return rng.choice([0.0, 1.0, 1.5, -2.25, 1e300, float(NOW)])
    if kind in (4, 5, 6, 7):
        return rng.choice(
            ["", " ", "\t\n", "\u3000", "\xa0", "\u200b", "x", " a ", "é", "日本", "😀", "\x00"]
        )
    if kind in (8, 9):
        return [junk_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice(["a", "userid", "clicks", "é"]): junk_value(rng, depth + 1)
        for _ in range(rng.randrange(4))
    }


# Around common.limits.MAX_KEY_BYTES (1,024 UTF-8 bytes): ASCII, 2-byte and 4-byte characters (a surrogate
# pair in Java, escaped as two \u escapes by json.dumps(ensure_ascii=True)).
LONG_KEYS = ("u" * 1024, "u" * 1025, "é" * 512, "é" * 513, "😀" * 256, "😀" * 256 + "u", "日" * 5000)


def click_payloads(rng: random.Random) -> list[bytes | None]:
    out: list[bytes | None] = [
        None,
        b"",
        b" ",
        b"null",
        b"[]",
        b"{}",
        b"1",
        b'"x"',
        b"true",
        b"\xef\xbb\xbf{}",
    ]
    fields = (*GOOD, "clicks")
    for _ in range(1500):
        obj: dict[str, Any] = dict(GOOD)
        if rng.random() < 0.3:
            obj["clicks"] = rng.choice([1, 2, 1_000_000, 1_000_001, 0, -1, 3])
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            field = rng.choice(fields)
            if rng.random() < 0.2:
                obj.pop(field, None)
            else:
                obj[field] = junk_value(rng)
        if rng.random() < 0.05:
            obj["event_time"] = rng.choice([NOW + 60_000, NOW + 60_001, 946_684_800_000, 946_684_799_999])
        if rng.random() < 0.05:
            obj["userid"] = rng.choice(LONG_KEYS)
        text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
        mutation = rng.randrange(20)
        if mutation == 0:
            text = text[: rng.randrange(len(text) + 1)]  # truncated
        elif mutation == 1:
            text += rng.choice([" ", "\n", " x", "}", "]", ", 1", '{"a":1}', "]}", "\t\r\n"])
        elif mutation == 2:
            text = text.replace('"url"', '"url": "dup", "url"', 1)
        elif mutation == 3:
            text = text.replace('"ip": ', '"ip": "\\ud800", "x": ', 1)  # a lone surrogate in a key's value
        elif mutation == 4:
            text = text.replace('"ip": ', '"pad": "\\ud83d\\ude00\\\\ud800", "ip": ', 1)  # a valid pair
        elif mutation == 5:
            text = text.replace('"ip": ', '"n": NaN, "ip": ', 1)
        elif mutation == 6:
            text = text.replace('"ip": ', '"n": ' + "9" * rng.choice([30, 999, 1001, 5000]) + ', "ip": ', 1)
        elif mutation == 7:
            depth = rng.choice([5, 50, 5000])
            text = text.replace('"ip": ', '"deep": ' + "[" * depth + "]" * depth + ', "ip": ', 1)
        elif mutation == 8:
            text = text.replace('"event_time": ', '"event_time": 1.0e0 + ', 1)
        elif mutation == 9:
            text = "[" + text + "]"
        raw = text.encode("utf-8", "surrogatepass")
        if mutation == 10:
            cut = rng.randrange(len(raw))
            raw = raw[:cut] + bytes([rng.randrange(256)]) + raw[cut + 1 :]  # one random byte
        elif mutation == 11:
            raw = raw.replace(b'"mobile"', b'"mob\xffile"', 1)
        out.append(raw)
    for _ in range(200):
        out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(40))))
    for _ in range(200):
        out.append(json.dumps(junk_value(rng)).encode())
    out.append(b'{"pad": "' + b"x" * MAX_RECORD_BYTES + b'"}')
    out.append(json.dumps({**GOOD, "pad": "x" * (MAX_RECORD_BYTES - 120)}).encode())
    out.append(json.dumps({**GOOD, "event_time": 1700000000000.0}).encode())
    out.append(json.dumps({**GOOD, "clicks": 1.0}).encode())
    out.append(json.dumps({**GOOD, "clicks": True}).encode())
    out.append(json.dumps({**GOOD, "clicks": None}).encode())
    out.append(json.dumps({**GOOD, "userid": "\u2028\x1c "}).encode())
    out.append(json.dumps({**GOOD, "userid": "\u200b"}).encode())
    out.extend(plain_path_edges())
    return out


def plain_path_edges() -> list[bytes]:
    """Near-valid clicks aimed at the JVM fast path (PlainEvent): each must be rejected, or accepted with
    the fields parse_click gives."""
    good = json.dumps(GOOD)
    body = good[1:-1]
    edges = [
        "\ufeff" + good,  # a byte order mark (Jackson skips one in a byte source)
        " \t\r\n" + good + " \n",
        "\x0c" + good,
        good.replace("/home", "/ho\x01me"),  # a raw control character in a string
        "{" + body + ', "x": {"a": 1, "a": 2}}',  # a duplicate key below the top level
        "{" + body + ', "x": [1e400, -0.0, 0.5e-400, true, null, {}]}',
        "{" + body + ', "x": ' + "9" * 100 + "}",
        "{" + body + ', "x": ' + "9" * 101 + "}",
        "{" + body + ', "x": ' + "[" * 32 + "]" * 32 + "}",
        "{" + body + ', "x": ' + "[" * 33 + "]" * 33 + "}",
        "{" + body + ', "x": ' + "[" * 33 + "]" * 32 + "}",
        good.replace(f"{NOW - 5}", f"0{NOW - 5}"),
        good.replace(f"{NOW - 5}", f"+{NOW - 5}"),
        good.replace(f"{NOW - 5}", f"{NOW - 5}.0"),
        good.replace(f"{NOW - 5}", f"{(NOW - 5) // 1000}e3"),
        "{" + body + ', "clicks": -0}',
        "{" + body + ', "clicks": 1000000}',
        "{" + body + ', "clicks": 1000001}',
        "{" + body + ', "clicks": 9223372036854775808}',
        good.replace("User_1", "\u3000\u2028"),
        good.replace("User_1", "\u200b\u3000"),
        good.replace("User_1", "日本\U0001f600"),
        good + ",",
        good[:-1] + ",}",
        good.replace(", ", " , "),
        good.replace('"url"', "'url'"),
        "{" + body + ", /* comment */ }",
    ]
    raw = [edge.encode("utf-8") for edge in edges]
    raw += [good.encode("utf-16-le"), good.encode("utf-16-be"), good.encode("utf-32-le")]
    raw += [
        good.replace("mobile", "mo\udc80bile").encode("utf-8", "surrogatepass"),  # an encoded surrogate
        good.encode().replace(b"mobile", b"mo\xc0\xafbile"),  # an overlong form
        good.encode().replace(b"mobile", b"mo\xf4\x90\x80\x80bile"),  # beyond U+10FFFF
    ]
    return raw


def test_blank_text_is_pythons_isspace(spark: SparkSession):
    """A userid of one character is blank to the JVM parser exactly when str.isspace() says so, for every
    character (non-BMP ones included; lone surrogates are not strict JSON)."""
    chars = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    rows = [(f"e{c}", "t", json.dumps({**GOOD, "userid": chr(c)}).encode(), NOW) for c in chars]
    frame = spark.createDataFrame(rows, "event_id string, source string, payload binary, now_ms long")
    parsed = events.parse(frame, DEFAULT_EVENT_SPEC)
    blank = {int(r["event_id"][1:]) for r in parsed.where("error IS NOT NULL").collect()}
    assert sorted(blank) == [c for c in chars if chr(c).isspace()]


def test_jvm_reasons_say_which_strict_json_rule_failed(spark: SparkSession):
    """A user reading dead_letters learns which rule a record broke (the fuzz tests check only that it was
    "not JSON")."""
    good = json.dumps(GOOD)
    cases = {
        "[" * 1001 + "]" * 1001: "not JSON: nesting deeper than 1000",
        good.replace('"/home"', "1" * 1001): "not JSON: number longer than 1000 characters",
        good.replace('"/home"', '"\\ud800"'): "not JSON: lone UTF-16 surrogate escape",
        good.replace("}", ', "url": "/x"}'): "not JSON: Duplicate field 'url'",
        good + " {}": "not JSON: trailing data",
    }
    payloads = [text.encode() for text in cases] + [good.encode().replace(b"/home", b"/\xff")]
    reasons = list(cases.values()) + ["not JSON: invalid UTF-8"]
    rows = [(f"e{i}", "t", p, NOW) for i, p in enumerate(payloads)]
    frame = spark.createDataFrame(rows, "event_id string, source string, payload binary, now_ms long")
    got = {r["event_id"]: r["error"] for r in events.parse(frame, DEFAULT_EVENT_SPEC).collect()}
    for i, reason in enumerate(reasons):
        assert got[f"e{i}"] is not None and got[f"e{i}"].startswith(reason), (reason, got[f"e{i}"])


def test_click_parser_agrees_with_parse_click(spark: SparkSession):
    kinds = check_clicks(spark, click_payloads(random.Random(SEED)))
    # The generator reaches every outcome.
    assert kinds.keys() >= {"valid", *CLICK_CATEGORIES}, kinds


def check_clicks(spark: SparkSession, payloads: list[bytes | None]) -> dict[str, int]:
    """Every payload through events.parse (one DataFrame) and parse_click must agree; returns the outcomes."""
    rows = [(f"e{i}", "kafka:clicks", p, NOW) for i, p in enumerate(payloads)]
    frame = spark.createDataFrame(rows, "event_id string, source string, payload binary, now_ms long")
    out = events.parse(frame, DEFAULT_EVENT_SPEC)
    assert tuple(out.columns) == events.parsed_columns(DEFAULT_EVENT_SPEC)
    got = {r["event_id"]: r for r in out.collect()}
    assert len(got) == len(payloads)
    kinds: dict[str, int] = {}
    for i, payload in enumerate(payloads):
        row = got[f"e{i}"]
        try:
            want = parse_click(payload, NOW)
        except Rejected as exc:
            assert row["error"] is not None, (payload, str(exc))
            assert category(row["error"]) == category(str(exc)), (payload, row["error"], str(exc))
            assert row["payload"] == payload and row["userid"] is None
            kinds[category(str(exc))] = kinds.get(category(str(exc)), 0) + 1
            continue
        assert row["error"] is None, (payload, row["error"])
        assert (row["userid"], row["url"], row["device_id"], row["ip"]) == (
            want.key,
            want.fields["url"],
            want.fields["device_id"],
            want.fields["ip"],
        ), payload
        assert (row["click_time_ms"], row["clicks"], row["payload"]) == (want.time_ms, want.count, None)
        kinds["valid"] = kinds.get("valid", 0) + 1
    return kinds


def register_plain_event(spark: SparkSession, name: str, spec: dict[str, Any]) -> None:
    """The fast path alone as a UDF of its own, for the tests that hold it to the spec."""
    plain = spark._jvm.io.streamfold.events.PlainEvent(json.dumps(spec))  # type: ignore[union-attr]
    events.register_java_udf(spark, name, plain, events.parse_type(spec))


def test_plain_click_fast_path_accepts_only_what_parse_click_accepts(spark: SparkSession):
    """The JVM fast path never accepts a reject, returns parse_click's fields, and takes the plain clicks."""
    payloads = [json.dumps(GOOD).encode(), *click_payloads(random.Random(SEED + 1))]
    frame = spark.createDataFrame(
        [(f"e{i}", p, NOW) for i, p in enumerate(payloads)], "event_id string, payload binary, now_ms long"
    )
    # The fast path returns EventParse's row (EventParse calls it first), or NULL.
    register_plain_event(spark, "plain_click", DEFAULT_EVENT_SPEC)
    plain = frame.select("event_id", F.call_function("plain_click", "payload", "now_ms").alias("p"))
    got = {r["event_id"]: r["p"] for r in plain.collect()}
    taken = valid = 0
    assert got["e0"] is not None
    for i, payload in enumerate(payloads):
        fast = got[f"e{i}"]
        try:
            want = parse_click(payload, NOW)
        except Rejected as exc:
            assert fast is None, (payload, str(exc), fast)
            continue
        valid += 1
        if fast is not None:
            taken += 1
            assert (fast.userid, fast.url, fast.device_id, fast.ip, fast.click_time_ms, fast.clicks) == (
                want.key,
                want.fields["url"],
                want.fields["device_id"],
                want.fields["ip"],
                want.time_ms,
                want.count,
            ), payload
    # Most valid clicks take the fast path (json.dumps escapes non-ASCII in about half of them).
    assert taken > valid // 3, (taken, valid)


ROW_KEYS = ("userid", "regionid", "gender", "interests", "registertime", "name")


def profile_row(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return junk_value(rng)
    row: dict[str, Any] = {
        "userid": rng.choice(["alice", "bob", "é日本", "alice", "bob", rng.choice(LONG_KEYS)]),
        "regionid": rng.choice(["asia", "europe", None, "asia", "europe", rng.choice(LONG_KEYS)]),
        "gender": rng.choice(["FEMALE", "MALE", None, "FEMALE", "MALE", UNAVAILABLE]),
        "interests": rng.choice(
            [["News"], [], None, ["a", None], ["News"], [], None, ["a", UNAVAILABLE], [UNAVAILABLE]]
        ),
        "registertime": rng.choice([1, 1_700_000_000_000, None]),
    }
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        field = rng.choice(ROW_KEYS)
        if rng.random() < 0.2:
            row.pop(field, None)
        else:
            row[field] = junk_value(rng)
    return row


def cdc_records(rng: random.Random) -> list[tuple[str, bytes | None, bytes | None]]:
    users = names.CDC_USERS_TOPIC
    out: list[tuple[str, bytes | None, bytes | None]] = [
        (users, b'{"userid":"alice"}', None),
        (users, None, b"[]"),
        (names.HEARTBEAT_TOPIC, None, None),
        (names.HEARTBEAT_TOPIC, None, b'{"ts_ms": 5}'),
        (names.HEARTBEAT_TOPIC, None, b'{"ts_ms": 9000000000000000000}'),
        (names.HEARTBEAT_TOPIC, None, b'{"ts_ms": -1}'),
        (names.HEARTBEAT_TOPIC, None, b'{"ts_ms": 5.0}'),
        (names.HEARTBEAT_TOPIC, None, b"[]"),
        (names.HEARTBEAT_TOPIC, None, b"{"),
        # An incremental snapshot's read: valid from its ts_ms, not from the beginning of time.
        (
            users,
            b'{"userid":"inc"}',
            b'{"op": "r", "after": {"userid": "inc", "regionid": "x"}, '
            b'"source": {"ts_ms": 7, "lsn": 3, "snapshot": "incremental"}}',
        ),
        (
            users,
            b'{"userid":"big"}',
            b'{"op": "c", "after": {"userid": "big", "regionid": "%s"}, "source": {"ts_ms": 1}}'
            % (b"r" * cdc_fold.MAX_CHANGE_BYTES),
        ),
    ]
    for _ in range(1500):
        op = rng.choice(["c", "u", "d", "r", "c", "u", "d", "r", "t", "x", None, 1])
        source: Any = {
            "connector": "postgresql",
            "schema": "public",
            "table": "users",
            # The ends of the commit-time range and beyond (cdc_fold.MAX_COMMIT_MS).
            "ts_ms": rng.choice([1_000, NOW, 0, -5, 253_402_300_799_999, 253_402_300_800_000, 9 * 10**18]),
            "lsn": rng.choice([42, 2**40, None]),
        }
        heartbeat_row = rng.random() < 0.15
        if heartbeat_row:
            source["schema"], source["table"] = cdc_fold.HEARTBEAT_SCHEMA, cdc_fold.HEARTBEAT_TABLE
        if rng.random() < 0.15:
            source[rng.choice(["ts_ms", "lsn", "schema", "table"])] = junk_value(rng)
        if rng.random() < 0.03:
            source = junk_value(rng)
        envelope: dict[str, Any] = {
            "before": profile_row(rng) if op == "d" or rng.random() < 0.3 else None,
            "after": None if op == "d" else profile_row(rng),
            "op": op,
            "source": source,
            "ts_ms": NOW,
        }
        if heartbeat_row:
            envelope["after"] = {"id": 1, "ts": "2026-11-22T15:00:00Z"}
        if rng.random() < 0.05:
            envelope.pop(rng.choice(["before", "after", "op", "source"]))
        text = json.dumps(envelope)
        mutation = rng.randrange(25)
        if mutation == 0:
            text = text[: rng.randrange(len(text) + 1)]
        elif mutation == 1:
            text += rng.choice([" ", " x", "}", "]"])
        elif mutation == 2:
            text = text.replace('"op"', '"op": "c", "op"', 1)
        elif mutation == 3:
            text = text.replace('"op"', '"pad": "\\udc00", "op"', 1)
        raw = text.encode()
        if mutation == 4:
            raw = raw.replace(b'"ts_ms"', b'"ts\xc0ms"', 1)
        key_choice = rng.randrange(10)
        key: bytes | None = {
            0: None,
            1: b"",
            2: b'{"userid": ""}',
            3: b'{"userid": 5}',
            4: b"[1]",
            5: b'{"userid": "k\xff"}',
            6: b'{"id": 1}',
        }.get(key_choice, json.dumps({"userid": rng.choice(["alice", "kay"])}).encode())
        out.append((users, key, raw))
    for _ in range(100):
        out.append((names.HEARTBEAT_TOPIC, None, json.dumps({"ts_ms": junk_value(rng)}).encode()))
        out.append((users, None, bytes(rng.randrange(256) for _ in range(rng.randrange(30)))))
    return out


def test_cdc_fold_agrees_with_parse_envelope(spark: SparkSession):
    folded = check_envelopes(spark, cdc_records(random.Random(SEED)))
    kinds = folded.kinds
    outcomes = {k if k in ("change", "truncate", "progress", "skip") else category(k) for k in kinds}
    # The generator reaches every outcome, drift of every column (missing, or of another type) included.
    assert outcomes >= {"change", "truncate", "progress", "skip", *CDC_CATEGORIES}, kinds
    drift = {(name, reason == MISSING) for name, reason in drifted_columns(folded.changes, DEFAULT_SPEC)}
    columns = [c["name"] for c in DEFAULT_SPEC["columns"]]
    assert drift == {(name, missing) for name in columns for missing in (True, False)}, drift


def drifted_columns(changes: list[Change], spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(column, why) of each drifted column of each change."""
    return [(spec["columns"][i]["name"], why) for c in changes for i, why in c.drifted.items()]


def debezium_envelope(i: int) -> tuple[bytes, bytes]:
    """A change event as Debezium 3.4 writes it (JSON converter, schemas off), raw UTF-8."""
    op = "crud"[i % 4]
    row = {
        "userid": f"User_{i}é",
        "regionid": f"Region_{i % 9}",
        "gender": "OTHER",
        "interests": ["News", "日本"],
        "registertime": 1_500_000_000_000 + i,
    }
    envelope = {
        "before": row if op == "d" else None,
        "after": None if op == "d" else row,
        "source": {
            "version": "3.4.0.Final",
            "connector": "postgresql",
            "name": "cdc",
            "ts_ms": NOW - i,
            "snapshot": "true" if op == "r" else "false",
            "db": "streamfold",
            "sequence": '["24023928","24023928"]',
            "ts_us": (NOW - i) * 1000,
            "ts_ns": (NOW - i) * 1_000_000,
            "schema": "public",
            "table": "users",
            "txId": 755,
            "lsn": 24023928 + i,
            "xmin": None,
        },
        "transaction": None,
        "op": op,
        "ts_ms": NOW,
        "ts_us": NOW * 1000,
        "ts_ns": NOW * 1_000_000,
    }
    key = json.dumps({"userid": row["userid"]}, ensure_ascii=False).encode()
    return key, json.dumps(envelope, ensure_ascii=False).encode()


def test_plain_envelope_fast_path_folds_only_what_parse_envelope_folds(spark: SparkSession):
    """The JVM fast path never folds a dead letter, returns parse_envelope's fields, and takes Debezium's
    own change events."""
    users = names.CDC_USERS_TOPIC
    real = [(users, *debezium_envelope(i)) for i in range(40)]
    records = real + [r for r in cdc_records(random.Random(SEED + 1)) if r[0] == users]
    folded = check_envelopes(spark, records, fast=True)
    assert all(folded.fast[: len(real)]), "a Debezium change event missed the fast path"
    taken, valid = sum(folded.fast), folded.valid
    assert taken > len(real) + (valid - len(real)) // 10, (taken, valid)


DEFAULT_SPEC = plan.of(pf.load()).profile_spec


@dataclass
class Folded:
    """What check_envelopes saw: the outcomes (a kind, or a reject's reason), the changes, and per record
    whether the fast path folded it."""

    kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    changes: list[Change] = dataclasses.field(default_factory=list)
    fast: list[bool] = dataclasses.field(default_factory=list)
    valid: int = 0


def check_envelopes(
    spark: SparkSession,
    records: list[tuple[str, bytes | None, bytes | None]],
    spec: dict[str, Any] = DEFAULT_SPEC,
    fast: bool = False,
) -> Folded:
    """Every record through cdc_fold.fold_records (one DataFrame, one Spark job) and parse_envelope must
    agree: the kind, every field of the row, the reason up to the offending value. With `fast`, the fast
    path (PlainEnvelope) too: it folds only what parse_envelope folds, to the same row, or returns NULL."""
    rows = [(topic, key, value, f"r{i}") for i, (topic, key, value) in enumerate(records)]
    frame = spark.createDataFrame(rows, "topic string, key binary, value binary, event_id string")
    frame = frame.withColumn("i", F.monotonically_increasing_id())
    keep = ["i"]
    if fast:
        cdc_fold.register_java_udf(spark, "plain_envelope", "PlainEnvelope", spec)
        frame = frame.withColumn("fast", F.call_function("plain_envelope", "key", "value"))
        keep.append("fast")
    folded = cdc_fold.fold_records(frame, spec, *keep)
    assert tuple(folded.columns) == (*cdc_fold.folded_columns(spec), *keep)
    got = folded.collect()
    assert len(got) == len(records)
    width = len(cdc_fold.fold_type(spec).fields) - 1  # kind .. progress_ms
    out = Folded()
    for (topic, key, value), row in zip(records, got, strict=True):
        where = (topic, key, value, row)
        want: Change | Truncate | Progress | None = None
        try:
            want = parse_envelope(topic, key, value, spec)
        except BadEnvelope as exc:
            reason = str(exc)
            assert row["kind"] == "error" and row["error"] is not None, (*where, reason)
            assert reason_shape(row["error"]) == reason_shape(reason), (*where, reason)
            assert row["payload"] == value and row["event_id"] is not None, where
            assert all(v is None for v in tuple(row)[1:width]), where
            out.kinds[reason] = out.kinds.get(reason, 0) + 1
        else:
            assert row["error"] is None and row["event_id"] is None, where
            assert same(tuple(row)[:width], expected_row(want, spec)), (*where, want)
            out.kinds[row["kind"]] = out.kinds.get(row["kind"], 0) + 1
            if isinstance(want, Change):
                out.changes.append(want)
        if fast:
            plain = row["fast"] if topic != names.HEARTBEAT_TOPIC else None
            if plain is not None:
                assert row["kind"] in ("change", "progress"), (*where, "the fast path folded it")
                assert same(tuple(plain)[:width], tuple(row)[:width]) and plain[-1] is None, where
            out.valid += row["kind"] in ("change", "progress")
            out.fast.append(plain is not None)
    return out


def expected_row(want: Change | Truncate | Progress | None, spec: dict[str, Any]) -> tuple[Any, ...]:
    """The fold's row (kind .. progress_ms) parse_envelope's answer stands for."""
    nothing = (None,) * (len(spec["columns"]) + 2)  # the columns, unavailable and drifted
    if want is None:
        return ("skip", None, None, None, None, *nothing, None)
    if isinstance(want, Progress):
        return ("progress", None, None, None, None, *nothing, want.progress_ms)
    if isinstance(want, Truncate):
        return ("truncate", None, "t", want.valid_from_ms, want.lsn, *nothing, want.progress_ms)
    assert list(want.columns) == [c["name"] for c in spec["columns"]]
    return (
        "change",
        want.key,
        want.op,
        want.valid_from_ms,
        want.lsn,
        *want.columns.values(),
        list(want.unavailable) or None,
        [want.drifted.get(i) for i in range(len(spec["columns"]))] if want.drifted else None,
        want.progress_ms,
    )


def same(got: Any, want: Any) -> bool:
    """Equal and of the same type, a NaN equal to a NaN (a double column may hold one)."""
    if isinstance(got, float) and isinstance(want, float) and math.isnan(got) and math.isnan(want):
        return True
    if isinstance(got, list | tuple) and isinstance(want, list | tuple):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))
    return type(got) is type(want) and got == want


def reason_shape(reason: str) -> str:
    """A reason up to where Python's and the JVM's words may differ: how each shows the offending value,
    the JSON parsers' own words."""
    for cut in (", got ", " is not JSON: ", " (op="):
        reason = reason.split(cut)[0]
    return reason


# --- random profile specs: every column type, key types, byte limits, the unavailable-value placeholder --

COLUMN_TYPES = tuple(field_types.SPARK_TYPES)
NAME_START = "abcdefghijklmnopqrstuvwxyzé日"
NAME_CHARS = NAME_START + "_0123456789"
FOLD_FIELDS = ("kind", "op", "valid_from_ms", "lsn", "unavailable", "drifted", "progress_ms", "error")


def raw_number(text: str) -> str:
    """A number literal json.dumps does not write (1e400, 1.50, -0), written as is by envelope_text."""
    return f"\x00RAW:{text}\x00"


def envelope_text(obj: Any, ensure_ascii: bool) -> str:
    return re.sub(r'"\\u0000RAW:([^\\"]*)\\u0000"', r"\1", json.dumps(obj, ensure_ascii=ensure_ascii))


def random_profile_spec(rng: random.Random) -> dict[str, Any]:
    """Every column type once and a few more, in random order, under random names; some with max_bytes."""
    taken = set(FOLD_FIELDS)

    def name() -> str:
        while True:
            size = rng.randrange(8)
            candidate = rng.choice(NAME_START) + "".join(rng.choice(NAME_CHARS) for _ in range(size))
            if candidate not in taken:
                taken.add(candidate)
                return candidate

    types = [*COLUMN_TYPES, *(rng.choice(COLUMN_TYPES) for _ in range(rng.randrange(4)))]
    rng.shuffle(types)
    columns = []
    for kind in types:
        column: dict[str, Any] = {"name": name(), "type": kind}
        if kind in ("text", "numeric", "jsonb") and rng.random() < 0.5:
            column["max_bytes"] = rng.choice([3, 8, 1024])
        columns.append(column)
    return {
        "key": {"column": name(), "type": rng.choice(["text", "text", "bigint", "bigint", "integer"])},
        "columns": columns,
        "heartbeat": {"schema": name(), "table": name()},
        "max_change_bytes": rng.choice([3000, 1024 * 1024]),
    }


# Per column type: values it takes, and values it refuses, as Debezium (or a forged record) might write them.
TAKEN_TIMES = (
    "2026-11-22T15:00:00Z",
    "2026-11-22T15:00:00.123456Z",
    "1970-01-01T00:00:00.000000001+05:30",
    "1969-12-31T23:59:59.9999999-00:30",
    "9999-12-31T23:59:59.999999999-18:59",
    "0000-01-01T00:00:00Z",
    "2024-02-29T12:00:00+00:00",
    0,
    -1,
    NOW * 1000,
    2**63 - 1,
)
REFUSED_TIMES = (
    "2023-02-29T00:00:00Z",
    "2026-04-31T00:00:00Z",
    "2026-11-22T15:00:00",
    "2026-11-22 15:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-11-22T15:00:60Z",
    "2026-11-22T24:00:00Z",
    "2026-11-22T15:00:00+19:00",
    "2026-11-22T15:00:00+05:60",
    "2026-11-22T15:00:00.Z",
    "2026-11-22T15:00:00.1234567890Z",
    "2026-11-22t15:00:00z",
    "٢٠٢٦-11-22T15:00:00Z",
    "2026-11-22T15:00:00Z\n",
    2**63,
    1.5,
    raw_number("1e3"),
)
DEEP = {"deep": json.loads("[" * 33 + "1" + "]" * 33)}
TAKEN: dict[str, tuple[Any, ...]] = {
    "text": ("x", "", "é日😀", 7, -12, "abc", "abcd", "é" * 600, '\x01\n"\\'),
    "integer": (0, 1, -1, 2**31 - 1, -(2**31), raw_number("-0")),
    "bigint": (0, 2**63 - 1, -(2**63), NOW),
    "double": (
        0.0,
        -0.0,
        1.5,
        1e300,
        5,
        -7,
        2**70,
        "NaN",
        "Infinity",
        "-Infinity",
        raw_number("1e-400"),
        raw_number("0.1"),
        raw_number("-0"),
    ),
    "numeric": (
        "12.50",
        "-1e5",
        "NaN",
        "0",
        "-0",
        "123456789.123456789",
        12,
        -0.5,
        raw_number("1.50E3"),
        raw_number("-0.0"),
        raw_number("-0"),
        raw_number("1e400"),
        10**30,
    ),
    "boolean": (True, False),
    "timestamptz": TAKEN_TIMES,
    "timestamp": TAKEN_TIMES,
    "text[]": (["a", None, "é"], [], [None], ["x" * 9]),
    "jsonb": (
        '{"a": 1}',
        "[1, 2.50]",
        '"x"',
        "1",
        "null",
        " {} ",
        "[1e400]",
        {"b": raw_number("1.0"), "a": [2, 'é\x01\x1f"\\/', None, True, -0.0]},
        [],
        {},
        [1, {"x": None}],
        DEEP,
        [10**30, raw_number("1E5"), raw_number("-0")],
    ),
}
REFUSED: dict[str, tuple[Any, ...]] = {
    "text": (1.5, True, 2**63, ["x"], {}),
    "integer": (2**31, -(2**31) - 1, 1.0, "5", True),
    "bigint": (2**63, 1.5, "5", False),
    "double": (10**400, "nan", "1.5", raw_number("1e400"), raw_number("-1E+400"), True, [1.0]),
    "numeric": ("1.", ".5", "+1", "1e", "Infinity", "١٢", " 1", "1_000", True, [1]),
    "boolean": (0, 1, "true"),
    "timestamptz": REFUSED_TIMES,
    "timestamp": REFUSED_TIMES,
    "text[]": (["a", 1], "a", [["a"]], ["a", UNAVAILABLE], {}),
    "jsonb": ("{", "NaN", '{"a":1,"a":2}', '"\\ud800"', 5, True, "", "  ", "[1] x"),
}
KEYS: dict[str, tuple[Any, ...]] = {
    "text": ("alice", "bob", "é日", "alice", "", None, 5, "u" * 1025, "😀" * 256, UNAVAILABLE, 1.5),
    "bigint": (7, -1, 2**31, 2**63 - 1, 7, 2**63, "7", 1.0, None, "", True),
}
KEYS["integer"] = KEYS["bigint"]


def key_value(rng: random.Random, kind: str) -> Any:
    """Mostly a good key (the first two), else any of KEYS."""
    return rng.choice(KEYS[kind][:2] if rng.random() < 0.7 else KEYS[kind])


def spec_row(rng: random.Random, spec: dict[str, Any]) -> Any:
    """A before or after row: mostly good values, null or missing ones, and at most one bad value."""
    if rng.random() < 0.03:
        return junk_value(rng)
    key = spec["key"]
    row = {key["column"]: key_value(rng, key["type"])} if rng.random() < 0.9 else {}
    bad = rng.choice(spec["columns"]) if rng.random() < 0.7 else None
    for column in spec["columns"]:
        pick = rng.random()
        if column is bad:
            row[column["name"]] = rng.choice((junk_value(rng), *REFUSED[column["type"]]))
        elif pick < 0.08:  # Debezium's placeholder for an unchanged TOASTed value, in the type's form
            row[column["name"]] = [UNAVAILABLE] if column["type"] == "text[]" and pick < 0.04 else UNAVAILABLE
        elif pick < 0.85:
            row[column["name"]] = rng.choice(TAKEN[column["type"]])
        elif pick < 0.93:
            row[column["name"]] = None
    if rng.random() < 0.1:
        row[rng.choice(["extra", "é", "x y"])] = junk_value(rng)
    return dict(rng.sample(list(row.items()), len(row)))  # fields in any order


def spec_records(
    rng: random.Random, spec: dict[str, Any], n: int
) -> list[tuple[str, bytes | None, bytes | None]]:
    """Change events (valid and not), heartbeat-table events and Debezium heartbeats for a spec."""
    users = names.CDC_USERS_TOPIC
    key_column = spec["key"]["column"]
    out: list[tuple[str, bytes | None, bytes | None]] = [
        (users, None, None),
        (names.HEARTBEAT_TOPIC, None, b'{"ts_ms": 5}'),
    ]
    for _ in range(n):
        op = rng.choice("cudr") if rng.random() < 0.95 else rng.choice(["t", "x", None])
        source: Any = {"ts_ms": NOW, "lsn": rng.choice([42, None, 2**40])}
        if rng.random() < 0.05:
            source[rng.choice(["ts_ms", "lsn"])] = rng.choice([-5, "7", 1.5, 0])
        heartbeat = rng.random() < 0.1
        if heartbeat:
            source |= {"schema": spec["heartbeat"]["schema"], "table": spec["heartbeat"]["table"]}
        envelope = {
            "before": spec_row(rng, spec) if op == "d" or rng.random() < 0.2 else None,
            "after": None if op == "d" else spec_row(rng, spec),
            "op": op,
            "source": source,
        }
        if rng.random() < 0.03:
            envelope.pop(rng.choice(["before", "after", "op", "source"]))
        text = envelope_text(envelope, ensure_ascii=rng.random() < 0.3)
        mutation = rng.randrange(30)
        if mutation == 0:
            text = text[: rng.randrange(len(text) + 1)]
        elif mutation == 1:
            text = text.replace('"op"', '"pad": "\\udc00", "op"', 1)
        key_object = json.dumps({key_column: key_value(rng, spec["key"]["type"])}).encode()
        key = rng.choice([None, b"[1]", key_object])
        out.append((users, key, text.encode("utf-8", "surrogatepass")))
    return out


def test_the_fold_agrees_with_parse_envelope_for_any_profile_spec(spark: SparkSession):
    """Random profile specs (every column type, text and integer keys, byte limits) and random change events
    for each: the fold (its fast path too) and parse_envelope agree row for row. One Spark job per spec."""
    rng = random.Random(SEED + 2)
    accepted: dict[str, int] = {}
    unavailable: dict[str, int] = {}
    retyped: dict[str, int] = {}
    rejected: dict[str, int] = {}
    fast = valid = 0
    for _ in range(6):
        spec = random_profile_spec(rng)
        folded = check_envelopes(spark, spec_records(rng, spec, 400), spec, fast=True)
        types = {f"after.{c['name']}": c["type"] for c in spec["columns"]}
        for change in folded.changes:
            for column in spec["columns"]:
                if change.op != "d" and change.columns[column["name"]] is not None:
                    accepted[column["type"]] = accepted.get(column["type"], 0) + 1
            for index in change.unavailable:
                kind = spec["columns"][index]["type"]
                unavailable[kind] = unavailable.get(kind, 0) + 1
            for index, why in change.drifted.items():
                kind = spec["columns"][index]["type"]
                retyped[kind] = retyped.get(kind, 0) + (why != MISSING)
        for reason, count in folded.kinds.items():
            where = reason.split(" ")[0]
            subject = types.get(where, "key" if where == spec["key"]["column"] else None)
            if subject is not None:
                outcome = f"{subject}: {reason_outcome(reason)}"
                rejected[outcome] = rejected.get(outcome, 0) + count
        fast += sum(folded.fast)
        valid += folded.valid
    # Every type folds values, takes others as drift and the placeholder as a column Debezium did not send;
    # byte limits, the placeholder as the key or beside other elements of a text[] are dead letters.
    assert set(accepted) == set(unavailable) == set(retyped) == set(COLUMN_TYPES), (accepted, unavailable)
    dead = {"text: over", "numeric: over", "jsonb: over", "key: over"}
    dead |= {"key: placeholder", "text[]: placeholder"}
    assert dead <= rejected.keys(), rejected
    assert fast > valid // 3, (fast, valid)


def reason_outcome(reason: str) -> str:
    for words, outcome in (("must be", "must be"), ("placeholder", "placeholder"), ("-byte limit", "over")):
        if words in reason:
            return outcome
    return reason


# --- random event specs: the parser is generic over the spec ------------------------------------------

TYPES, KEY_TYPES, TIME_FORMATS = pf.TYPES, pf.KEY_TYPES, pf.TIME_FORMATS
# JSON field names a spec may use; the parsed frame's own columns (events.parse_type) only as the time or
# the count, whose columns the job names itself.
SPEC_NAMES = ("userid", "url", "a", "ab", "a b", "a.b", "é", "日本", "n", "x1", "T", "time", "id", "k", "v")
JOB_NAMES = ("clicks", "click_time_ms", "error", "event_id")
TEXTS = (
    "a",
    "hello world",
    "",
    " ",
    "\t",
    "\u3000",
    "\u200b",
    "é",
    "日本",
    "😀",
    "\x00",
    "a\\b",
    'q"t',
    "x" * 40,
)
NUMBERS = (
    "0",
    "-0",
    "1",
    "-1",
    "7",
    "1.5",
    "-0.0",
    "0.1",
    "1.50",
    "1e5",
    "1E+2",
    "1e308",
    "1.7976931348623157e308",
    "1e309",
    "4.9e-324",
    "2.5e-324",
    "1e-400",
    "123456789012345678901234567890",
    "1E400",
    "1e-16383",
    "1e-16384",
    "12e131070",
    "1e131072",
    "9e9999999999",
    "0e-9999999999",
    "1" + "0" * 120,
)
# Times at the ends of the years 0001..9999 (UTC), and just past them.
ISO_EDGES = (
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+00:01",
    "0001-01-01T00:00:00-00:01",
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59.999999-00:01",
    "1970-01-01T00:00:00.000000001Z",
    "1969-12-31T23:59:59.9999999Z",
    "2024-02-29T12:00:00Z",
    "2023-02-29T12:00:00Z",
    "2026-11-22T10:00:60Z",
    "2026-11-22T10:00:00+24:00",
    "2026-11-22T10:00:00+23:59",
    "2026-11-22t10:00:00z",
    "2026-11-22T10:00:00",
    "2026-11-22 10:00:00Z",
    "2026-11-22T10:00:00.Z",
    "2026-11-22T10:00:00.1234567891Z",
    "0000-06-01T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-11-22T10:00:00Z\n",
    "٢٠٢٦-11-22T10:00:00Z",
    "+2026-11-22T10:00:00Z",
)


def random_event_spec(rng: random.Random, i: int) -> dict[str, Any]:
    """A random event spec; the i-th cycles through the key types and time formats, the first has every
    field type."""
    columns = [n for n in SPEC_NAMES]
    rng.shuffle(columns)
    types = list(TYPES) if i == 0 else [rng.choice(TYPES) for _ in range(rng.randrange(6))]
    key, names_ = columns[0], columns[1 : 1 + len(types)]
    rest = [*columns[1 + len(types) :], *JOB_NAMES]
    time_name = rest.pop(rng.randrange(len(rest)))
    fields = []
    for name, kind in zip(names_, types, strict=True):
        field: dict[str, Any] = {"name": name, "type": kind}
        if rng.random() < 0.8:
            field["required"] = rng.random() < 0.5
        fields.append(field)
    count = {"field": rng.choice(rest), "max": rng.choice([1, 3, 1_000_000, 2**31 - 1])}
    return {
        "key": {"field": key, "type": KEY_TYPES[i // 3 % 3]},
        "fields": fields,
        "time": {"field": time_name, "format": TIME_FORMATS[i % 3]},
        "count": None if rng.random() < 0.3 else count,
        "max_record_bytes": rng.choice([300, 2000, 65536]),
        "min_time_ms": rng.choice([946_684_800_000, NOW - 3_600_000, -62_135_596_800_000, 0]),
        "max_future_ms": rng.choice([0, 1, 60_000, 86_400_000]),
        "max_key_bytes": rng.choice([3, 8, 1024]),
    }


def iso_time(rng: random.Random, micros: int) -> str:
    """An ISO_TIME for micros (cut to its fraction digits), at a random offset."""
    offset_min = rng.choice([0, 0, 0, 60, -90, 330, 23 * 60 + 59, -(23 * 60 + 59)])
    try:
        local = datetime(1970, 1, 1) + timedelta(microseconds=micros + offset_min * 60_000_000)
    except OverflowError:  # beyond Python's years: the edges say those
        return rng.choice(ISO_EDGES)
    digits = rng.choice([0, 0, 1, 3, 6, 9])
    fraction = f".{local.microsecond:06d}{rng.randrange(1000):03d}"[: digits + 1] if digits else ""
    hours, minutes = divmod(abs(offset_min), 60)
    zone = f"{'+-'[offset_min < 0]}{hours:02d}:{minutes:02d}"
    if offset_min == 0 and rng.random() < 0.7:
        zone = "Z"
    return f"{local.year:04d}-{local:%m-%dT%H:%M:%S}{fraction}{zone}"


def near(rng: random.Random, lo: int, hi: int) -> int:
    """A time in ms at or just past the ends of lo..hi, or inside."""
    return rng.choice([lo, lo - 1, hi, hi + 1, hi - rng.randrange(10**9), lo + rng.randrange(10**6), NOW])


def time_literal(rng: random.Random, spec: dict[str, Any]) -> str:
    """The event time as JSON text, mostly of the spec's format and near its plausible range."""
    lo, hi = spec["min_time_ms"], NOW + spec["max_future_ms"]
    ms = near(rng, lo, hi)
    form = spec["time"]["format"]
    if rng.random() < 0.1:
        return rng.choice(
            [*NUMBERS, json.dumps(str(ms)), "null", "true", "[1]", json.dumps(iso_time(rng, ms * 1000))]
        )
    if form == "epoch_ms":
        return str(ms)
    if form == "iso8601":
        if rng.random() < 0.1:
            return json.dumps(rng.choice(ISO_EDGES))
        return json.dumps(iso_time(rng, ms * 1000 + rng.randrange(1000)))
    seconds = Decimal(ms).scaleb(-3) + Decimal(rng.randrange(10**6)).scaleb(-9) * rng.choice([0, 1])
    return rng.choice(
        [str(seconds), f"{seconds:f}", f"{seconds:e}", f"{seconds.normalize():E}", str(ms // 1000)]
    )


def field_literal(rng: random.Random, kind: str) -> str:
    """A value for a field of this type as JSON text: mostly of its type, at and past its edges."""
    if kind == "text":
        return json.dumps(rng.choice(TEXTS))
    if kind in ("integer", "bigint"):
        bits = 32 if kind == "integer" else 64
        return rng.choice(["-0", "1.0", "1e2", *(str(v) for v in int_edges(rng, bits))])
    if kind in ("double", "numeric"):
        return rng.choice(NUMBERS)
    if kind == "boolean":
        return rng.choice(["true", "false"])
    if kind in ("timestamptz", "timestamp"):
        edges = [MIN_MICROS, MIN_MICROS - 1, MAX_MICROS, MAX_MICROS + 1, NOW * 1000, -5, 2**63 - 1]
        if rng.random() < 0.4:
            return str(rng.choice(edges))
        if rng.random() < 0.3:
            return json.dumps(rng.choice(ISO_EDGES))
        return json.dumps(iso_time(rng, rng.randrange(MIN_MICROS + 10**11, MAX_MICROS - 10**11)))
    if kind == "text[]":
        return json.dumps(
            rng.choice([[], ["a"], ["a", None], [" ", "é"], ["a", 1], [["a"]], "a", {}, [None]])
        )
    return json.dumps(junk_value(rng))  # jsonb


def int_edges(rng: random.Random, bits: int) -> list[int]:
    top = 2 ** (bits - 1)
    return [0, 1, -1, top - 1, top, -top, -top - 1, rng.randrange(-(10**6), 10**6)]


def key_literal(rng: random.Random, spec: dict[str, Any]) -> str:
    if spec["key"]["type"] != "text":
        return (
            field_literal(rng, spec["key"]["type"]) if rng.random() < 0.3 else str(rng.randrange(-99, 10**6))
        )
    most = spec["max_key_bytes"]
    longish = ["é" * (most // 2), "é" * (most // 2) + "u", "u" * most, "u" * (most + 1), "😀" * (most // 4)]
    return json.dumps(
        rng.choice([*TEXTS, *longish]) if rng.random() < 0.3 else rng.choice(["u1", "é", "U 2"])
    )


def event_payload(rng: random.Random, spec: dict[str, Any]) -> bytes:
    """A record for the spec: mostly valid, each field sometimes missing, null or of another type, and the
    whole sometimes broken in one of the ways the click generator breaks it."""
    pairs: list[tuple[str, str]] = []
    if rng.random() < 0.95:
        pairs.append((spec["key"]["field"], key_literal(rng, spec)))
    for field in spec["fields"]:
        roll = rng.random()
        if roll < 0.04:
            continue
        value = (
            "null" if roll < 0.08 else field_literal(rng, rng.choice(TYPES) if roll < 0.12 else field["type"])
        )
        pairs.append((field["name"], value))
    if rng.random() < 0.95:
        pairs.append((spec["time"]["field"], time_literal(rng, spec)))
    if spec["count"] is not None and rng.random() < 0.5:
        most = spec["count"]["max"]
        count = rng.choice(["1", str(most), str(rng.randint(1, most))])
        if rng.random() < 0.2:
            count = rng.choice([str(most + 1), "0", "1.0", "null", '"1"'])
        pairs.append((spec["count"]["field"], count))
    if rng.random() < 0.2:
        pairs.append(("zz", json.dumps(junk_value(rng))))
    if rng.random() < 0.05:
        pairs.append(("pad", json.dumps("p" * rng.choice([100, 400, 3000]))))
    rng.shuffle(pairs)
    ascii_only = rng.random() < 0.3
    text = "{" + ", ".join(f"{json.dumps(k, ensure_ascii=ascii_only)}: {v}" for k, v in pairs) + "}"
    if ascii_only:  # non-ASCII in the values escaped too (the fast path takes no escapes)
        text = text.encode("ascii", "backslashreplace").decode().replace("\\x", "\\u00")
    return mutated(rng, text, pairs)


def mutated(rng: random.Random, text: str, pairs: list[tuple[str, str]]) -> bytes:
    mutation = rng.randrange(24)
    if mutation == 0:
        text = text[: rng.randrange(len(text) + 1)]
    elif mutation == 1:
        text += rng.choice([" ", "\n", " x", "}", ", 1"])
    elif mutation == 2 and pairs:
        name = json.dumps(pairs[0][0])
        text = text.replace(name + ":", f"{name}: 1, {name}:", 1)
    elif mutation == 3:
        text = "{" + '"zz": "\\u00e9", ' + text[1:] if len(text) > 2 else text
    elif mutation == 4:
        depth = rng.choice([31, 33, 1500])
        text = "{" + '"deep": ' + "[" * depth + "]" * depth + ", " + text[1:] if len(text) > 2 else text
    elif mutation == 5:
        text = "[" + text + "]"
    raw = text.encode("utf-8", "surrogatepass")
    if mutation == 6 and raw:
        cut = rng.randrange(len(raw))
        raw = raw[:cut] + bytes([rng.randrange(256)]) + raw[cut + 1 :]
    return raw


def spec_category(reason: str, spec: dict[str, Any]) -> tuple[str, str]:
    """A reason's category for a spec: the rule, and the field it names."""
    for prefix in ("empty record", "record of ", "not JSON", "expected a JSON object"):
        if reason.startswith(prefix):
            return prefix, ""
    count = spec["count"]["field"] if spec["count"] else None
    named = {spec["key"]["field"], spec["time"]["field"], *(f["name"] for f in spec["fields"]), count} - {
        None
    }
    for name in sorted(named, key=len, reverse=True):
        if reason.startswith(f"{name} must be "):
            return "must be", name
        if reason.startswith(f"{name} of ") and "-byte limit" in reason:
            return "too long", name
        if reason.startswith(f"{name} ") and "is outside the plausible range" in reason:
            return "implausible", name
    raise AssertionError(reason)


def same_value(kind: str, got: Any, want: Any) -> bool:
    """A parsed field's value from Spark (as to_json wrote it) equals parse_event's."""
    if got is None or want is None:
        return got is want
    if kind == "numeric":
        return Decimal(got) == Decimal(want)
    if kind == "jsonb":
        return json.loads(got, parse_float=Decimal) == json.loads(want, parse_float=Decimal)
    return got == want and type(got) is type(want)


def spec_frames(
    spark: SparkSession, specs: list[dict[str, Any]], payloads: Sequence[Sequence[bytes | None]], fast: bool
) -> DataFrame:
    """Each spec's payloads parsed by its own UDF (the full parser, or the fast path alone), as JSON text,
    unioned into one frame: (spec, event_id, payload, row)."""
    frames = []
    for i, (spec, batch) in enumerate(zip(specs, payloads, strict=True)):
        rows = [(f"s{i}e{j}", "kafka:events", p, NOW) for j, p in enumerate(batch)]
        raw = spark.createDataFrame(rows, "event_id string, source string, payload binary, now_ms long")
        if fast:
            register_plain_event(spark, f"plain_event_{i}", spec)
            row = F.to_json(F.call_function(f"plain_event_{i}", "payload", "now_ms"))
            frames.append(raw.select(F.lit(i).alias("spec"), "event_id", "payload", row.alias("row")))
            continue
        out = events.parse(raw, spec)
        assert tuple(out.columns) == events.parsed_columns(spec)
        row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in events.parse_type(spec).fieldNames()]))
        frames.append(out.select(F.lit(i).alias("spec"), "event_id", "payload", row.alias("row")))
    return functools.reduce(DataFrame.unionAll, frames)


def check_event(spec: dict[str, Any], got: dict[str, Any], want: Event, payload: bytes | None) -> None:
    assert got.get("error") is None, (payload, got)
    assert got[spec["key"]["field"]] == want.key, (payload, got, want)
    for field in spec["fields"]:
        name = field["name"]
        assert same_value(field["type"], got.get(name), want.fields[name]), (payload, name, got, want)
    assert (got["click_time_ms"], got["clicks"]) == (want.time_ms, want.count), (payload, got, want)


def test_event_parser_agrees_with_parse_event_for_random_specs(spark: SparkSession):
    rng = random.Random(SEED)
    specs = [random_event_spec(rng, i) for i in range(12)]
    payloads = [[None, b"", b"[]", b"{}", *(event_payload(rng, spec) for _ in range(250))] for spec in specs]
    rows = spec_frames(spark, specs, payloads, fast=False).collect()
    assert len(rows) == sum(map(len, payloads))
    kinds: dict[str, int] = {}
    typed: set[tuple[str, str]] = set()  # (type, accepted | rejected) seen for a field
    for row in rows:
        spec = specs[row["spec"]]
        payload = payloads[row["spec"]][int(row["event_id"].split("e")[1])]
        got = json.loads(row["row"])
        try:
            want = parse_event(payload, NOW, spec)
        except Rejected as exc:
            assert got.get("error") is not None, (spec, payload, str(exc), got)
            rule, name = spec_category(str(exc), spec)
            assert spec_category(got["error"], spec) == (rule, name), (spec, payload, got["error"], str(exc))
            assert row["payload"] == payload and set(got) == {"error"}, (payload, got)
            kinds[rule] = kinds.get(rule, 0) + 1
            typed.update(
                (f["type"], "rejected") for f in spec["fields"] if (rule, name) == ("must be", f["name"])
            )
            continue
        check_event(spec, got, want, payload)
        assert row["payload"] is None
        typed.update((f["type"], "accepted") for f in spec["fields"] if want.fields[f["name"]] is not None)
        kinds["valid"] = kinds.get("valid", 0) + 1
    # The generator reaches every outcome, and every type both ways.
    assert kinds.keys() >= {"valid", "empty record", "record of ", "not JSON", "expected a JSON object"}, (
        kinds
    )
    assert kinds.keys() >= {"must be", "too long", "implausible"}, kinds
    assert typed == {(kind, outcome) for kind in TYPES for outcome in ("accepted", "rejected")}, typed


def test_plain_event_fast_path_accepts_only_what_parse_event_accepts_for_random_specs(spark: SparkSession):
    rng = random.Random(SEED + 1)
    specs = [random_event_spec(rng, i) for i in range(12)]
    payloads = [[event_payload(rng, spec) for _ in range(150)] for spec in specs]
    taken = valid = 0
    for row in spec_frames(spark, specs, payloads, fast=True).collect():
        spec = specs[row["spec"]]
        payload = row["payload"]
        try:
            want = parse_event(payload, NOW, spec)
        except Rejected as exc:
            assert row["row"] is None, (spec, payload, str(exc), row["row"])
            continue
        valid += 1
        if row["row"] is not None:
            taken += 1
            check_event(spec, json.loads(row["row"]), want, payload)
    # Most valid events take the fast path (some escape their text, some nest deeper than it reads).
    assert taken > valid // 3, (taken, valid)


def test_the_iso_time_form_is_the_same_in_both_languages(spark: SparkSession):
    assert spark._jvm.io.streamfold.events.EventValues.ISO_TIME == ISO_TIME  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"fields": [{"name": "url", "type": "money"}]}, "unknown type money"),
        ({"fields": [{"name": "userid", "type": "text"}]}, "the JSON field userid is named twice"),
        ({"key": {"field": "userid", "type": "double"}}, "a key is text, integer or bigint"),
        (
            {"time": {"field": "event_time", "format": "rfc2822"}},
            "time.format is epoch_ms, epoch_s or iso8601",
        ),
        ({"count": {"field": "clicks", "max": 0}}, "max must be an integer in 1..2147483647"),
        ({"max_key_bytes": "1024"}, "max_key_bytes must be an integer"),
        ({"colour": "red"}, "unknown entry colour"),
    ],
)
def test_the_jvm_refuses_a_bad_event_spec_saying_why(
    spark: SparkSession, change: dict[str, Any], reason: str
):
    with pytest.raises(Exception, match=re.escape(reason)):
        spark._jvm.io.streamfold.events.EventParse(json.dumps({**DEFAULT_EVENT_SPEC, **change}))  # type: ignore[union-attr]


# --- property-based: hypothesis draws the inputs ------------------------------------------------------
# Each example is a list of records run as one DataFrame (a Spark job per record would be too slow).
# derandomize: CI runs the same examples every time; a new disagreement shows up here first, not as a flake.

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Short strings that are often whitespace only, in Python's sense (str.isspace) or not.
TEXTY = st.text(
    st.sampled_from([" ", "\t", "\u3000", "\x85", "\u200b", "a", "é", "日", "😀", "\x00"]), max_size=5
)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually a valid value, sometimes any JSON value (one_of picks its branches about evenly)."""
    return st.one_of(valid, valid, valid, JSON_VALUES)


CLICK_LIKE = st.fixed_dictionaries(
    {
        "userid": mostly(TEXTY | st.text(max_size=12)),
        "url": mostly(TEXTY | st.text(max_size=30)),
        "device_id": mostly(TEXTY | st.sampled_from(["mobile", "desktop"])),
        "ip": mostly(st.sampled_from(["10.0.0.1", "::1"])),
        "event_time": mostly(st.integers(NOW - 10**9, NOW + 10**5)),
    },
    optional={"clicks": mostly(st.integers(-2, 1_000_002)), "extra": JSON_VALUES},
)


def json_bytes(value: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """A value as JSON text, escaped or raw UTF-8 (the fast path takes only the raw form)."""
    return st.tuples(value, st.booleans()).map(lambda v: json.dumps(v[0], ensure_ascii=v[1]).encode())


CLICK_RECORDS = st.lists(
    st.none() | st.binary(max_size=64) | json_bytes(JSON_VALUES) | json_bytes(CLICK_LIKE),
    min_size=50,
    max_size=120,
)


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(payloads=CLICK_RECORDS)
def test_click_parser_agrees_with_parse_click_on_any_input(spark: SparkSession, payloads: list[bytes | None]):
    check_clicks(spark, payloads)


ENVELOPE_LIKE = st.fixed_dictionaries(
    {},
    optional={
        "op": st.sampled_from(["c", "u", "d", "r", "t", "x"]) | JSON_VALUES,
        "before": st.none() | JSON_VALUES,
        "after": st.fixed_dictionaries(
            {"userid": st.text(max_size=8) | JSON_VALUES},
            optional={
                "regionid": st.text(max_size=8) | JSON_VALUES,
                "gender": st.text(max_size=8) | JSON_VALUES,
                "interests": st.lists(st.text(max_size=8) | st.none(), max_size=3) | JSON_VALUES,
                "registertime": st.integers() | JSON_VALUES,
            },
        )
        | JSON_VALUES,
        "source": st.fixed_dictionaries(
            {},
            optional={
                "schema": st.just("public") | JSON_VALUES,
                "table": st.just("users") | JSON_VALUES,
                "ts_ms": st.integers() | JSON_VALUES,
                "lsn": st.integers() | JSON_VALUES,
            },
        )
        | JSON_VALUES,
    },
)
CDC_RECORDS = st.lists(
    st.tuples(
        st.sampled_from([names.CDC_USERS_TOPIC, names.HEARTBEAT_TOPIC]),
        st.none() | st.binary(max_size=16) | json_bytes(st.fixed_dictionaries({"userid": JSON_VALUES})),
        st.none() | st.binary(max_size=64) | json_bytes(JSON_VALUES) | json_bytes(ENVELOPE_LIKE),
    ),
    min_size=50,
    max_size=120,
)


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(records=CDC_RECORDS)
def test_cdc_fold_agrees_with_parse_envelope_on_any_input(
    spark: SparkSession, records: list[tuple[str, bytes | None, bytes | None]]
):
    check_envelopes(spark, records)
