"""The pipeline file: one YAML file declares what streamfold joins and aggregates (docs/contracts.md
"The pipeline file").

It names the profile table (its key and the columns to carry, with types), the event stream (its key,
event-time field, optional count field, typed fields and plausibility bounds), the join settings, the
output names and the aggregates. Every other part of the appliance derives from it: the publication and
grants, the connector, the topics, the Spark schemas, the JVM parsers' specs, the sink tables.

`load` reads and validates a file without touching any service: a typo, an unknown type, a duplicate key
or a reference to an undeclared field is one `PipelineFileError` naming the file, the line and the fix.
Checks against the live database (the table, its columns and key) are `db.introspect`'s.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

DEFAULT_FILE = "streamfold.yaml"
PIPELINE_VAR = "STREAMFOLD_PIPELINE"

# Declared column types (pipeline/field_types.py carries each in Spark).
TYPES = (
    "text",
    "integer",
    "bigint",
    "double",
    "numeric",
    "boolean",
    "timestamptz",
    "timestamp",
    "text[]",
    "jsonb",
)
KEY_TYPES = ("text", "integer", "bigint")
# Key types that join each other: an integer foreign key finds a bigint key and back.
_KEY_FAMILY = {"text": "text", "integer": "integer", "bigint": "integer"}
_RESERVED_TABLE_NAMES = ("event", "events", "profile")
# Types an aggregate cannot group by in the sink: a Postgres key compares them by value, not by their text.
UNGROUPABLE = ("text[]", "jsonb")
NUMBER_TYPES = ("integer", "bigint", "double", "numeric")
TIME_FORMATS = ("epoch_ms", "epoch_s", "iso8601")
# The heartbeat table whose change events Debezium routes into the profile table's topic: CDC progress in
# commit order with the changes (pipeline/cdc_fold.py).
HEARTBEAT_SCHEMA = "streamfold"
HEARTBEAT_TABLE = "cdc_heartbeat"
# A change event larger than this is a dead letter, not folded: its profile would ride on every one of the
# key's enriched events.
MAX_CHANGE_BYTES = 1024 * 1024
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
# The types whose columns may be aggregate keys, what their if_missing must be, and an example.
_IF_MISSING_TYPES: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "integer": (int,),
    "bigint": (int,),
    "double": (int, float),
    "numeric": (int, float, str),
    "boolean": (bool,),
    "jsonb": (str, int, float, bool),
}
_IF_MISSING_EXAMPLES = {
    "text": "UNKNOWN",
    "integer": "0",
    "bigint": "0",
    "double": "0",
    "numeric": "0",
    "boolean": "false",
}
_DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
_PATH_IN_MESSAGE = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*): ")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class PipelineFileError(ValueError):
    """A pipeline file that cannot be used: the message names the file, the line and the fix."""


def parse_duration_ms(text: str | int) -> int:
    """'500ms', '10s', '5m', '2h', '7d' -> milliseconds."""
    match = _DURATION.match(str(text).lower())
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 10s, 5m, 2h, 7d)")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _identifier(value: str) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ValueError(f"{value!r} is not a lower-case SQL identifier (a-z, 0-9, _; at most 63 characters)")
    return value


def _qualified(value: str) -> str:
    """schema.table, both identifiers; a bare name is in the public schema."""
    if not isinstance(value, str):
        raise ValueError(f"a table name is text, got {value!r}")
    parts = value.split(".")
    if len(parts) == 1:
        parts = ["public", *parts]
    if len(parts) != 2:
        raise ValueError(f"{value!r} is not schema.table")
    return ".".join(_identifier(p) for p in parts)


def _topic(value: str) -> str:
    if not isinstance(value, str) or not _TOPIC.match(value) or value in (".", ".."):
        raise ValueError(f"{value!r} is not a Kafka topic name (letters, digits, '.', '_', '-')")
    return value


def _type(value: str) -> str:
    if value not in TYPES:
        raise ValueError(
            f"unknown type {value!r}{_did_you_mean(value, TYPES)}; the types are {', '.join(TYPES)}"
        )
    return value


def _did_you_mean(value: Any, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(str(value), list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# The profile history's own columns beside the key and the carried columns (db/pipeline_tables.py).
HISTORY_COLUMNS = ("valid_from", "lsn", "op", "incomplete")
Identifier = Annotated[str, BeforeValidator(_identifier)]
Table = Annotated[str, BeforeValidator(_qualified)]
Topic = Annotated[str, BeforeValidator(_topic)]
TypeName = Annotated[str, BeforeValidator(_type)]
# Read from text ('10s'), kept as milliseconds, written back as text ('10000ms') so a dump reads again.
Duration = Annotated[
    int, BeforeValidator(parse_duration_ms), PlainSerializer(lambda ms: f"{ms}ms", return_type=str)
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfileColumn(_Strict):
    """A carried profile column: its type, and the value it takes in outputs when an event has no profile
    or the version's value is null (for text, also empty), which an aggregate key over it needs."""

    type: TypeName
    if_missing: str | int | float | bool | None = None

    @model_validator(mode="after")
    def _if_missing_has_the_columns_type(self) -> ProfileColumn:
        value = self.if_missing
        if value is None:
            return self
        accepted = _IF_MISSING_TYPES.get(self.type)
        if accepted is None:
            raise ValueError(f"if_missing: a {self.type} column takes none")
        wrong = not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted)
        if wrong or (self.type == "numeric" and isinstance(value, str) and not _DECIMAL.match(value)):
            example = _IF_MISSING_EXAMPLES.get(self.type, '"none"')
            raise ValueError(f"if_missing: {value!r} is not a {self.type} value (e.g. {example})")
        return self


