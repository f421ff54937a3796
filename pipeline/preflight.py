"""What `streamfold run` would refuse in a pipeline file, found without Spark or any service, so that
`check` and `setup` refuse it first: `setup` must never apply a file the job then refuses (its recorded
file would then hold the installation to a file no job runs).

`check_plan` builds what the job builds from the file (the parsers' row types, the join's spec and output,
the sink's spec), with the same functions the job uses; each of their refusals is a PipelineFileError."""

from __future__ import annotations

from common import pipeline_file as pf
from pipeline import cdc_fold, events, records, sink_spec, temporal_join

# The job joins the profile alone so far: a file's further tables are read, validated and compiled
# (common/join_plan.py, spec/several_tables.py), but nothing captures or joins them yet.
SEVERAL_TABLES = (
    "tables: this version joins the profile table only; joining further tables is being built "
    '(docs/join-semantics.md, "Several tables"): remove `tables` to run this file'
)


def check_plan(pipeline: pf.Pipeline) -> None:
    if pipeline.tables:
        raise pipeline.error("tables", SEVERAL_TABLES)
    try:
        events.parse_type(pipeline.event_spec())
        cdc_fold.fold_type(pipeline.profile_spec())
        sink_spec.sink_spec(pipeline, records.join_output(pipeline))
        temporal_join.join_spec(pipeline)
    except pf.PipelineFileError:
        raise
    except ValueError as exc:
        raise pipeline.refusal(f"the job cannot run this file: {exc}") from None
