package io.streamfold.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;

/**
 * What the JVM fast paths (events/PlainEvent, cdc/PlainEnvelope) share: strict JSON as
 * spec/strict_json.py reads it, and the limits past which they give up and leave the record to the
 * full parsers (EventParse, EnvelopeFold, reading it with StrictJson).
 */
public final class PlainJson {
  /** Nesting deeper than this is not plain. */
  public static final int MAX_DEPTH = 32;

  /** A number literal longer than this is not plain. */
  public static final int MAX_NUMBER_CHARS = 100;

  /**
   * A key or an indexed profile value longer than this (UTF-8 bytes) is a dead letter (common/limits.py MAX_KEY_BYTES):
   * Postgres indexes them, and a B-tree row holds ~2.7 KB. An event spec sets its own (max_key_bytes).
   */
  public static final int MAX_KEY_BYTES = 1024;

  /** Duplicate keys at any depth make a record not JSON (strict JSON, spec/strict_json.py). */
  public static final JsonFactory FACTORY =
      JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

  private PlainJson() {}

  /** Whether a key or an indexed profile value is within MAX_KEY_BYTES. */
  public static boolean fitsKey(String value) {
    return fitsKey(value, MAX_KEY_BYTES);
  }

  /** Whether a key is within maxBytes in UTF-8. */
  public static boolean fitsKey(String value, int maxBytes) {
    return utf8Length(value) <= maxBytes;
  }

  /** Why a key or an indexed profile value (named `where` in the reason) is not within MAX_KEY_BYTES; null if it is. */
  public static String overKeyLimit(String value, String where) {
    return overLimit(value, where, MAX_KEY_BYTES);
  }

  /** Why a value (named `where` in the reason) is longer than maxBytes in UTF-8; null if it is not. */
  public static String overLimit(String value, String where, int maxBytes) {
    int bytes = utf8Length(value);
    return bytes <= maxBytes ? null : where + " of " + bytes + " bytes exceeds the " + maxBytes + "-byte limit";
  }

  /** The length of s in UTF-8 (a surrogate pair is one 4-byte character). */
  private static int utf8Length(String s) {
    int n = s.length();
    int bytes = 0;
    for (int i = 0; i < n; i++) {
      char c = s.charAt(i);
      if (c < 0x80) {
        bytes += 1;
      } else if (c < 0x800) {
        bytes += 2;
      } else if (Character.isHighSurrogate(c) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
        bytes += 4;
        i++;
      } else {
        bytes += 3;
      }
    }
    return bytes;
  }

  /**
   * The payload as text if it is strict UTF-8 (no overlong forms, no encoded surrogates) and starts, after
   * JSON whitespace, with '{' (so no byte order mark); else null.
   */
  public static String objectText(byte[] payload) {
    String text = utf8(payload);
    if (text == null) {
      return null;
    }
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        return c == '{' ? text : null;
      }
    }
    return null;
  }

  /** The bytes as text if they are strict UTF-8 (no overlong forms, no encoded surrogates), else null. */
  public static String utf8(byte[] bytes) {
    boolean ascii = true;
    for (byte b : bytes) {
      ascii &= b >= 0;
    }
    if (ascii) {
      return new String(bytes, StandardCharsets.ISO_8859_1);
    }
    try {
      return StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(bytes)).toString();
    } catch (CharacterCodingException invalid) {
      return null;
    }
  }

  /** Whether a decoded string holds half a surrogate pair (only an escape such as "\\ud800" can make one). */
  public static boolean hasLoneSurrogate(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return true;
      }
    }
    return false;
  }
}