def _column(value: Any) -> Any:
    return {"type": value} if isinstance(value, str) else value


class Profile(_Strict):
    table: Table
    key: Identifier
    key_type: Literal["text", "integer", "bigint"] = "text"
    columns: dict[Identifier, Annotated[ProfileColumn, BeforeValidator(_column)]] = Field(min_length=1)

    @property
    def schema_name(self) -> str:
        return self.table.split(".")[0]

    @property
    def table_name(self) -> str:
        return self.table.split(".")[1]

    @model_validator(mode="after")
    def _key_not_a_column(self) -> Profile:
        if self.key in self.columns:
            raise ValueError(f"the key {self.key!r} is carried anyway: remove it from columns")
        return self

    @field_validator("columns")
    @classmethod
    def _not_a_history_column(cls, columns: dict[str, ProfileColumn]) -> dict[str, ProfileColumn]:
        taken = sorted(set(columns) & set(HISTORY_COLUMNS))
        if taken:
            raise ValueError(
                f"{taken[0]!r} names a column of the profile history (docs/history.md): rename it"
            )
        return columns


class Lookup(Profile):
    """A further table an event joins: on an event field, or on a column of the profile or of a table
    declared before it (a foreign-key chain). Its columns come out under `prefix` (default `<name>_`)."""

    join_on: str
    prefix: Identifier | None = None

    @field_validator("join_on")
    @classmethod
    def _join_on_a_reference(cls, on: str) -> str:
        source, _, name = on.partition(".")
        if not name or not _IDENTIFIER.match(source) or not _IDENTIFIER.match(name):
            raise ValueError(
                f"{on!r} is not a reference: write event.FIELD, profile.COLUMN or TABLE.COLUMN (a table "
                "declared before this one)"
            )
        return on


class EventField(_Strict):
    type: TypeName
    required: bool = True


def _field(value: Any) -> Any:
    return {"type": value} if isinstance(value, str) else value


class EventTime(_Strict):
    field: Identifier
    format: Literal["epoch_ms", "epoch_s", "iso8601"] = "epoch_ms"


def _event_time(value: Any) -> Any:
    return {"field": value} if isinstance(value, str) else value


class Limits(_Strict):
    """What a plausible event is: anything else is a dead letter with the reason."""

    max_record_bytes: int = Field(default=64 * 1024, ge=1024, le=1024 * 1024)
    earliest: Annotated[int, BeforeValidator(lambda v: _epoch_ms(v))] = 946_684_800_000  # 2000-01-01
    max_future: Duration = 60_000
    max_count: int = Field(default=1_000_000, ge=1)


