"""One local Spark session for every unit test that asks for `spark`: the job's settings and jars (the Java
join operator among them), two shuffle partitions."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.spark import session as job_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Python workers need this venv (pandas, pyarrow)
    conf = {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
    session = job_session("streamfold-unit", conf)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
