"""Differential fuzz: the Spark-native parsers agree with their pure-Python references, record by record.

One seeded generator makes a few thousand click payloads (valid ones, each kind of invalid one, random
bytes, nested junk, unicode, huge numbers) and Debezium envelopes; each set runs through Spark as ONE
DataFrame, and every row must match `parse_click` / `parse_envelope`: accept or reject, the parsed
fields, and the category of the reason.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from common import names
from pipeline import cdc_fold, clicks, field_types
from pipeline.clicks import MAX_RECORD_BYTES, Rejected, parse_click
from spec.envelopes import UNAVAILABLE, BadEnvelope, Change, Progress, parse_envelope

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
    "after.regionid must be",
    "after.gender must be",
    "after.interests must be",
    "after.registertime must be",
    "is Debezium's unavailable-value placeholder",
)
CATEGORIES = (*CDC_CATEGORIES, *CLICK_CATEGORIES)


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


# Around clicks.MAX_KEY_BYTES (1,024 UTF-8 bytes): ASCII, 2-byte and 4-byte characters (a surrogate pair in
# Java, escaped as two \u escapes by json.dumps(ensure_ascii=True)).
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
    """Near-valid clicks aimed at the JVM fast path (PlainClick): each must be rejected, or accepted with
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
    blank = {int(r["event_id"][1:]) for r in clicks.parse(frame).where("error IS NOT NULL").collect()}
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
    got = {r["event_id"]: r["error"] for r in clicks.parse(frame).collect()}
    for i, reason in enumerate(reasons):
        assert got[f"e{i}"] is not None and got[f"e{i}"].startswith(reason), (reason, got[f"e{i}"])


def test_click_parser_agrees_with_parse_click(spark: SparkSession):
    kinds = check_clicks(spark, click_payloads(random.Random(SEED)))
    # The generator reaches every outcome.
    assert kinds.keys() >= {"valid", *CLICK_CATEGORIES}, kinds


def check_clicks(spark: SparkSession, payloads: list[bytes | None]) -> dict[str, int]:
    """Every payload through clicks.parse (one DataFrame) and parse_click must agree; returns the outcomes."""
    rows = [(f"e{i}", "kafka:clicks", p, NOW) for i, p in enumerate(payloads)]
    frame = spark.createDataFrame(rows, "event_id string, source string, payload binary, now_ms long")
    out = clicks.parse(frame)
    assert tuple(out.columns) == clicks.PARSED_COLUMNS
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
            want.userid,
            want.url,
            want.device_id,
            want.ip,
        ), payload
        assert (row["click_time_ms"], row["clicks"], row["payload"]) == (
            want.click_time_ms,
            want.clicks,
            None,
        )
        kinds["valid"] = kinds.get("valid", 0) + 1
    return kinds


def test_plain_click_fast_path_accepts_only_what_parse_click_accepts(spark: SparkSession):
    """The JVM fast path never accepts a reject, returns parse_click's fields, and takes the plain clicks."""
    payloads = [json.dumps(GOOD).encode(), *click_payloads(random.Random(SEED + 1))]
    frame = spark.createDataFrame(
        [(f"e{i}", p, NOW) for i, p in enumerate(payloads)], "event_id string, payload binary, now_ms long"
    )
    # The fast path returns ClickParse's row (ClickParse calls it first), or NULL.
    spark.udf.registerJavaFunction("plain_click", "io.streamfold.clicks.PlainClick", clicks.PARSE_TYPE)
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
                want.userid,
                want.url,
                want.device_id,
                want.ip,
                want.click_time_ms,
                want.clicks,
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
        "interests": rng.choice([["News"], [], None, ["a", None], ["News"], [], None, ["a", UNAVAILABLE]]),
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
        (
            users,
            b'{"userid":"big"}',
            b'{"op": "c", "after": {"userid": "big", "regionid": "%s"}, "source": {"ts_ms": 1}}'
            % (b"r" * cdc_fold.MAX_CHANGE_BYTES),
        ),
    ]
    for _ in range(1500):
        op = rng.choice(["c", "u", "d", "r", "c", "u", "d", "r", "x", None, 1])
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
    kinds = check_envelopes(spark, cdc_records(random.Random(SEED))).kinds
    outcomes = {k if k in ("change", "progress", "skip") else category(k) for k in kinds}
    # The generator reaches every outcome.
    assert outcomes >= {"change", "progress", "skip", *CDC_CATEGORIES}, kinds


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