def _epoch_ms(value: Any) -> int:
    """An ISO-8601 date or time (YAML may have parsed it already) as epoch milliseconds."""
    import datetime as dt

    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            moment = dt.datetime.fromisoformat(str(value))
        except ValueError:
            raise ValueError(f"not an ISO-8601 time: {value!r} (e.g. 2000-01-01T00:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def _subject(value: Any) -> Any:
    if not isinstance(value, str) or not _SUBJECT.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a registry subject (1 to 255 letters, digits, '.', '_', '-', ':', "
            "starting with a letter or digit)"
        )
    return value


# A subject travels in registry URLs: no '/', no white space, nothing that needs escaping.
_SUBJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")


class Events(_Strict):
    kafka_topic: Topic | None = None
    kinesis_stream: Annotated[str, BeforeValidator(_topic)] | None = None
    # json: one JSON object per record; avro: the Confluent wire format, the writer's schema by id from
    # the registry (docs/avro.md).
    format: Literal["json", "avro"] = "json"
    # The registry subject Avro events are written under; TopicNameStrategy's `<kafka_topic>-value` if unset.
    subject: Annotated[str, BeforeValidator(_subject)] | None = None
    key: Identifier
    time: Annotated[EventTime, BeforeValidator(_event_time)]
    count: Identifier | None = None
    fields: dict[Identifier, Annotated[EventField, BeforeValidator(_field)]] = Field(default_factory=dict)
    limits: Limits = Limits()

    @model_validator(mode="after")
    def _distinct(self) -> Events:
        if self.kafka_topic is None and self.kinesis_stream is None:
            raise ValueError("name the events' kafka_topic, kinesis_stream, or both")
        special = {"key": self.key, "time": self.time.field, **({"count": self.count} if self.count else {})}
        seen: dict[str, str] = {}
        for role, name in special.items():
            if name in seen:
                raise ValueError(f"{name!r} is both the {seen[name]} and the {role} field")
            if name in self.fields:
                raise ValueError(f"{name!r} is the {role} field: remove it from fields")
            seen[name] = role
        if self.subject is not None and self.format != "avro":
            raise ValueError("subject: a subject names Avro events' schemas: add `format: avro` or remove it")
        if self.format == "avro" and self.subject is None and self.kafka_topic is None:
            raise ValueError(
                "subject: Avro events from Kinesis alone need their registry subject named "
                "(the default, `<kafka_topic>-value`, needs a kafka_topic)"
            )
        return self

    @property
    def value_subject(self) -> str | None:
        """The registry subject of Avro events (TopicNameStrategy by default); None for JSON events."""
        if self.format != "avro":
            return None
        return self.subject or f"{self.kafka_topic}-value"


class Cdc(_Strict):
    # json: Debezium's JSON converter, schemas off; avro: Apicurio's Avro converter, the Confluent wire
    # format with the writer's schema by id from the registry (docs/avro.md, "Avro change events").
    format: Literal["json", "avro"] = "json"


class Join(_Strict):
    mode: Literal["event_time", "latest"] = "event_time"
    max_wait: Duration = 10_000
    version_retention: Annotated[Duration, Field(gt=0)] = 7 * 86_400_000


MICRO_BATCH, REALTIME = "micro_batch", "realtime"


class Run(_Strict):
    # micro_batch: Spark micro-batches (every source); realtime: Spark's real-time mode, Kafka events only
    # (docs/decisions/realtime-mode.md). `streamfold run --mode` overrides it.
    mode: Literal["micro_batch", "realtime"] = "micro_batch"


class Enriched(_Strict):
    """The enriched table and topic, and their column names (each defaults to the field's own name)."""

    table: Table | None = None
    topic: Topic | None = None
    key_column: Identifier | None = None
    time_column: Identifier | None = None
    count_column: Identifier | None = None
    event_columns: dict[Identifier, Identifier] = Field(default_factory=dict)
    profile_prefix: str = "profile_"
    valid_from_column: Identifier = "profile_valid_from"
    complete_column: Identifier = "profile_complete"


class Outputs(_Strict):
    # json: the enriched, changelog and aggregate topics' values are JSON objects; avro: the Confluent wire
    # format, with schemas registered under `<topic>-value` (docs/avro.md, "Avro outputs").
    format: Literal["json", "avro"] = "json"
    cdc_topic_prefix: Topic = "cdc"
    connector: Annotated[str, BeforeValidator(_topic)] | None = None
    slot: Identifier | None = None
    publication: Identifier | None = None
    enriched: Enriched = Enriched()
    changelog_topic: Topic | None = None
    dead_letters_topic: Topic | None = None


class Aggregate(_Strict):
    """Totals of the enriched events grouped by some event fields and columns of the profile or of the
    file's tables: a Postgres table and a compacted Kafka topic. A reference is a field's or profile
    column's name, `event.NAME` or `profile.NAME` where both have it, or `TABLE.COLUMN` (a column a table
    of `tables` carries)."""

    name: Identifier
    table: Table | None = None
    topic: Topic | None = None
    group_by: dict[Identifier, str] = Field(min_length=1)
    count_column: Identifier = "count"
    sums: dict[Identifier, str] = Field(default_factory=dict)


class Sample(_Strict):
    """What `streamfold generate` draws sample profiles and events from. A value is a list (one item
    drawn per row; two distinct ones for a text[] column) or a text template: {n} is the row's number,
    {r} a random number in 0..255. A field or column without one gets values of its type."""

    key: str = "{n}"
    values: dict[Identifier, list[Any] | str] = Field(default_factory=dict)


class Pipeline(_Strict):
    """A validated pipeline file."""

    name: Identifier = "events"
    profile: Profile
    tables: dict[Identifier, Lookup] = Field(default_factory=dict)
    events: Events
    cdc: Cdc = Cdc()
    join: Join = Join()
    run: Run = Run()
    outputs: Outputs = Outputs()
    aggregates: list[Aggregate] = Field(default_factory=list)
    sample: Sample = Sample()
    _source: str = PrivateAttr(default=DEFAULT_FILE)
    _lines: dict[tuple[str, ...], int] = PrivateAttr(default_factory=dict)

    def error(self, path: str, message: str) -> PipelineFileError:
        """An error about the key at the dotted `path`, at its line in the file."""
        parts = tuple(path.split("."))
        found = next((parts[:n] for n in range(len(parts), 0, -1) if parts[:n] in self._lines), ())
        return PipelineFileError(f"{self._source}:{self._lines.get(found, 1)}: {path}: {message}")

    def refusal(self, message: str) -> PipelineFileError:
        """An error about the file as a whole."""
        return PipelineFileError(f"{self._source}: {message}")

    @model_validator(mode="after")
    def _tables_join_what_comes_before(self) -> Pipeline:
        """Each table joins an event field or a column of a table declared before it, of a type its key
        takes; so the tables join in the file's order and no chain is circular."""
        prefixes = {self.outputs.enriched.profile_prefix: "profile"}
        for name, table in self.tables.items():
            where = f"tables.{name}"
            if name in _RESERVED_TABLE_NAMES:
                raise ValueError(
                    f"{where}: {name!r} names the events or the profile: name the table otherwise"
                )
            longest = f"{name}_versions_{self.name}"  # its history's view (db/history.py)
            if len(longest) > 63:
                raise ValueError(
                    f"{where}: its history's view {longest!r} is longer than PostgreSQL's 63 characters: "
                    "shorten the table's name or the pipeline's"
                )
            source, _, column = table.join_on.partition(".")
            kind = self._reference_type(source, column, name, f"{where}.join_on")
            if _KEY_FAMILY[kind] != _KEY_FAMILY[table.key_type]:
                raise ValueError(
                    f"{where}.join_on: {table.join_on} is {kind}, and {table.table}'s key {table.key!r} is "
                    f"{table.key_type}: join on a column of the key's type, or set key_type"
                )
            prefix = table.prefix or f"{name}_"
            if prefix in prefixes:
                raise ValueError(
                    f"{where}: its columns would come out as {prefix}*, as {prefixes[prefix]}'s: set prefix"
                )
            prefixes[prefix] = name
        return self

    def _reference_type(self, source: str, column: str, before: str, where: str) -> str:
        """The type of what a table joins on: an event field, the key, or a column of the profile or of a
        table declared before `before`."""
        if source == "event":
            if column == self.events.key:
                return self.key_type
            field = self.events.fields.get(column)
            if field is None:
                known = [self.events.key, *self.events.fields]
                raise ValueError(f"{where}: {column!r} is not an event field{_did_you_mean(column, known)}")
            return self._key_like(field.type, where)
        earlier = list(self.tables)[: list(self.tables).index(before)]
        if source != "profile" and source not in earlier:
            known = ["event", "profile", *earlier]
            raise ValueError(
                f"{where}: {source!r} is not the events, the profile or a table declared before "
                f"{before!r}{_did_you_mean(source, known)}"
            )
        table = self.profile if source == "profile" else self.tables[source]
        if column == table.key:
            return table.key_type
        carried = table.columns.get(column)
        if carried is None:
            hint = _did_you_mean(column, list(table.columns))
            raise ValueError(
                f"{where}: {column!r} is not a column {source} carries{hint}: add it to its columns"
            )
        return self._key_like(carried.type, where)

    @staticmethod
    def _key_like(kind: str, where: str) -> str:
        if kind not in KEY_TYPES:
            raise ValueError(
                f"{where}: a {kind} value cannot be a key: join on a text, integer or bigint one"
            )
        return kind

    @model_validator(mode="after")
    def _references(self) -> Pipeline:
        names = [a.name for a in self.aggregates]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"two aggregates are named {name!r}")
        for i, aggregate in enumerate(self.aggregates):
            for column, ref in aggregate.group_by.items():
                self._check_group_key(ref, f"aggregates.{i}.group_by.{column}")
            for column, ref in aggregate.sums.items():
                source, target = self.resolve(ref, f"aggregates.{i}.sums.{column}")
                field = self.events.fields.get(target) if source == "event" else None
                if field is None or field.type not in NUMBER_TYPES:
                    raise ValueError(f"aggregates.{i}.sums.{column}: {ref!r} is not a numeric event field")
        for name in self.outputs.enriched.event_columns:
            if name not in self.events.fields:
                raise ValueError(
                    f"outputs.enriched.event_columns: {name!r} is not an event field"
                    f"{_did_you_mean(name, list(self.events.fields))}"
                )
        return self

    def _check_group_key(self, ref: str, where: str) -> None:
        """An aggregate key is never null: a required event field, or a column of the profile or of a table
        with if_missing; and of a type the sink can group by."""
        source, target = self.resolve(ref, where)
        kind = self.reference_type(source, target)
        if kind in UNGROUPABLE:
            raise ValueError(f"{where}: the sink cannot group by a {kind} column yet: group by another")
        field = self.events.fields.get(target) if source == "event" else None
        if field is not None and not field.required:
            raise ValueError(
                f"{where}: event field {target!r} is an aggregate key, so it must be required: remove "
                f"`required: false` from events.fields.{target}"
            )
        column = None if source == "event" else self.joined(source).columns[target]
        if column is not None and column.if_missing is None:
            example = _IF_MISSING_EXAMPLES.get(column.type)
            if example is None:
                raise ValueError(f"{where}: a {column.type} column cannot be an aggregate key")
            profile = source == "profile"
            owner, without = ("profile", "a profile") if profile else (f"{source}'s", f"a {source} row")
            section = "profile" if profile else f"tables.{source}"
            raise ValueError(
                f"{where}: {owner} column {target!r} is an aggregate key, so it needs a value for events "
                f"without {without}: add `if_missing: {example}` to {section}.columns.{target}"
            )

    def resolve(self, ref: str, where: str) -> tuple[str, str]:
        """(source, name) for an aggregate's reference: the source is 'event', 'profile' or the name of
        one of the file's tables (`TABLE.COLUMN`, a column the table carries)."""
        source, _, name = ref.rpartition(".")
        if source in self.tables:
            return source, self._table_column(source, name, where)
        event_names = set(self.events.fields) | {self.events.key}
        in_events, in_profile = name in event_names, name in self.profile.columns
        if source == "event" and in_events or (not source and in_events and not in_profile):
            return "event", name
        if source == "profile" and in_profile or (not source and in_profile and not in_events):
            return "profile", name
        if not source and in_events and in_profile:
            raise ValueError(
                f"{where}: {name!r} is an event field and a profile column: write event.{name} or "
                f"profile.{name}"
            )
        if source not in ("", "event", "profile"):
            known = ["event", "profile", *self.tables]
            raise ValueError(
                f"{where}: {source!r} is not the events, the profile or a table of the file"
                f"{_did_you_mean(source, known)}: write event.FIELD, profile.COLUMN or TABLE.COLUMN"
            )
        carried_by = [f"{table}.{name}" for table, lookup in self.tables.items() if name in lookup.columns]
        hint = f" (write {' or '.join(carried_by)})" if carried_by else ""
        known = sorted(event_names | set(self.profile.columns))
        raise ValueError(
            f"{where}: {ref!r} is neither an event field nor a profile column"
            f"{hint or _did_you_mean(name, known)}"
        )

    def _table_column(self, table: str, name: str, where: str) -> str:
        """A column the table carries, by the name a reference gives it."""
        lookup = self.tables[table]
        if name in lookup.columns:
            return name
        if name == lookup.key:
            raise ValueError(
                f"{where}: {name!r} is {table}'s key, which the outputs do not carry: group by what it "
                f"joins on, {lookup.join_on}"
            )
        hint = _did_you_mean(name, list(lookup.columns))
        raise ValueError(
            f"{where}: {name!r} is not a column {table} carries{hint}: add it to tables.{table}.columns"
        )

    def joined(self, source: str) -> Profile:
        """The profile ('profile') or one of the file's tables, by its name."""
        return self.profile if source == "profile" else self.tables[source]

    def reference_type(self, source: str, name: str) -> str:
        """The declared type of a resolved reference (resolve's source and name)."""
        if source != "event":
            return self.joined(source).columns[name].type
        if name == self.events.key:
            return self.key_type
        return self.events.fields[name].type

    @property
    def key_type(self) -> str:
        """The join key's type: the profile key's, declared as profile.key_type (text by default)."""
        return self.profile.key_type


