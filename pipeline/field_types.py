"""The column types a pipeline file may declare, and the Spark type each is carried as in the job.

One name per type everywhere: the pipeline file, the JVM specs (the parsers and the fold take each field's
type by this name), the Spark schemas and the Postgres columns.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
)

# Times travel as epoch microseconds (UTC); numeric as its decimal text (no precision is lost on the way
# to a Postgres numeric); jsonb as JSON text.
SPARK_TYPES: dict[str, DataType] = {
    "text": StringType(),
    "integer": IntegerType(),
    "bigint": LongType(),
    "double": DoubleType(),
    "numeric": StringType(),
    "boolean": BooleanType(),
    "timestamptz": LongType(),
    "timestamp": LongType(),
    "text[]": ArrayType(StringType()),
    "jsonb": StringType(),
}


def spark_type(name: str) -> DataType:
    """The Spark type a declared column type is carried as; KeyError for an unknown name."""
    return SPARK_TYPES[name]
