"""What a micro-batch pays on the driver before any task runs, for the parsers' plans: planning
(`executedPlan`) and whole-stage code generation (`doCodeGen`), both redone for every batch.

    .venv/bin/python -m bench.plan_cost

Each plan is built on a one-row static frame and planned afresh several times (as every micro-batch
is); the last runs are printed, warm.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame

from common import pipeline_file as pf
from pipeline import cdc_fold, events
from pipeline import spark as spark_session

RUNS, SHOWN = 8, 3


def codegen_stages(plan: Any, found: list[Any]) -> list[Any]:
    if plan.getClass().getSimpleName() == "WholeStageCodegenExec":
        found.append(plan)
    children = plan.children()
    for i in range(children.size()):
        codegen_stages(children.apply(i), found)
    return found


def measure(name: str, frame: DataFrame) -> None:
    for run in range(RUNS):
        fresh = frame.select("*")  # a new QueryExecution: planned again
        started = time.perf_counter()
        plan = fresh._jdf.queryExecution().executedPlan()
        planned = time.perf_counter()
        stages = codegen_stages(plan, [])
        size = sum(len(stage.doCodeGen()._2().body()) for stage in stages)
        generated = time.perf_counter()
        if run >= RUNS - SHOWN:
            print(
                f"{name}: planning {1000 * (planned - started):.0f} ms, code generation "
                f"{1000 * (generated - planned):.0f} ms ({len(stages)} stage(s), {size:,} characters of Java)"
            )


def main() -> None:
    spark = spark_session.session("plan-cost", {"spark.master": "local[2]"})
    raw_clicks = spark.createDataFrame(
        [("kafka:clicks:0:1", "kafka:clicks", b'{"userid": "u1"}', 1)],
        "event_id string, source string, payload binary, now_ms bigint",
    )
    raw_cdc = spark.createDataFrame(
        [("cdc.public.users", b'{"userid": "u1"}', b"{}", "r1", 1)],
        "topic string, key binary, value binary, event_id string, written_ms bigint",
    )
    measure("events.parse", events.parse(raw_clicks, pf.load().event_spec()))
    measure("cdc_fold.fold", cdc_fold.fold(raw_cdc, pf.load().profile_spec()))
    spark.stop()


if __name__ == "__main__":
    main()
