package io.streamfold.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/**
 * The users table of LeanTopology: only the carried columns, typed, stored in a compact binary form
 * instead of the JSON row, so a click's lookup decodes a few fields rather than parsing JSON.
 *
 * <p>The deserializer reads Debezium's envelopes from the CDC topic (what is not a user's row reads as
 * null, as in Envelopes: a delete, its tombstone, a heartbeat-table event) and its own binary form from
 * the store, told apart by the first byte: an envelope is a JSON object ('{'), the binary form starts
 * with MAGIC.
 */
final class Profiles {
  static final byte MAGIC = 1;

  /** A user's carried columns; valid_from is null for a snapshot row (valid since forever). */
  record Profile(String region, String gender, List<String> interests, Long registertime, Long validFrom) {}

  static final Serde<Profile> SERDE =
      Serdes.serdeFrom((topic, p) -> p == null ? null : write(p), (topic, bytes) -> read(bytes));

  private Profiles() {}

  static Profile read(byte[] bytes) {
    if (bytes == null || bytes.length == 0) {
      return null;
    }
    return bytes[0] == MAGIC ? decode(bytes) : fromEnvelope(Json.read(bytes));
  }

  static Profile fromEnvelope(JsonNode envelope) {
    JsonNode after = envelope.path("after");
    JsonNode source = envelope.path("source");
    if (!after.isObject() || !"users".equals(source.path("table").asText())) {
      return null;
    }
    List<String> interests = null;
    if (after.path("interests").isArray()) {
      interests = new ArrayList<>();
      for (JsonNode interest : after.get("interests")) {
        interests.add(interest.asText());
      }
    }
    return new Profile(
        text(after.get("regionid")),
        text(after.get("gender")),
        interests,
        after.path("registertime").isNumber() ? after.get("registertime").asLong() : null,
        "r".equals(envelope.path("op").asText()) ? null : source.path("ts_ms").asLong());
  }

  private static String text(JsonNode node) {
    return node == null || node.isNull() ? null : node.asText();
  }

  static byte[] write(Profile p) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(64);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(MAGIC);
      writeText(out, p.region());
      writeText(out, p.gender());
      out.writeInt(p.interests() == null ? -1 : p.interests().size());
      for (String interest : p.interests() == null ? List.<String>of() : p.interests()) {
        writeText(out, interest);
      }
      writeLong(out, p.registertime());
      writeLong(out, p.validFrom());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  static Profile decode(byte[] bytes) {
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(bytes, 1, bytes.length - 1))) {
      String region = readText(in);
      String gender = readText(in);
      int count = in.readInt();
      List<String> interests = count < 0 ? null : new ArrayList<>(count);
      for (int i = 0; i < count; i++) {
        interests.add(readText(in));
      }
      return new Profile(region, gender, interests, readLong(in), readLong(in));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void writeText(DataOutputStream out, String text) throws IOException {
    out.writeBoolean(text != null);
    if (text != null) {
      out.writeUTF(text);
    }
  }

  private static String readText(DataInputStream in) throws IOException {
    return in.readBoolean() ? in.readUTF() : null;
  }

  private static void writeLong(DataOutputStream out, Long value) throws IOException {
    out.writeBoolean(value != null);
    if (value != null) {
      out.writeLong(value);
    }
  }

  private static Long readLong(DataInputStream in) throws IOException {
    return in.readBoolean() ? in.readLong() : null;
  }
}
