"""`python -m bench.job_runner PROGRESS_FILE SOURCE MODE [KEY=VALUE ...]`: `streamfold run --source SOURCE
--mode MODE [--conf ...]`, logging every query progress.

The job is streamfold's own (pipeline.job.run, continuous); the only addition is the setting that makes its
progress listener append each StreamingQueryProgress as one JSON line, which the benchmark reads for timings.
SIGINT stops it like Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

from common import config
from pipeline import job
from pipeline import spark as spark_session


def main(progress_file: str, source: str, mode: str, conf: dict[str, str]) -> int:
    # The job's own JVM listener appends every progress to the file (pipeline/spark.py).
    conf = {**conf, spark_session.PROGRESS_LOG_CONF: str(Path(progress_file).resolve())}
    try:
        job.run(config.load(), source, once=False, conf=conf, echo=print, mode=mode)
    except KeyboardInterrupt:
        pass  # a SIGINT before the job took over SIGINT (while the Spark session starts)
    except job.JobError as exc:
        print(f"job failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4], dict(arg.split("=", 1) for arg in sys.argv[4:])))
