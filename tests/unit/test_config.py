"""common/config.py: where settings come from (the environment, then the local stack's stack.env)."""

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from common import config, kafka_logs

SETTINGS = (
    *config.ENDPOINT_VARS,
    *config.SECRET_VARS,
    *config.LOGIN_VARS,
    *config.AWS_VARS,
    *config.INPUT_VARS,
    "AWS_REGION",
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty STREAMFOLD_HOME and none of the settings in the environment."""
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))
    return tmp_path


def write_stack_env(home: Path, **values: str) -> None:
    config.stack_env_file(home).write_text("".join(f"export {k}={v}\n" for k, v in values.items()))


def test_the_environment_wins_over_stack_env_which_wins_over_the_default(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert config.lookup("STREAMFOLD_KINESIS_ENDPOINT", "fallback") == "fallback"
    write_stack_env(home, STREAMFOLD_KINESIS_ENDPOINT="http://from-file:1")
    assert config.lookup("STREAMFOLD_KINESIS_ENDPOINT", "fallback") == "http://from-file:1"
    monkeypatch.setenv("STREAMFOLD_KINESIS_ENDPOINT", "http://from-env:2")
    assert config.lookup("STREAMFOLD_KINESIS_ENDPOINT", "fallback") == "http://from-env:2"


def test_a_missing_setting_names_itself_and_the_way_out(home: Path) -> None:
    with pytest.raises(config.ConfigError, match="STREAMFOLD_PG_DSN is not set.*streamfold stack up"):
        config.load()


def test_stack_env_lines_may_be_quoted_commented_or_bare(home: Path) -> None:
    config.stack_env_file(home).write_text(
        "# written by streamfold stack up\n"
        "export STREAMFOLD_PG_DSN='postgresql://a@127.0.0.1:1/db'\n"
        'STREAMFOLD_KAFKA_BOOTSTRAP="127.0.0.1:2"\n'
        "  export STREAMFOLD_CONNECT_URL = http://127.0.0.1:3/  \n"
        "not a setting\n"
    )
    settings = config.load()
    assert settings.pg_dsn == "postgresql://a@127.0.0.1:1/db"
    assert settings.kafka_bootstrap == "127.0.0.1:2"
    assert settings.connect_url == "http://127.0.0.1:3"  # without the trailing slash
    assert settings.kinesis_endpoint == ""  # optional: Kafka-only deployments have none
    assert settings.home == home.resolve()


def without_logging(settings: config.ClientSettings) -> config.ClientSettings:
    """The settings but the logger and error_cb every client gets (common/kafka_logs.py)."""
    assert set(kafka_logs.client_logging()) <= set(settings)
    return {k: v for k, v in settings.items() if k not in kafka_logs.client_logging()}


def test_kafka_and_connect_clients_log_in_with_the_stacks_credentials(home: Path) -> None:
    write_stack_env(home, STREAMFOLD_KAFKA_PASSWORD="kafka-secret", STREAMFOLD_CONNECT_PASSWORD="rest-secret")
    assert without_logging(config.kafka_client_settings("127.0.0.1:1")) == {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "streamfold",
        "sasl.password": "kafka-secret",
    }
    assert config.spark_kafka_options()["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="streamfold" password="kafka-secret";'
    )
    assert config.connect_auth() == ("streamfold", "rest-secret")


def test_without_passwords_clients_connect_without_credentials(home: Path) -> None:
    assert without_logging(config.kafka_client_settings("127.0.0.1:1")) == {
        "bootstrap.servers": "127.0.0.1:1"
    }
    assert config.spark_kafka_options() == {}
    assert config.connect_auth() is None


def test_role_dsns_keep_the_server_and_database_and_quote_the_password(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMFOLD_PG_DSN", "host=db.example port=6543 dbname=sf user=admin password=x")
    monkeypatch.setenv("STREAMFOLD_KAFKA_BOOTSTRAP", "k:9092")
    monkeypatch.setenv("STREAMFOLD_CONNECT_URL", "http://c:8083")
    monkeypatch.setenv("STREAMFOLD_WRITER_PASSWORD", "it's a 'pass word'\\")
    write_stack_env(home, STREAMFOLD_READER_PASSWORD="reader-secret")
    settings = config.load()
    writer = conninfo_to_dict(settings.writer_dsn)
    assert writer == {
        "host": "db.example",
        "port": "6543",
        "dbname": "sf",
        "user": config.WRITER_ROLE,
        "password": "it's a 'pass word'\\",
    }
    assert conninfo_to_dict(settings.reader_dsn)["user"] == config.READER_ROLE
    assert conninfo_to_dict(settings.reader_dsn)["password"] == "reader-secret"


def test_aws_settings_take_the_standard_variables_then_stack_env(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_stack_env(
        home,
        STREAMFOLD_KINESIS_ENDPOINT="http://127.0.0.1:4567",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="file-key",
        AWS_SECRET_ACCESS_KEY="file-secret",
    )
    assert config.aws_settings() == {
        "endpoint_url": "http://127.0.0.1:4567",
        "region_name": "us-east-1",
        "aws_access_key_id": "file-key",
        "aws_secret_access_key": "file-secret",
    }
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    assert config.aws_settings()["region_name"] == "eu-west-1"
    assert config.aws_settings()["aws_access_key_id"] == "env-key"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert config.aws_settings()["region_name"] == "ap-south-1"


def test_the_clicks_come_from_the_contracts_topic_and_stream_unless_told_otherwise(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_stack_env(
        home,
        STREAMFOLD_PG_DSN="postgresql://a@h/db",
        STREAMFOLD_KAFKA_BOOTSTRAP="k:1",
        STREAMFOLD_CONNECT_URL="http://c",
    )
    assert (config.load().clicks_topic, config.load().clicks_stream) == ("clicks", "clicks")
    monkeypatch.setenv("STREAMFOLD_CLICKS_TOPIC", "clicks-eu")
    monkeypatch.setenv("STREAMFOLD_CLICKS_STREAM", "clicks-us")
    assert (config.load().clicks_topic, config.load().clicks_stream) == ("clicks-eu", "clicks-us")


def test_without_an_endpoint_boto3_uses_aws_itself(home: Path) -> None:
    assert config.aws_settings()["endpoint_url"] is None
