package io.streamfold.join;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.streaming.ListState;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.QueryInfo;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.ValueState;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The state a StatefulProcessor keeps for ONE grouping key, held in memory: enough to drive an operator's
 * handleInputRows batch after batch in a JUnit test (Spark's state store is RocksDB, exercised by the
 * Python suite's differential tests on a real local Spark). Timers are recorded, not fired.
 */
final class InMemoryHandle implements StatefulProcessorHandle {
  private static final long serialVersionUID = 1L;
  final Map<String, Object> states = new LinkedHashMap<>();
  final TreeSet<Long> timers = new TreeSet<>();

  @Override
  public <T> ValueState<T> getValueState(String name, Encoder<T> encoder, TTLConfig ttl) {
    return value(name);
  }

  @Override
  public <T> ValueState<T> getValueState(String name, TTLConfig ttl, Encoder<T> encoder) {
    return value(name);
  }

  @Override
  public <T> ListState<T> getListState(String name, Encoder<T> encoder, TTLConfig ttl) {
    throw new UnsupportedOperationException("no operator of streamfold keeps a list");
  }

  @Override
  public <T> ListState<T> getListState(String name, TTLConfig ttl, Encoder<T> encoder) {
    throw new UnsupportedOperationException("no operator of streamfold keeps a list");
  }

  @Override
  public <K, V> MapState<K, V> getMapState(String name, Encoder<K> k, Encoder<V> v, TTLConfig ttl) {
    return map(name);
  }

  @Override
  public <K, V> MapState<K, V> getMapState(String name, TTLConfig ttl, Encoder<K> k, Encoder<V> v) {
    return map(name);
  }

  @Override
  public QueryInfo getQueryInfo() {
    throw new UnsupportedOperationException("not asked by the join");
  }

  @Override
  public void registerTimer(long ms) {
    timers.add(ms);
  }

  @Override
  public void deleteTimer(long ms) {
    timers.remove(ms);
  }

  @Override
  public scala.collection.Iterator<Object> listTimers() {
    return CollectionConverters.asScala(timers.stream().map(t -> (Object) t).iterator());
  }

  @Override
  public void deleteIfExists(String name) {
    states.remove(name);
  }

  @SuppressWarnings("unchecked")
  private <T> ValueState<T> value(String name) {
    return (ValueState<T>) states.computeIfAbsent(name, n -> new Value<T>());
  }

  @SuppressWarnings("unchecked")
  private <K, V> MapState<K, V> map(String name) {
    return (MapState<K, V>) states.computeIfAbsent(name, n -> new Entries<K, V>());
  }

  private static final class Value<T> implements ValueState<T> {
    private static final long serialVersionUID = 1L;
    private T held;

    @Override
    public boolean exists() {
      return held != null;
    }

    @Override
    public T get() {
      return held;
    }

    @Override
    public void update(T value) {
      held = value;
    }

    @Override
    public void clear() {
      held = null;
    }
  }

  private static final class Entries<K, V> implements MapState<K, V> {
    private static final long serialVersionUID = 1L;
    private final Map<K, V> held = new LinkedHashMap<>();

    @Override
    public boolean exists() {
      return !held.isEmpty();
    }

    @Override
    public V getValue(K key) {
      return held.get(key);
    }

    @Override
    public boolean containsKey(K key) {
      return held.containsKey(key);
    }

    @Override
    public void updateValue(K key, V value) {
      held.put(key, value);
    }

    @Override
    public scala.collection.Iterator<Tuple2<K, V>> iterator() {
      return CollectionConverters.asScala(held.entrySet().stream()
          .map(e -> new Tuple2<>(e.getKey(), e.getValue())).toList().iterator());
    }

    @Override
    public scala.collection.Iterator<K> keys() {
      return CollectionConverters.asScala(held.keySet().stream().toList().iterator());
    }

    @Override
    public scala.collection.Iterator<V> values() {
      return CollectionConverters.asScala(held.values().stream().toList().iterator());
    }

    @Override
    public void removeKey(K key) {
      held.remove(key);
    }

    @Override
    public void clear() {
      held.clear();
    }
  }
}
