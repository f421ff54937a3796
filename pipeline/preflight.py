"""What `streamfold run` would refuse in a pipeline file, found without Spark or any service, so that
`check` and `setup` refuse it first: `setup` must never apply a file the job then refuses (its recorded
file would then hold the installation to a file no job runs).

`check_plan` builds what the job builds from the file (the parsers' row types, the join's spec and output,
the sink's spec), with the same functions the job uses; each of their refusals is a PipelineFileError."""

from __future__ import annotations

from common import pipeline_file as pf
from common import plan
from pipeline import cdc_fold, events, records, sink_spec, stages, temporal_join

# The stages join at event time only (pipeline/stages.py join_tables).
LATEST_TABLES = "join.mode latest joins the profile table only: a file with `tables` joins at event time"


def check_plan(pipeline: pf.Pipeline) -> None:
    resolved = plan.of(pipeline)
    try:
        events.parse_type(resolved.event_spec)
        cdc_fold.fold_type(resolved.profile_spec)
        sink_spec.sink_spec(resolved, records.join_output(pipeline))
        temporal_join.join_spec(pipeline)
        if pipeline.tables:
            _check_tables(pipeline)
    except pf.PipelineFileError:
        raise
    except ValueError as exc:
        raise pipeline.refusal(f"the job cannot run this file: {exc}") from None


def _check_tables(pipeline: pf.Pipeline) -> None:
    """What the job builds for a file with `tables`: the fold of every table and each stage's spec."""
    if pipeline.join.mode == "latest":
        raise pipeline.error("join.mode", LATEST_TABLES)
    cdc_fold.tables_spec(pipeline)
    stages.stages_spec(pipeline)