# --- reading a file ----------------------------------------------------------------------------------


# The default pipeline: a link to the repository's streamfold.yaml, and a copy of it in an installed package.
DEFAULT_PATH = Path(__file__).resolve().parent / DEFAULT_FILE


def resolve_path(given: str | Path | None = None) -> Path:
    """--pipeline, else $STREAMFOLD_PIPELINE, else ./streamfold.yaml, else the default pipeline."""
    chosen = given or os.environ.get(PIPELINE_VAR)
    if chosen:
        return Path(chosen)
    for candidate in (Path.cwd() / DEFAULT_FILE, DEFAULT_PATH):
        if candidate.exists():
            return candidate
    raise PipelineFileError(
        f"no pipeline file: pass --pipeline FILE, set {PIPELINE_VAR}, or create ./{DEFAULT_FILE} "
        '(docs/contracts.md "The pipeline file")'
    )


def load(given: str | Path | None = None) -> Pipeline:
    path = resolve_path(given)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)  # never more: a huge file is refused unread
    except OSError as exc:
        raise PipelineFileError(f"{path}: cannot read the pipeline file ({exc.strerror})") from None
    _check_size(len(raw), str(path))
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise PipelineFileError(f"{path}: the pipeline file is not UTF-8 text ({exc.reason})") from None
    return parse(text, str(path))