DEFAULT_SPEC = cdc_fold.DEFAULT_PROFILE_SPEC


@dataclass
class Folded:
    """What check_envelopes saw: the outcomes (a kind, or a reject's reason), the changes, and per record
    whether the fast path folded it."""

    kinds: dict[str, int] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    fast: list[bool] = field(default_factory=list)
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
        want: Change | Progress | None = None
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


def expected_row(want: Change | Progress | None, spec: dict[str, Any]) -> tuple[Any, ...]:
    """The fold's row (kind .. progress_ms) parse_envelope's answer stands for."""
    nothing = (None,) * len(spec["columns"])
    if want is None:
        return ("skip", None, None, None, None, *nothing, None)
    if isinstance(want, Progress):
        return ("progress", None, None, None, None, *nothing, want.progress_ms)
    assert list(want.columns) == [c["name"] for c in spec["columns"]]
    return (
        "change",
        want.key,
        want.op,
        want.valid_from_ms,
        want.lsn,
        *want.columns.values(),
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
FOLD_FIELDS = ("kind", "op", "valid_from_ms", "lsn", "progress_ms", "error")


def raw_number(text: str) -> str:
    """A number literal json.dumps does not write (1e400, 1.50, -0), written as is by envelope_text."""
    return f"\x00RAW:{text}\x00"


def envelope_text(obj: Any, ensure_ascii: bool) -> str:
    return re.sub(r'"\\u0000RAW:([^\\"]*)\\u0000"', r"\1", json.dumps(obj, ensure_ascii=ensure_ascii))


def random_spec(rng: random.Random) -> dict[str, Any]:
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
            choices = (junk_value(rng), *REFUSED[column["type"]])
            row[column["name"]] = UNAVAILABLE if pick < 0.25 else rng.choice(choices)
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
        op = rng.choice("cudr") if rng.random() < 0.97 else rng.choice(["x", None])
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
    rejected: dict[str, int] = {}
    fast = valid = 0
    for _ in range(6):
        spec = random_spec(rng)
        folded = check_envelopes(spark, spec_records(rng, spec, 400), spec, fast=True)
        types = {f"after.{c['name']}": c["type"] for c in spec["columns"]}
        for change in folded.changes:
            for column in spec["columns"]:
                if change.op != "d" and change.columns[column["name"]] is not None:
                    accepted[column["type"]] = accepted.get(column["type"], 0) + 1
        for reason, count in folded.kinds.items():
            where = reason.split(" ")[0]
            subject = types.get(where, "key" if where == spec["key"]["column"] else None)
            if subject is not None:
                outcome = f"{subject}: {reason_outcome(reason)}"
                rejected[outcome] = rejected.get(outcome, 0) + count
        fast += sum(folded.fast)
        valid += folded.valid
    # Every type folds values and refuses others; placeholders and byte limits are dead letters.
    assert set(accepted) == set(COLUMN_TYPES), accepted
    for kind in COLUMN_TYPES:
        assert {f"{kind}: must be", f"{kind}: placeholder"} <= rejected.keys(), (kind, rejected)
    assert {"text: over", "numeric: over", "jsonb: over", "key: over", "key: placeholder"} <= rejected.keys()
    assert fast > valid // 3, (fast, valid)


def reason_outcome(reason: str) -> str:
    for words, outcome in (("must be", "must be"), ("placeholder", "placeholder"), ("-byte limit", "over")):
        if words in reason:
            return outcome
    return reason


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
