"""`python -m bench.job_runner PROGRESS_FILE [KEY=VALUE ...]`: `streamfold run --source kafka [--conf ...]`,
logging every query progress.

The job is streamfold's own (pipeline.job.run, continuous, 1 s trigger); the only addition is a listener
that appends each StreamingQueryProgress as one JSON line, which the benchmark reads for timings.
SIGINT stops it like Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.sql.streaming import StreamingQueryListener

from pipeline import job
from pipeline import spark as spark_session
from streamfold import config

SOURCE = "kafka"


class ProgressLog(StreamingQueryListener):
    def __init__(self, path: Path) -> None:
        self.out = path.open("a")

    def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's API)
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        self.out.write(event.progress.json.replace("\n", " ") + "\n")
        self.out.flush()

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass


def main(progress_file: str, conf: dict[str, str]) -> int:
    # job.run builds its session with getOrCreate: creating it first (same name, same conf) lets us
    # attach the listener before any query starts.
    spark = spark_session.session(f"streamfold-{SOURCE}", conf)
    spark.streams.addListener(ProgressLog(Path(progress_file)))
    try:
        job.run(config.load(), SOURCE, once=False, conf=conf, echo=print)
    except (KeyboardInterrupt, Py4JError):
        pass  # a SIGINT can surface as either, depending on where the driver was waiting
    except job.JobError as exc:
        print(f"job failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])))
