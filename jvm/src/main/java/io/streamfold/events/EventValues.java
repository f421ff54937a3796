package io.streamfold.events;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.LocalDate;
import java.time.YearMonth;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The value rules both event parsers share (the fast path, PlainEvent, and the full one, EventParse), each
 * as spec/events.py has it: a null result means the value breaks the rule.
 */
public final class EventValues {
  /**
   * An ISO-8601 time of the one strict form both languages read (spec/events.py ISO_TIME is the same text,
   * tests/unit/test_parsers_spark.py holds them equal): YYYY-MM-DDTHH:MM:SS, 1 to 9 fraction digits, then Z
   * or an offset +HH:MM / -HH:MM.
   */
  public static final String ISO_TIME =
      "([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\\.([0-9]{1,9}))?"
          + "(Z|([+-])([0-9]{2}):([0-9]{2}))";

  private static final Pattern ISO = Pattern.compile(ISO_TIME);
  private static final long DAY_S = 86_400L;
  // A time is within the years 0001..9999 in UTC (Python's datetime, and PostgreSQL's range with room).
  private static final long MIN_MICROS = LocalDate.of(1, 1, 1).toEpochDay() * DAY_S * 1_000_000L;
  private static final long MAX_MICROS = LocalDate.of(10_000, 1, 1).toEpochDay() * DAY_S * 1_000_000L - 1;
  // PostgreSQL's numeric: at most this many digits before the decimal point and after it.
  private static final int NUMERIC_MAX_WHOLE_DIGITS = 131_072;
  private static final int NUMERIC_MAX_SCALE = 16_383;
  // A number's exponent of more digits than this is not read (beyond any time or numeric).
  private static final int MAX_EXPONENT_DIGITS = 9;

  private EventValues() {}

  /** A string with a character that is not whitespace (Python's str.isspace()). */
  static boolean nonBlank(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (!pythonSpace(s.charAt(i))) {
        return true;
      }
    }
    return false;
  }

  /** Python's str.isspace() for one UTF-16 unit (test_blank_text_is_pythons_isspace holds it to it). */
  static boolean pythonSpace(char c) {
    return (c >= '\u0009' && c <= '\r')
        || (c >= '\u001c' && c <= ' ')
        || c == '\u0085'
        || c == '\u00a0'
        || c == '\u1680'
        || (c >= '\u2000' && c <= '\u200a')
        || c == '\u2028'
        || c == '\u2029'
        || c == '\u202f'
        || c == '\u205f'
        || c == '\u3000';
  }

  /** An ISO_TIME within the years 0001..9999 (UTC) in epoch microseconds, else null. */
  static Long isoMicros(String text) {
    Matcher m = ISO.matcher(text);
    if (!m.matches()) {
      return null;
    }
    int year = digits(m, 1), month = digits(m, 2), day = digits(m, 3);
    int hour = digits(m, 4), minute = digits(m, 5), second = digits(m, 6);
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > YearMonth.of(year, month).lengthOfMonth()
        || hour > 23 || minute > 59 || second > 59) {
      return null;
    }
    long offsetS = 0;
    if (m.group(9) != null) {
      int offsetHours = digits(m, 10), offsetMinutes = digits(m, 11);
      if (offsetHours > 23 || offsetMinutes > 59) {
        return null;
      }
      offsetS = (m.group(9).equals("-") ? -1 : 1) * (offsetHours * 3600L + offsetMinutes * 60L);
    }
    long seconds = LocalDate.of(year, month, day).toEpochDay() * DAY_S + hour * 3600L + minute * 60L + second
        - offsetS;
    String fraction = m.group(7) == null ? "" : m.group(7);
    long micros = seconds * 1_000_000L + Long.parseLong((fraction + "000000").substring(0, 6));
    return timeMicros(micros);
  }

  /** Epoch microseconds within the years 0001..9999 (UTC), else null. */
  static Long timeMicros(long micros) {
    return micros >= MIN_MICROS && micros <= MAX_MICROS ? micros : null;
  }

  private static int digits(Matcher m, int group) {
    return Integer.parseInt(m.group(group));
  }

  /**
   * Epoch seconds (a JSON number's text, read exactly) as epoch ms, rounded down, if that lies in lo..hi;
   * else null (a number with an exponent of more than 9 digits is never in range).
   */
  static Long epochSecondsMs(String literal, long lo, long hi) {
    BigDecimal seconds = exact(literal);
    if (seconds == null) {
      return null;
    }
    BigDecimal ms = seconds.movePointRight(3);
    // Compared before rounding, so a huge exponent is never expanded.
    BigDecimal end = BigDecimal.valueOf(hi).add(BigDecimal.ONE);
    if (ms.compareTo(BigDecimal.valueOf(lo)) < 0 || ms.compareTo(end) >= 0) {
      return null;
    }
    return ms.setScale(0, RoundingMode.FLOOR).longValueExact();
  }

  /** A JSON number's text as numeric's decimal text, if PostgreSQL's numeric holds it exactly; else null. */
  static String numeric(String literal) {
    BigDecimal value = exact(literal);
    if (value == null || value.scale() > NUMERIC_MAX_SCALE
        || (long) value.precision() - value.scale() > NUMERIC_MAX_WHOLE_DIGITS) {
      return null;
    }
    return value.toString();
  }

  /** A JSON number's exact value; null if its exponent has more than MAX_EXPONENT_DIGITS digits. */
  private static BigDecimal exact(String literal) {
    int e = Math.max(literal.indexOf('e'), literal.indexOf('E'));
    if (e >= 0) {
      int start = e + 1;
      if (start < literal.length() && (literal.charAt(start) == '+' || literal.charAt(start) == '-')) {
        start++;
      }
      while (start < literal.length() - 1 && literal.charAt(start) == '0') {
        start++;
      }
      if (literal.length() - start > MAX_EXPONENT_DIGITS) {
        return null;
      }
    }
    return new BigDecimal(literal);
  }

  /** A finite double from a JSON number's text (correctly rounded, as Python's float()), else null. */
  static Double finiteDouble(String literal) {
    double value = Double.parseDouble(literal);
    return Double.isFinite(value) ? value : null;
  }

  /** "2000-01-01", or with the time of day when the instant is not midnight (UTC). */
  static String instant(long ms) {
    LocalDate date = LocalDate.ofEpochDay(Math.floorDiv(ms, DAY_S * 1000));
    long inDay = Math.floorMod(ms, DAY_S * 1000);
    if (inDay == 0) {
      return date.toString();
    }
    String time = String.format(Locale.ROOT, "T%02d:%02d:%02d", inDay / 3_600_000, inDay / 60_000 % 60,
        inDay / 1000 % 60);
    return date + time + (inDay % 1000 == 0 ? "" : String.format(Locale.ROOT, ".%03d", inDay % 1000)) + "Z";
  }

  /** "1 minute", "90 seconds", "1500 milliseconds": in the largest unit that divides it. */
  static String duration(long ms) {
    long[] sizes = {86_400_000L, 3_600_000L, 60_000L, 1000L, 1L};
    String[] units = {"day", "hour", "minute", "second", "millisecond"};
    for (int i = 0; i < sizes.length; i++) {
      if (ms % sizes[i] == 0 && (ms != 0 || sizes[i] == 1)) {
        long n = ms / sizes[i];
        return n + " " + units[i] + (n == 1 ? "" : "s");
      }
    }
    throw new AssertionError(ms);
  }
}
