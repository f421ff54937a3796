package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.math.BigDecimal;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import org.junit.jupiter.api.Test;

/** The aggregate records' text, as pipeline/aggregates.py (Python's str and json.dumps) writes it. */
class AggregateTopicsTest {
  @Test
  void floatsAsPythonsRepr() {
    assertEquals("1.0", AggregateTopics.pythonFloat(1.0));
    assertEquals("-2.5", AggregateTopics.pythonFloat(-2.5));
    assertEquals("0.0001", AggregateTopics.pythonFloat(0.0001));
    assertEquals("1e-05", AggregateTopics.pythonFloat(0.00001));
    assertEquals("1.5e-07", AggregateTopics.pythonFloat(1.5e-7));
    assertEquals("1000000000000000.0", AggregateTopics.pythonFloat(1e15));
    assertEquals("1e+16", AggregateTopics.pythonFloat(1e16));
    assertEquals("-1.25e+20", AggregateTopics.pythonFloat(-1.25e20));
    assertEquals("123456789.125", AggregateTopics.pythonFloat(123456789.125));
    assertEquals("0.1", AggregateTopics.pythonFloat(0.1));
    assertEquals("-0.0", AggregateTopics.pythonFloat(-0.0));
    assertEquals("\"nan\"", AggregateTopics.json(Double.NaN));
    assertEquals("\"-inf\"", AggregateTopics.json(Double.NEGATIVE_INFINITY));
  }

  @Test
  void valuesAsJsonDumps() {
    assertEquals("\"a\\\"b\\\\c\\n\\u0001\\u00e9\\u20ac\"", AggregateTopics.json("a\"b\\c\n\u0001é€"));
    assertEquals("12.50", AggregateTopics.json(new BigDecimal("12.50")));
    assertEquals("42", AggregateTopics.json(42L));
    assertEquals("true", AggregateTopics.json(true));
    assertEquals("null", AggregateTopics.json(null));
    assertEquals("\"2026-01-02T03:04:05.000006Z\"",
        AggregateTopics.json(OffsetDateTime.of(2026, 1, 2, 4, 4, 5, 6_000, ZoneOffset.ofHours(1))));
    assertEquals("2026-01-02T03:04:05.000000", AggregateTopics.text(LocalDateTime.of(2026, 1, 2, 3, 4, 5)));
    assertEquals("true", AggregateTopics.text(true));
  }
}
