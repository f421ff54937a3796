"""PostgreSQL with logical decoding, its own data dir and pg_hba rules (run as the `postgres` OS user
when we are root)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import psycopg

from common.config import DEBEZIUM_ROLE
from stack.home import PG_DATABASE, PG_USER, StackError, write_private
from stack.prerequisites import pg_bindir
from stack.processes import STOP_TIMEOUT, read_pid, terminate, verified_pid
from stack.service import Service

# No "replication" line: physical replication (pg_basebackup, a copy of the whole cluster) is refused
# to every role. Debezium's logical replication connection matches the database name like any other.
# No `replication` line: nobody can take a physical copy of the cluster (pg_basebackup). The Debezium role
# connects to its database only (its logical replication connection matches that database's line).
PG_HBA = f"""\
# TYPE  DATABASE       USER                 ADDRESS       METHOD   (written by `streamfold stack up`)
host    {PG_DATABASE}     {DEBEZIUM_ROLE}  127.0.0.1/32  scram-sha-256
host    all            {DEBEZIUM_ROLE}  all           reject
local   all            {DEBEZIUM_ROLE}                reject
local   all            all                  scram-sha-256
host    all            all                  127.0.0.1/32  scram-sha-256
"""


# The WAL a replication slot may hold back (docs/guarantees.md, "Replication slots"); the compose stack's
# compose/postgres-entrypoint.sh sets the same.
MAX_SLOT_WAL_KEEP_SIZE = "4GB"


class Postgres(Service):
    name = "postgres"
    port_names = ("postgres",)
    health_timeout = 60.0

    @property
    def data(self) -> Path:
        return self.stack.path("data", "postgres")

    @property
    def marker(self) -> str:
        return str(self.data)

    def endpoint(self) -> str:
        return f"127.0.0.1:{self.stack.ports['postgres']}"

    def pid(self) -> int | None:
        # The postmaster records itself; pg_ctl only forks it.
        return verified_pid(read_pid(self.data / "postmaster.pid"), self.marker)

    def _os_user(self) -> pwd.struct_passwd | None:
        """Postgres refuses to run as root: as root, run it as the `postgres` OS user."""
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam("postgres")
        except KeyError:
            raise StackError(
                "running as root needs a `postgres` OS user (Debian package postgresql)"
            ) from None

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = self._os_user()
        return subprocess.run(
            [str(pg_bindir() / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.stack.home,
            start_new_session=True,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )

    def _give_to_postgres(self, *paths: Path) -> None:
        user = self._os_user()
        if user is None:
            return
        for path in paths:
            os.chown(path, user.pw_uid, user.pw_gid)

    def _check_reachable(self, user: pwd.struct_passwd) -> None:
        groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
        for folder in [self.stack.home, *self.stack.home.parents]:
            st = folder.stat()
            if st.st_uid == user.pw_uid:
                bit = stat.S_IXUSR
            else:
                bit = stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH
            if not st.st_mode & bit:
                raise StackError(
                    f"postgres runs as OS user `postgres`, which cannot enter {folder}: "
                    f"chmod o+x {folder} or choose a STREAMFOLD_HOME it can reach"
                )

    def prepare(self) -> None:
        user = self._os_user()
        if user is not None:
            self._check_reachable(user)
        run_dir = self.stack.path("run")
        self.log.touch(mode=0o600)
        self.log.chmod(0o600)  # it records failing statements, with their rows
        self._give_to_postgres(run_dir, self.log)
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        (self.data / "streamfold.conf").write_text(self._config())
        (self.data / "pg_hba.conf").write_text(PG_HBA)
        self._give_to_postgres(self.data / "streamfold.conf", self.data / "pg_hba.conf")

    def _initdb(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(mode=0o700)
        pwfile = self.stack.path("run", "initdb.pw")
        write_private(pwfile, self.stack.secrets["STREAMFOLD_PG_PASSWORD"] + "\n")
        self._give_to_postgres(self.data, pwfile)
        try:
            result = self._run(
                "initdb", "-D", str(self.data), "--auth=scram-sha-256", f"--username={PG_USER}",
                f"--pwfile={pwfile}", "--encoding=UTF8", "--no-locale",
            )  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise StackError(f"initdb failed:\n{result.stdout}{result.stderr}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude = 'streamfold.conf'\n")

    def _config(self) -> str:
        return "\n".join(
            [
                "# Written by `streamfold stack up` at every start.",
                "listen_addresses = '127.0.0.1'",
                f"port = {self.stack.ports['postgres']}",
                f"unix_socket_directories = '{self.stack.path('run')}'",
                "unix_socket_permissions = 0700",
                "log_file_mode = 0600",
                "wal_level = logical",
                "max_replication_slots = 10",
                "max_wal_senders = 10",
                # A slot no consumer reads keeps its WAL; past this much the slot is invalidated instead of
                # filling the disk (docs/guarantees.md, "Replication slots").
                f"max_slot_wal_keep_size = {MAX_SLOT_WAL_KEEP_SIZE}",
                # When each transaction committed (pg_xact_commit_timestamp): when a row became visible,
                # which the benchmark's latency reads.
                "track_commit_timestamp = on",
                "",
            ]
        )

    def launch(self) -> None:
        # -w: returns once the server accepts connections (about a second).
        result = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        if result.returncode != 0:
            raise StackError(f"postgres failed to start; last lines of {self.log}:\n{self.log_tail()}")

    def _connect(self, dbname: str) -> psycopg.Connection[tuple[object, ...]]:
        dsn = self.stack.pg_dsn.rsplit("/", 1)[0] + f"/{dbname}"
        return psycopg.connect(dsn, connect_timeout=3, autocommit=True)

    def healthy(self) -> bool:
        try:
            with self._connect("postgres") as conn:
                conn.execute("select 1")
        except psycopg.Error:
            return False
        return True

    def after_healthy(self) -> None:
        with self._connect("postgres") as conn:
            if not conn.execute("select 1 from pg_database where datname = %s", [PG_DATABASE]).fetchone():
                conn.execute(f'create database "{PG_DATABASE}"')

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", str(int(STOP_TIMEOUT)), "stop")
        if verified_pid(pid, self.marker) is not None:
            terminate(pid)
