"""The tests' murmur2 placement is Java's: checked against kafka-clients' own Utils.murmur2 in the JVM."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import SparkSession

from tests.support.kafka import java_partition, murmur2

pytestmark = pytest.mark.spark


def test_murmur2_is_the_java_clients_hash(spark: SparkSession) -> None:
    utils = spark._jvm.org.apache.kafka.common.utils.Utils  # type: ignore[union-attr]
    rng = random.Random(14)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"User_1", "é|ü/ø".encode()]
    keys += [rng.randbytes(rng.randint(0, 40)) for _ in range(500)]
    for key in keys:
        assert murmur2(key) == utils.murmur2(bytearray(key)) & 0xFFFFFFFF, key
        assert java_partition(key, 3) == utils.toPositive(utils.murmur2(bytearray(key))) % 3, key
