"""PySpark's worker daemon (pyspark.daemon), without re-reading every zip on sys.path for each task.

Spark starts its Python workers through this module (`spark.python.daemon.module`, pipeline/spark.py).
Why: before each task a worker calls importlib.invalidate_caches(), and on Python 3.11 that makes every
zipimporter re-read its archive's directory in pure Python. The workers' sys.path holds pyspark.zip,
py4j's zip and the spark-core jar (thousands of entries): a fixed CPU cost per task, whatever its size
(docs/decisions/spark-settings.md, "Python out of the per-batch path"; Python 3.12 made this lazy). These
archives do not change while a worker lives, so their importers keep what they read; an archive added
later (addPyFile) is a new path and is read as usual.
"""

from __future__ import annotations

import runpy
import zipimport


def _keep_directory(self: zipimport.zipimporter) -> None:
    """zipimporter.invalidate_caches, minus the re-read."""


if __name__ == "__main__":  # the daemon's process only: the workers it forks inherit this
    zipimport.zipimporter.invalidate_caches = _keep_directory  # type: ignore[method-assign]
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
