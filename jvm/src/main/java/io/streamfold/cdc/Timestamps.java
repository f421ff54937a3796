package io.streamfold.cdc;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * An ISO-8601 timestamp as Debezium writes a timestamptz (io.debezium.time.ZonedTimestamp), in epoch
 * microseconds: spec/envelopes.py's ISO_TIMESTAMP and its arithmetic, the same pattern in both.
 */
final class Timestamps {
  static final Pattern ISO = Pattern.compile(
      "([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})");
  private static final int[] DAYS_IN_MONTH = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

  private Timestamps() {}

  /**
   * YYYY-MM-DDTHH:MM:SS(.1-9 digits)?(Z|±HH:MM) in epoch microseconds (digits past the microsecond are
   * dropped), or null when the text is not of that form or names no real time (a 13th month, a 31st of
   * April, a 24th hour, an offset past ±18:59).
   */
  static Long micros(String text) {
    Matcher m = ISO.matcher(text);
    if (!m.matches()) {
      return null;
    }
    int year = number(m, 1);
    int month = number(m, 2);
    int day = number(m, 3);
    int hour = number(m, 4);
    int minute = number(m, 5);
    int second = number(m, 6);
    if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59
        || second > 59) {
      return null;
    }
    long offsetSeconds = 0;
    String zone = m.group(8);
    if (!"Z".equals(zone)) {
      int offsetHours = Integer.parseInt(zone.substring(1, 3));
      int offsetMinutes = Integer.parseInt(zone.substring(4, 6));
      if (offsetHours > 18 || offsetMinutes > 59) {
        return null;
      }
      offsetSeconds = (zone.charAt(0) == '-' ? -1 : 1) * (offsetHours * 3600L + offsetMinutes * 60L);
    }
    String fraction = m.group(7) == null ? "" : m.group(7);
    long nanos = Long.parseLong((fraction + "000000000").substring(0, 9));
    long seconds = days(year, month, day) * 86_400L + hour * 3600L + minute * 60L + second - offsetSeconds;
    return seconds * 1_000_000L + nanos / 1000;
  }

  private static int number(Matcher m, int group) {
    return Integer.parseInt(m.group(group));
  }

  private static int daysIn(int year, int month) {
    boolean leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    return month == 2 && leap ? 29 : DAYS_IN_MONTH[month - 1];
  }

  /** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
  private static long days(long year, long month, long day) {
    long y = month <= 2 ? year - 1 : year;
    long era = Math.floorDiv(y, 400);
    long yearOfEra = y - era * 400;
    long dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    long dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear;
    return era * 146_097 + dayOfEra - 719_468;
  }
}
