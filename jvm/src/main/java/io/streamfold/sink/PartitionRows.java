package io.streamfold.sink;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One partition of a micro-batch of the join's output, read once and turned into what the sink writes, as
 * the sink spec lays it out (Layout): the events as binary COPY rows for the enriched table, each aggregate's
 * totals, the rejected records as CSV for the dead letters table, the profile changes (and a further table's
 * versions) as CSV for their history table, and every Kafka record (the enriched
 * topic for an event, the changelog for a profile change, the dead letters topic for a reject).
 */
final class PartitionRows {
  private static final UTF8String EVENT = UTF8String.fromString("event");
  private static final UTF8String REJECT = UTF8String.fromString("reject");
  private static final UTF8String CHANGE = UTF8String.fromString("change");
  private static final UTF8String DELETE = UTF8String.fromString("d");

  final PgBinary enrichedRows;
  final PgCsv deadCsv = new PgCsv();
  /** Per history, the partition's versions by (key, valid_from, lsn): one stored again replaces it, as in
   * the join's state (the join emits a key's versions of a step in version order, a replaced one before). */
  private final List<Map<List<Object>, InternalRow>> histories = new ArrayList<>();
  /** A history's row kind -> its index (SinkSpec.histories). */
  private final Map<UTF8String, Integer> historyKinds = new HashMap<>();
  final List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
  final GroupTotals[] totals;
  long released;
  long changes;
  private final Layout layout;
  private final String enrichedTopic;
  private final String changelogTopic;
  private final String deadLettersTopic;

  PartitionRows(Layout layout) {
    this.layout = layout;
    this.enrichedRows = new PgBinary(layout.enriched.length);
    this.totals = new GroupTotals[layout.groups.length];
    for (int i = 0; i < totals.length; i++) {
      totals[i] = new GroupTotals(layout.groups[i]);
    }
    this.enrichedTopic = layout.spec.enriched().topic();
    this.changelogTopic = layout.spec.changelog().topic();
    this.deadLettersTopic = layout.spec.deadLetters().topic();
    for (SinkSpec.History h : layout.spec.histories()) {
      historyKinds.put(UTF8String.fromString(h.kind()), histories.size());
      histories.add(new LinkedHashMap<>());
    }
  }

  long events() {
    return enrichedRows.rows();
  }

  long dead() {
    return deadCsv.rows();
  }

  boolean isEmpty() {
    return events() == 0 && dead() == 0 && changes == 0;
  }

  /** A row of the join's output; the row object may be reused by the iterator after this returns. */
  void add(InternalRow row) {
    UTF8String kind = row.getUTF8String(layout.kind);
    if (EVENT.equals(kind)) {
      addEvent(row);
    } else if (REJECT.equals(kind)) {
      addReject(row);
    } else if (CHANGE.equals(kind)) {
      addChange(row);
    } else if (historyKinds.containsKey(kind)) {
      addVersion(row, historyKinds.get(kind));
    } else {
      throw new IllegalStateException("the join's output has a row of kind " + kind);
    }
  }

  private void addEvent(InternalRow row) {
    Layout.Field[] columns = layout.enriched;
    enrichedRows.row(row, columns);
    if (!row.isNullAt(layout.complete) && !row.getBoolean(layout.complete)) {
      released++;
    }
    for (GroupTotals group : totals) {
      group.add(row);
    }
    records.add(new ProducerRecord<>(enrichedTopic, key(row, layout.enrichedKey),
        value(row, columns, layout.enrichedAvro)));
  }

  /** A topic record's value: Avro when the topic has a schema (outputs.format avro), else JSON. */
  private static byte[] value(InternalRow row, Layout.Field[] columns, AvroValues avro) {
    if (avro != null) {
      return avro.encode(row);
    }
    Values.Json json = new Values.Json();
    for (Layout.Field column : columns) {
      json.column(row, column);
    }
    return json.bytes();
  }

  private void addChange(InternalRow row) {
    // A delete is the key's tombstone.
    byte[] value = DELETE.equals(row.getUTF8String(layout.op)) ? null
        : value(row, layout.changelog, layout.changelogAvro);
    records.add(new ProducerRecord<>(changelogTopic, key(row, layout.changelogKey), value));
    addVersion(row, 0);
  }

  /** A version for the h-th history table. */
  private void addVersion(InternalRow row, int h) {
    List<Object> version = new ArrayList<>();
    for (int c = 0; c < layout.spec.histories().get(h).keyColumns(); c++) {
      version.add(keyValue(row, layout.histories[h][c]));
    }
    histories.get(h).put(version, row.copy());
    changes++;
  }

  /** A value of the history's primary key: the key (text in the row), valid_from or lsn (longs). */
  private static Object keyValue(InternalRow row, Layout.Field column) {
    int i = column.ordinal();
    if (row.isNullAt(i)) {
      return null;
    }
    return column.kind() == Layout.Kind.LONG || column.kind() == Layout.Kind.VALID_FROM_MS
        ? row.getLong(i) : row.getUTF8String(i).toString();
  }

  boolean hasHistory(int h) {
    return !histories.get(h).isEmpty();
  }

  /** The h-th history's rows as CSV for COPY, one per version. */
  PgCsv historyCsv(int h) {
    PgCsv csv = new PgCsv();
    for (InternalRow row : histories.get(h).values()) {
      for (Layout.Field column : layout.histories[h]) {
        csv.column(row, column);
      }
      csv.endRow();
    }
    return csv;
  }

  private void addReject(InternalRow row) {
    UTF8String id = str(row, layout.id);
    UTF8String source = str(row, layout.source);
    UTF8String reason = str(row, layout.error);
    byte[] payload = row.isNullAt(layout.payload) ? null : row.getBinary(layout.payload);
    deadCsv.text(id);
    deadCsv.text(source);
    deadCsv.text(reason);
    deadCsv.bytea(payload);
    deadCsv.endRow();
    byte[] key = id == null ? null : PgCsv.clean(id);
    records.add(new ProducerRecord<>(deadLettersTopic, key, Values.deadLetter(id, source, reason, payload)));
  }

  /** A record's key: the join key's bytes as the row holds them. */
  private static byte[] key(InternalRow row, int ordinal) {
    return row.isNullAt(ordinal) ? null : row.getUTF8String(ordinal).getBytes();
  }

  private static UTF8String str(InternalRow row, int ordinal) {
    return row.isNullAt(ordinal) ? null : row.getUTF8String(ordinal);
  }
}
