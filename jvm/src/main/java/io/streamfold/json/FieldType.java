package io.streamfold.json;

/**
 * A column's type as the pipeline file names it (pipeline/field_types.py): the types a profile column
 * and an event field may take.
 */
public enum FieldType {
  TEXT("text"), INTEGER("integer"), BIGINT("bigint"), DOUBLE("double"), NUMERIC("numeric"),
  BOOLEAN("boolean"), TIMESTAMPTZ("timestamptz"), TIMESTAMP("timestamp"), TEXT_ARRAY("text[]"),
  JSONB("jsonb");

  /** The name the pipeline file gives the type. */
  public final String label;

  FieldType(String label) {
    this.label = label;
  }

  /** The type named `label`; IllegalArgumentException for any other value. */
  public static FieldType of(Object label) {
    for (FieldType type : values()) {
      if (type.label.equals(label)) {
        return type;
      }
    }
    throw new IllegalArgumentException(
        "unknown type " + (label instanceof String name ? name : StrictJson.shown(label)));
  }

  /** Whether a key may have this type. */
  public boolean isKeyType() {
    return this == TEXT || this == INTEGER || this == BIGINT;
  }
}