def parse(text: str, where: str = DEFAULT_FILE) -> Pipeline:
    """A pipeline from YAML text; `where` names it in errors."""
    _check_size(len(text.encode()), where)
    try:
        _check_events(text, where)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise PipelineFileError(f"{where}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if node is None:
        raise PipelineFileError(f"{where}: the pipeline file is empty")
    lines: dict[tuple[str, ...], int] = {}
    _check_keys(node, (), lines, where)
    if not isinstance(data, dict):
        raise PipelineFileError(f"{where}:1: a pipeline file is a mapping (profile:, events:, ...)")
    try:
        pipeline = Pipeline.model_validate(data)
    except ValidationError as exc:
        raise PipelineFileError(_message(exc, lines, where)) from None
    pipeline._source, pipeline._lines = where, lines
    return pipeline


# A pipeline file declares names and types: these bounds are far above any real one, and keep a hostile or
# mistaken file (gigabytes, an alias bomb) to one error, read in a few milliseconds and a few MB.
MAX_FILE_BYTES = 1024 * 1024
MAX_NODES = 20_000
# libyaml's parser where PyYAML has it (it does in the pinned wheels), else PyYAML's own.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)


def _check_size(size: int, where: str) -> None:
    if size > MAX_FILE_BYTES:
        raise PipelineFileError(
            f"{where}: the pipeline file is over {MAX_FILE_BYTES // 2**20} MiB, the limit: it declares names "
            "and types, so keep sample values to a few"
        )


def _check_events(text: str, where: str) -> None:
    """Before any node is built: no anchor or alias (an alias repeats a value without its size in the
    file, the way an alias bomb grows to gigabytes; a pipeline file needs none), and at most MAX_NODES
    values. Stops at the first event past a bound."""
    nodes = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise PipelineFileError(
                f"{where}:{event.start_mark.line + 1}: YAML anchors and aliases (&name, *name) are not "
                "taken in a pipeline file: write the value out"
            )
        nodes += isinstance(event, _NODE_EVENTS)
        if nodes > MAX_NODES:
            raise PipelineFileError(
                f"{where}:{event.start_mark.line + 1}: the pipeline file has over {MAX_NODES:,} values, the "
                "limit: it declares names and types, so keep sample values to a few"
            )


def _check_keys(
    node: yaml.Node, path: tuple[str, ...], lines: dict[tuple[str, ...], int], where: str
) -> None:
    """Records each key's line; a key given twice in one mapping is an error (YAML would keep the last)."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            line = key.start_mark.line + 1
            if name in seen:
                raise PipelineFileError(
                    f"{where}:{line}: {'.'.join((*path, name))} is given twice (also on line {seen[name]}): "
                    "keep one"
                )
            seen[name] = line
            lines[(*path, name)] = line
            _check_keys(value, (*path, name), lines, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_keys(item, (*path, str(i)), lines, where)


def _message(exc: ValidationError, lines: dict[tuple[str, ...], int], where: str) -> str:
    """The first error, at the line of the deepest key the file has on its path."""
    # An unknown key explains a missing one (a typo): say that first.
    error = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    loc = tuple(str(part) for part in error["loc"] if not str(part).startswith("function-"))
    text = str(error["msg"]).removeprefix("Value error, ")
    named = _PATH_IN_MESSAGE.match(text)
    if named:  # a check across fields names the path it is about
        loc, text = (*loc, *named.group(1).split(".")), text[named.end() :]
    found = next((loc[:n] for n in range(len(loc), -1, -1) if loc[:n] in lines), ())
    line = lines.get(found, 1)
    dotted = ".".join(loc) or "the file"
    if error["type"] == "extra_forbidden":
        parent = loc[:-1]
        allowed = _allowed_keys(parent)
        text = f"unknown key {loc[-1]!r}{_did_you_mean(loc[-1], allowed)}" + (
            f"; allowed here: {', '.join(allowed)}" if allowed else ""
        )
    elif error["type"] == "missing":
        text = f"missing: add {loc[-1]}:"
    elif error["type"] == "literal_error":
        text = f"{text}, got {error.get('input')!r}"
    return f"{where}:{line}: {dotted}: {text}"


def _allowed_keys(parent: tuple[str, ...]) -> list[str]:
    """The keys a mapping at this path takes (for the typo hint); [] where it takes any."""
    annotation: Any = Pipeline
    parts = list(parent)
    while True:
        annotation = _unwrap(annotation)
        origin, args = getattr(annotation, "__origin__", None), getattr(annotation, "__args__", ())
        if origin in (list, dict) and args:
            if not parts:
                return []
            parts.pop(0)
            annotation = args[-1]
            continue
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        if not parts:
            return list(annotation.model_fields)
        field = annotation.model_fields.get(parts.pop(0))
        if field is None:
            return []
        annotation = field.annotation


def _unwrap(annotation: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X."""
    while True:
        if hasattr(annotation, "__metadata__"):
            annotation = annotation.__origin__
            continue
        args = getattr(annotation, "__args__", ())
        if type(annotation).__name__ in ("UnionType", "_UnionGenericAlias") and args:
            annotation = next(a for a in args if a is not type(None))
            continue
        return annotation
