"""The compose stack's secrets: generated on its first start into volumes, read by the other services.

`python -m streamfold.compose_secrets` (the `secrets` service of compose/docker-compose.yml) writes,
once, the passwords the local stack keeps in `secrets.json`, into SECRETS_DIR and JOB_DIR:

- SECRETS_DIR/secrets.env: every password a person or a host-side client needs (README, "Run with
  Docker": `docker compose exec kafka cat /run/streamfold/secrets.env`);
- SECRETS_DIR/postgres.password: the superuser's, for initdb;
- SECRETS_DIR/kafka.env, connect.env: what the broker and the Connect worker log in with;
- SECRETS_DIR/registry.properties: the schema registry's settings, its user's password among them;
- SECRETS_DIR/setup.env: `streamfold setup`'s settings (the superuser DSN), as STREAMFOLD_ENV_FILE;
- JOB_DIR/pipeline.env: the job's (the writer's DSN): the job's container never holds the superuser's.

A volume already holding secrets.env keeps its passwords, so they outlive `docker compose down` (not
`down -v`, which removes the data they protect too); a password or file a later version added (the
schema registry's) is added to it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from common import config, registry

# Where the compose network's services listen (compose/docker-compose.yml).
PG_HOST = "postgres:5432"
# Where the services mount the two volumes: every service its own needs, the job only JOB_DIR.
SECRETS_DIR = Path("/run/streamfold")
JOB_DIR = Path("/run/streamfold-job")
PG_DATABASE = "streamfold"
PG_SUPERUSER = "streamfold"
SUPERUSER_PASSWORD = "STREAMFOLD_PG_PASSWORD"
BROKER_PASSWORD = config.KAFKA_BROKER_PASSWORD_VAR
PASSWORD_NAMES = config.STACK_PASSWORD_VARS
# The registry's container (compose/docker-compose.yml): its API on the compose network, its management
# port (the healthcheck's) on the container's loopback, its H2 file in its volume.
REGISTRY_LISTEN = registry.Listen("0.0.0.0", 8080, "127.0.0.1", 9000)
REGISTRY_DATA = Path("/var/lib/registry")


def generate() -> dict[str, str]:
    """A new password for every name the stack keeps."""
    return config.new_passwords(PASSWORD_NAMES)


def env_text(values: dict[str, str]) -> str:
    return "".join(f"export {key}={value}\n" for key, value in values.items())


def dsn(user: str, password: str) -> str:
    return f"postgresql://{user}:{password}@{PG_HOST}/{PG_DATABASE}"


def clients(values: dict[str, str]) -> dict[str, str]:
    """What every streamfold client reads: the roles', Kafka's and Connect's credentials."""
    users = dict.fromkeys(config.LOGIN_VARS, config.CLIENT_USER)
    return {**users, **{name: values[name] for name in config.SECRET_VARS}}


def registry_settings(values: dict[str, str]) -> dict[str, object]:
    login = config.Login(config.CLIENT_USER, values[config.REGISTRY_PASSWORD_VAR])
    return registry.properties(REGISTRY_LISTEN, REGISTRY_DATA, Path("/tmp"), login)


def files(
    values: dict[str, str], secrets_dir: Path = SECRETS_DIR, job_dir: Path = JOB_DIR
) -> dict[Path, str]:
    """Every file and its text; secrets.env last (written last: it marks the set complete)."""
    writer = values[config.PASSWORD_VARS[config.WRITER_ROLE]]
    kafka = {name: values[name] for name in (config.KAFKA_PASSWORD_VAR, BROKER_PASSWORD)}
    connect_names = (
        config.KAFKA_PASSWORD_VAR,
        config.CONNECT_PASSWORD_VAR,
        "STREAMFOLD_DEBEZIUM_PASSWORD",
        config.REGISTRY_PASSWORD_VAR,  # the Avro converter's login (cdc.format avro)
    )
    superuser = {"STREAMFOLD_PG_DSN": dsn(PG_SUPERUSER, values[SUPERUSER_PASSWORD]), **clients(values)}
    return {
        job_dir / "pipeline.env": env_text(
            {"STREAMFOLD_PG_DSN": dsn(config.WRITER_ROLE, writer), **clients(values)}
        ),
        secrets_dir / "postgres.password": values[SUPERUSER_PASSWORD] + "\n",
        secrets_dir / "kafka.env": env_text(kafka),
        secrets_dir / "connect.env": env_text({name: values[name] for name in connect_names}),
        secrets_dir / "registry.properties": registry.properties_text(registry_settings(values)),
        secrets_dir / "setup.env": env_text(superuser),
        secrets_dir / "secrets.env": env_text(
            {SUPERUSER_PASSWORD: values[SUPERUSER_PASSWORD], **clients(values)}
        ),
    }


def kept(secrets_dir: Path, job_dir: Path) -> dict[str, str]:
    """The passwords an earlier start wrote (its .env files hold every one), none if it did not finish."""
    if not (secrets_dir / "secrets.env").exists():
        return {}
    values: dict[str, str] = {}
    for path in (*sorted(secrets_dir.glob("*.env")), *sorted(job_dir.glob("*.env"))):
        values.update(config.parse_env(path.read_text()))
    return {name: values[name] for name in PASSWORD_NAMES if values.get(name)}


def write(secrets_dir: Path, job_dir: Path) -> bool:
    """Write the files unless every password and file is there as this version writes it; True if they
    were written. Passwords an earlier start wrote are kept, so a file that changed between versions (a
    service given another secret) is written again with them. Readable by the services' users (each image
    has its own): the volumes are reachable only by the containers mounting them and root on the host."""
    old = kept(secrets_dir, job_dir)
    values = {**config.new_passwords(name for name in PASSWORD_NAMES if name not in old), **old}
    texts = files(values, secrets_dir, job_dir)
    if len(old) == len(PASSWORD_NAMES) and all(p.exists() and p.read_text() == t for p, t in texts.items()):
        return False
    for path, text in texts.items():
        path.write_text(text)
        path.chmod(0o644)
    return True


def main() -> int:
    made = write(SECRETS_DIR, JOB_DIR)
    print("secrets generated" if made else "secrets kept from an earlier start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
