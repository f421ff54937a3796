package io.streamfold.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;

/**
 * What the JVM fast paths (clicks/PlainClick, cdc/PlainEnvelope) share: strict JSON as
 * pipeline/strict_json.py reads it, and the limits past which they give up and leave the record to the
 * full parser in Spark.
 */
public final class PlainJson {
  /** Nesting deeper than this is not plain. */
  public static final int MAX_DEPTH = 32;

  /** A number literal longer than this is not plain. */
  public static final int MAX_NUMBER_CHARS = 100;

  /** Duplicate keys at any depth make a record not JSON (strict JSON, pipeline/strict_json.py). */
  public static final JsonFactory FACTORY =
      JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

  private PlainJson() {}

  /**
   * The payload as text if it is strict UTF-8 (no overlong forms, no encoded surrogates) and starts, after
   * JSON whitespace, with '{' (so no byte order mark); else null.
   */
  public static String objectText(byte[] payload) {
    boolean ascii = true;
    for (byte b : payload) {
      ascii &= b >= 0;
    }
    String text;
    if (ascii) {
      text = new String(payload, StandardCharsets.ISO_8859_1);
    } else {
      try {
        text = StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(payload)).toString();
      } catch (CharacterCodingException invalid) {
        return null;
      }
    }
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        return c == '{' ? text : null;
      }
    }
    return null;
  }
}
