"""The job's temporary files (Spark's local dir with its shuffle files, the JVM's temporary folder, what its
processes keep open or mapped under /tmp) are its owner's only, even when whoever starts it keeps the
default umask 022 (the bench's runner starts pipeline.job without the CLI's umask)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamfold import generate
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

TMP = Path("/tmp")
# The JVM's performance counters, one folder shared by every JVM of the user (other programs' too):
# counters, no data.
SHARED = re.compile(r"^/tmp/hsperfdata_")


def group(pid: int) -> list[int]:
    """The processes of the job's process group (the runner, the JVM, the Python workers)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pid:  # the process group id
            members.append(int(stat.parent.name))
    return members


def jvm_folders(pid: int) -> list[Path]:
    """The JVM's java.io.tmpdir and spark.local.dir, from its command line (their defaults: /tmp)."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    temp = next((a.split("=", 1)[1] for a in args if a.startswith("-Djava.io.tmpdir=")), str(TMP))
    local = next((a.split("=", 1)[1] for a in args if a.startswith("spark.local.dir=")), temp)
    return [Path(temp), Path(local)]


def used_under_tmp(pid: int) -> set[Path]:
    """Files under /tmp the process has open or mapped."""
    used: set[Path] = set()
    try:
        links = [Path(p).readlink() for p in Path(f"/proc/{pid}/fd").iterdir()]
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return used
    paths = [*map(str, links), *(line.split()[-1] for line in maps if "/" in line)]
    checkout = str(sp.ROOT.resolve())  # the code and venv it runs, wherever the checkout is: not its files
    return {
        Path(p)
        for p in paths
        if p.startswith("/tmp/") and not SHARED.match(p) and not (p + "/").startswith(checkout + "/")
    }


def open_to_others(paths: list[Path]) -> list[str]:
    """Each path, its folders up to /tmp, and everything under a folder, that group or others may read or
    write (Spark marks the jars it copies executable by all, a+x: harmless inside a private folder)."""
    found = set()
    for path in paths:
        chain = [path, *(p for p in path.parents if p != TMP and TMP in p.parents)]
        inside = list(path.rglob("*")) if path.is_dir() else []
        for each in [*chain, *inside]:
            try:
                if each.lstat().st_mode & 0o066:
                    found.add(f"{each} {oct(each.lstat().st_mode & 0o777)}")
            except FileNotFoundError:
                continue
    return sorted(found)


def test_the_jobs_temporary_files_are_private(streamfold_setup, tmp_path_factory) -> None:
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_private_temp", tmp_path_factory.mktemp("temp"))
    clicks = generate.encoded(generate.ClickSpec(count=2000, users=50))
    generate.send_kafka(streamfold_setup.kafka_bootstrap, clicks, lambda _sent: None, sandbox.clicks_topic)
    with (sandbox.home / "job.log").open("a") as log:
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.job_runner",
                str(sandbox.home / "progress.jsonl"),
                "kafka",
                "micro_batch",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=sandbox.env(),
            cwd=sp.ROOT,
            start_new_session=True,
            umask=0o022,
        )
    try:
        sp.wait_until(lambda: sp.batches(sandbox) > 0, 300, "the job's first batch")
        members = group(job.pid)
        jvm = next(
            p for p in members if "SparkSubmit" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
        )
        folders = jvm_folders(jvm)
        assert all(not f.samefile(TMP) for f in folders), f"the job writes straight into /tmp: {folders}"
        # The test's own folders (the sandbox's home, the job's log) are pytest's, not the job's.
        ours = tmp_path_factory.getbasetemp()
        used = [p for pid in members for p in used_under_tmp(pid) if not p.is_relative_to(ours)]
        assert not open_to_others([*folders, *used])
    finally:
        sp.kill9(job)
