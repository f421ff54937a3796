"""The join of several tables as the job runs it: one stateful stage per join of the plan
(common/plan.py), chained in one streaming query over one row shape (docs/decisions/join-cascade.md;
spec/cascade.py is the model, tests/unit/test_stages_spark.py holds the Spark stages to it).

The events and the fold of every table's changes (pipeline/cdc_fold.py fold_tables) are tagged into one
wide row (stage_schema), watermarked as the one-table join's are (pipeline/temporal_join.py), and handed to
io.streamfold.join.TemporalJoin.stages with each stage's spec (stages_spec); in Spark's real-time mode
unwatermarked, to TemporalJoin.stagesRealTime (docs/decisions/realtime-mode.md). Stage k keys an event by its
join's key column j<k>_key: set here from an event field, or written by the stage of the table the chain
reads it from (in the fold's key text). A one-table file never comes here: it keeps the one operator of
pipeline/temporal_join.py, its plan, operator ids and checkpoints.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from common import plan
from common.pipeline_file import Pipeline
from pipeline import cdc_fold, records
from pipeline.field_types import spark_type
from pipeline.join_config import LATEST, JoinConfig
from pipeline.temporal_join import (
    CDC_PROGRESS_METRIC,
    EVENT_PREFIX,
    PROFILE_PREFIX,
    ROCKSDB,
    drift_said,
    event_columns,
    if_missing_value,
    observe_drift,
    project,
    reject_bucket,
    tagged_schema,
    watermarked,
)

_STR, _LONG, _INT, _BOOL = StringType(), LongType(), IntegerType(), BooleanType()
CDC_PROGRESS_MS, RELEASED_BY_MAX_WAIT = records.CDC_PROGRESS_MS, records.RELEASED_BY_MAX_WAIT


def join_columns(j: int) -> dict[str, str]:
    """The wide row's columns of the j-th join (its columns are f"j{j}_<column>")."""
    return {
        "key": f"j{j}_key",  # the key it looks up, in the fold's key text (null: none)
        "key_known": f"j{j}_key_known",
        "valid_from": f"j{j}_valid_from_ms",  # the version found (null: none)
        "known": f"j{j}_known",  # the key and every value of the version known
    }


def stage_schema(pipeline: Pipeline) -> StructType:
    """Every stage's input and output (io.streamfold.join.StageRows): kind, bucket, table, key, ts_ms, lsn,
    event_id, e_<field>..., count, op, the fold's columns of every table (t<i>_<column>), unavailable,
    drifted, the reject columns, progress_ms, then each join's key, key_known, columns, valid_from and
    known, then cdc_progress_ms and released_by_max_wait (an event's release by the first stage)."""
    fold = cdc_fold.tables_fold_type(cdc_fold.tables_spec(pipeline))
    # The one-table operator's row, its profile columns replaced by every table's, and each change's table.
    head = [f for f in tagged_schema(pipeline).fields if not f.name.startswith(PROFILE_PREFIX)]
    after_op = [f.name for f in head].index("op") + 1
    head[after_op:after_op] = fold.fields[
        6 : len(fold.fields) - 4
    ]  # every table's: after lsn, before unavailable
    head.insert(2, StructField("table", _STR))  # after kind and bucket
    return StructType([*head, *_join_fields(plan.of(pipeline))])


def _join_fields(resolved: plan.Plan) -> list[StructField]:
    fields = []
    for j, join in enumerate(resolved.joins):
        named = join_columns(j)
        fields += [StructField(named["key"], _STR), StructField(named["key_known"], _BOOL)]
        fields += [StructField(f"j{j}_{name}", spark_type(c.type)) for name, c in join.table.columns.items()]
        fields += [StructField(named["valid_from"], _LONG), StructField(named["known"], _BOOL)]
    return [*fields, StructField(CDC_PROGRESS_MS, _LONG), StructField(RELEASED_BY_MAX_WAIT, _BOOL)]


def stages_spec(pipeline: Pipeline) -> dict[str, Any]:
    """Each stage's StageRows spec, in the plan's order."""
    resolved = plan.of(pipeline)
    joins, folds = resolved.joins, cdc_fold.tables_spec(pipeline)["tables"]
    tables = [t["table"] for t in folds]
    folded = {t["table"]: t["spec"]["columns"] for t in folds}
    carried = [
        *(f"{EVENT_PREFIX}{name}" for name in pipeline.events.fields),
        *(f.name for f in _join_fields(resolved)),
    ]
    stages = []
    for j, join in enumerate(joins):
        i, fold_names = tables.index(join.table.table), [c["name"] for c in folded[join.table.table]]
        columns = [
            {
                "name": name,
                "type": column.type,
                "from": f"t{i}_{name}",
                "index": fold_names.index(name),
                "to": f"j{j}_{name}",
                **({} if column.if_missing is None else {"if_missing": if_missing_value(name, column)}),
            }
            for name, column in join.table.columns.items()
        ]
        stages.append(
            {
                "table": join.table.table,
                **{entry: name for entry, name in join_columns(j).items()},
                "columns": columns,
                "next": _next_hops(joins, j),
                "carried": carried,
            }
        )
    return {"stages": stages}


def _next_hops(joins: tuple[plan.TableJoin, ...], j: int) -> list[dict[str, Any]]:
    """The later joins whose key is a column of the j-th join's version (or its key: column -1)."""
    join = joins[j]
    columns = list(join.table.columns)
    return [
        {
            "key": join_columns(m)["key"],
            "key_known": join_columns(m)["key_known"],
            "column": -1 if later.on[1] == join.table.key else columns.index(later.on[1]),
        }
        for m, later in enumerate(joins)
        if later.on[0] == join.name
    ]


def join_tables(
    events: DataFrame, cdc: DataFrame, cfg: JoinConfig, pipeline: Pipeline, realtime: bool = False
) -> DataFrame:
    """Events as pipeline/temporal_join.py temporal_join takes them (rejects may ride along) and the fold
    of every table (cdc_fold.fold_tables) -> the last stage's rows (stage_schema): each event once with every
    join's columns, each reject once, and every change and truncate the stages passed on.
    Event time only. realtime: for Spark's real-time mode, as temporal_join's: no watermark, the stages on
    processing-time timers for join.max_wait and version expiry, CDC progress passed from each stage's
    bucket to the same bucket of the next (TemporalJoin.stagesRealTime)."""
    if cfg.mode == LATEST:
        raise ValueError(
            "join.mode latest joins the profile table only: a file with `tables` joins at event time"
        )
    spark = events.sparkSession
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)  # required by transformWithState
    jvm: Any = spark._jvm
    operator = jvm.io.streamfold.join.TemporalJoin
    buckets = operator.REALTIME_BUCKETS if realtime else operator.BUCKETS
    wide = stage_schema(pipeline)
    tagged_cdc = _tag_cdc(_observe_drift(cdc, pipeline), plan.of(pipeline), wide, buckets)
    tagged_cdc = tagged_cdc.observe(CDC_PROGRESS_METRIC, F.max("progress_ms").alias("progress_ms"))
    tagged_events = _tag_events(events, pipeline, wide, buckets)._jdf
    spec = json.dumps(stages_spec(pipeline))
    if realtime:
        joined = operator.stagesRealTime(
            tagged_events, tagged_cdc._jdf, cfg.version_retention_ms, cfg.max_wait_ms, spec
        )
    else:
        tagged_cdc = watermarked(spark, tagged_cdc, wide, cfg.max_wait_ms)
        joined = operator.stages(tagged_events, tagged_cdc._jdf, cfg.version_retention_ms, spec)
    return DataFrame(joined, spark)


def outputs(joined: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The stages' rows (join_tables) as the join's output, records.join_output(pipeline): each event with
    the profile's columns and each further table's under its prefix, the profile's valid_from, and complete
    when every join's key and version were known and CDC progress (not join.max_wait) released it; each
    reject; each version a stage stored, the profile's as the one-table join's change row (its history and
    the changelog), a further table's as a row of its history's kind (plan.History), its values under
    the table's prefix. The raw changes the stages passed on end here."""
    resolved = plan.of(pipeline)
    named, joins = resolved.names, resolved.joins
    known = [F.col(join_columns(j)["known"]) for j in range(len(joins))]
    complete = F.col(RELEASED_BY_MAX_WAIT) == F.lit(False)
    for flag in known:
        complete = complete & flag
    is_version = F.col("kind") == "version"
    kind = F.col("kind")
    for j, history in reversed(list(enumerate(resolved.histories))):
        # A stage's version row has its own join's valid_from set, every other join's null.
        stored_by = is_version & F.col(join_columns(j)["valid_from"]).isNotNull()
        kind = F.when(stored_by, F.lit(history.kind)).otherwise(kind)
    values: dict[str, Column] = {
        "kind": kind,
        "event_id": F.col("event_id"),
        named.key: F.when(is_version, F.col("key")).otherwise(F.col(join_columns(0)["key"])),
        named.time_ms: F.when(~is_version, F.col("ts_ms")),
        **{out: F.col(f"`{EVENT_PREFIX}{name}`") for name, out in named.fields.items()},
        named.count: F.col("count"),
        **{
            join.output(name): F.col(f"`j{j}_{name}`")
            for j, join in enumerate(joins)  # the profile's under its prefix too
            for name in join.table.columns
        },
        named.valid_from_ms: F.when(is_version, F.col("ts_ms")).otherwise(
            F.col(join_columns(0)["valid_from"])
        ),
        # A version's complete is false only when some of its values are unknown (error says which).
        named.complete: F.when(F.col("kind") == "event", complete).when(
            is_version & F.col("error").isNotNull(), F.lit(False)
        ),
        **{f.name: F.col(f.name) for f in records.REJECT.fields},
        "change_op": F.when(is_version, F.col("op")),
        records.CHANGE_LSN: F.when(is_version, F.col("lsn")),
        CDC_PROGRESS_MS: F.col(CDC_PROGRESS_MS),
        RELEASED_BY_MAX_WAIT: F.col(RELEASED_BY_MAX_WAIT),
    }
    kept = joined.where("kind IN ('event', 'reject', 'version')")
    return project(kept, records.join_output(pipeline), values)


def _observe_drift(cdc: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The fold of every table, measured for DRIFT_METRIC as the one-table join's is: a change's drifted
    array indexes its own table's columns, so each is named by the change's table."""
    said: Column | None = None
    for table in cdc_fold.tables_spec(pipeline)["tables"]:
        columns = [c["name"] for c in table["spec"]["columns"]]
        named = drift_said(table["table"], columns)
        said = (F if said is None else said).when(F.col("table") == table["table"], named)
    assert said is not None  # a plan joins at least the profile table
    return observe_drift(cdc, said)


def _tag_events(events: DataFrame, pipeline: Pipeline, wide: StructType, buckets: int) -> DataFrame:
    """Events (and rejects, error set) in the wide row, each join on an event field keyed by it."""
    key, _fields, time_ms, count = event_columns(events, pipeline)  # the parser's, or records.click's
    kind: Column = F.lit("event")
    values: dict[str, Column] = {}
    if "error" in events.columns:
        is_reject = F.col("error").isNotNull()
        kind = F.when(is_reject, F.lit("reject")).otherwise(kind)
        values = {f.name: F.col(f.name) for f in records.REJECT.fields}
        values["bucket"] = reject_bucket(is_reject, "event_id", buckets)
    for j, join in enumerate(plan.of(pipeline).joins):
        source, field = join.on
        if source == plan.EVENT:
            values[join_columns(j)["key"]] = F.col(f"`{field}`").cast(_STR)
            values[join_columns(j)["key_known"]] = F.lit(True)
    return project(
        events,
        wide,
        {
            **{f"{EVENT_PREFIX}{name}": F.col(f"`{name}`") for name in pipeline.events.fields},
            **values,
            "kind": kind,
            "key": F.col(f"`{key}`"),
            "ts_ms": F.col(f"`{time_ms}`"),
            "lsn": F.lit(0),
            "event_id": F.col("event_id"),
            "count": F.coalesce(F.col(f"`{count}`"), F.lit(1)),
            RELEASED_BY_MAX_WAIT: F.lit(False),
        },
    )


def _tag_cdc(cdc: DataFrame, resolved: plan.Plan, wide: StructType, buckets: int) -> DataFrame:
    """The fold of every table (its columns by name), unfoldable records (kind "error") as rejects."""
    is_reject = F.col("kind") == "error"
    folded = {f.name: F.col(f"`{f.name}`") for f in wide.fields if f.name in cdc.columns}
    return project(
        cdc,
        wide,
        {
            **folded,
            "kind": F.when(is_reject, F.lit("reject")).otherwise(F.col("kind")),
            "ts_ms": F.col("valid_from_ms"),
            "lsn": F.coalesce(F.col("lsn"), F.lit(0)),
            "source": F.when(is_reject, F.lit(f"kafka:{resolved.cdc_topic}")),
            "bucket": reject_bucket(is_reject, "event_id", buckets),
        },
    )
