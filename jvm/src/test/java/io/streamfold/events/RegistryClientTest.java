package io.streamfold.events;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Base64;
import java.util.Deque;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * RegistryClient against a real HTTP server (the JDK's) answering as a Confluent-compatible registry would:
 * which answers mean "no such schema" (a dead letter) and which an outage (retried, then the task fails).
 */
class RegistryClientTest {
  private static final String USER = "streamfold";
  private static final String PASSWORD = "s3cret:with-colon";
  // sink/Retry waits 1 s, then 2 s...: a budget of 1.5 s asks two or three times.
  private static final long BUDGET_MS = 1500;
  private static final String SCHEMA = "{\"type\": \"record\", \"name\": \"R\", \"fields\": []}";

  /** An answer: status and body. */
  private record Answer(int status, String body) {}

  private HttpServer server;
  private final Deque<Answer> answers = new ArrayDeque<>();
  private final AtomicInteger requests = new AtomicInteger();
  private volatile String lastPath;

  @BeforeEach
  void start() throws IOException {
    server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/apis/ccompat/v7/", this::answer);
    server.start();
  }

  @AfterEach
  void stop() {
    server.stop(0);
  }

  /** Asks for basic auth as the registry does, then gives the queued answers, the last one from then on. */
  private void answer(HttpExchange exchange) throws IOException {
    requests.incrementAndGet();
    lastPath = exchange.getRequestURI().getPath();
    String expected = "Basic " + Base64.getEncoder()
        .encodeToString((USER + ":" + PASSWORD).getBytes(StandardCharsets.UTF_8));
    Answer answer = expected.equals(exchange.getRequestHeaders().getFirst("Authorization"))
        ? (answers.size() > 1 ? answers.poll() : answers.peek())
        : new Answer(401, "{\"error_code\": 401, \"message\": \"Unauthorized\"}");
    byte[] body = answer.body().getBytes(StandardCharsets.UTF_8);
    exchange.sendResponseHeaders(answer.status(), body.length == 0 ? -1 : body.length);
    exchange.getResponseBody().write(body);
    exchange.close();
  }

  private String base() {
    return "http://127.0.0.1:" + server.getAddress().getPort() + "/apis/ccompat/v7";
  }

  private RegistryClient client() {
    return new RegistryClient(base() + "/", USER, PASSWORD, BUDGET_MS);
  }

  private static String found(String schema) {
    return "{\"schema\": " + quoted(schema) + "}";
  }

  private static String quoted(String text) {
    return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  @Test
  void aRegisteredSchemaIsFetchedByIdWithBasicAuth() throws Exception {
    answers.add(new Answer(200, found(SCHEMA)));
    SchemaSource.Registered registered = client().fetch(42);
    assertEquals(new SchemaSource.Registered("AVRO", SCHEMA), registered);
    assertEquals("/apis/ccompat/v7/schemas/ids/42", lastPath);
    assertEquals(1, requests.get());
  }

  @Test
  void theSchemaTypeIsPassedOn() throws Exception {
    answers.add(new Answer(200, "{\"schema\": \"syntax = 'proto3';\", \"schemaType\": \"PROTOBUF\"}"));
    assertEquals("PROTOBUF", client().fetch(1).type());
  }

  @Test
  void notFoundWithItsErrorCodeIsAnUnknownIdAskedOnce() {
    answers.add(new Answer(404, "{\"error_code\": 40403, \"message\": \"Schema 7 not found\"}"));
    SchemaSource.SchemaNotFound notFound = assertThrows(SchemaSource.SchemaNotFound.class, () -> client().fetch(7));
    assertEquals("schema id 7 is unknown to the registry", notFound.getMessage());
    assertEquals(1, requests.get());
  }

  @Test
  void aNotFoundWithoutTheCodeIsAWrongUrlNotABadRecord() {
    answers.add(new Answer(404, "<html>no such page</html>"));
    SchemaSource.RegistryUnavailable failed =
        assertThrows(SchemaSource.RegistryUnavailable.class, () -> client().fetch(7));
    assertTrue(failed.getMessage().contains("answered HTTP 404"), failed.getMessage());
  }

  @Test
  void wrongCredentialsFailAtOnce() {
    answers.add(new Answer(200, found(SCHEMA)));
    RegistryClient wrong = new RegistryClient(base(), USER, "wrong", BUDGET_MS);
    SchemaSource.RegistryUnavailable failed = assertThrows(SchemaSource.RegistryUnavailable.class, () -> wrong.fetch(1));
    assertTrue(failed.getMessage().contains("answered HTTP 401"), failed.getMessage());
    assertEquals(1, requests.get());
  }

  @Test
  void serverErrorsAreRetriedWithBackoffUntilTheRegistryAnswers() throws Exception {
    answers.add(new Answer(503, "{\"error_code\": 50301, \"message\": \"starting\"}"));
    answers.add(new Answer(500, ""));
    answers.add(new Answer(200, found(SCHEMA)));
    RegistryClient patient = new RegistryClient(base(), USER, PASSWORD, 10_000);
    assertEquals(SCHEMA, patient.fetch(3).text());
    assertEquals(3, requests.get());
  }

  @Test
  void aLastingOutageFailsAfterTheAttempts() {
    answers.add(new Answer(502, "bad gateway"));
    long start = System.nanoTime();
    // A budget well above the first attempt's time, even on a loaded machine (the client's first request
    // starts its HTTP machinery): the retry after 1 s must fit in it.
    RegistryClient patient = new RegistryClient(base() + "/", USER, PASSWORD, 3_000);
    SchemaSource.RegistryUnavailable failed =
        assertThrows(SchemaSource.RegistryUnavailable.class, () -> patient.fetch(3));
    // Asked again after 1 s, and once more if the budget has time left then (a time budget, not a count).
    assertTrue(requests.get() >= 2, "asked " + requests.get() + " times");
    assertTrue(failed.getMessage().contains("unavailable for 3.0 s, last: TransientAnswer: HTTP 502: bad gateway"),
        failed.getMessage());
    assertTrue(System.nanoTime() - start >= 2_900_000_000L, "waited out the budget");
  }

  @Test
  void aRefusedConnectionIsAnOutageNotAnUnknownId() throws IOException {
    int closed;
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      closed = socket.getLocalPort();
    }
    RegistryClient nowhere = new RegistryClient("http://127.0.0.1:" + closed + "/apis/ccompat/v7", USER, PASSWORD, BUDGET_MS);
    SchemaSource.RegistryUnavailable failed =
        assertThrows(SchemaSource.RegistryUnavailable.class, () -> nowhere.fetch(1));
    assertTrue(failed.getMessage().contains("unavailable for 1.5 s, last: ConnectException"), failed.getMessage());
  }

  @Test
  void aSuccessWithoutASchemaIsAnOutageNotABadRecord() {
    answers.add(new Answer(200, "{\"id\": 1}"));
    assertThrows(SchemaSource.RegistryUnavailable.class, () -> client().fetch(1));
  }

  @Test
  void theParserFailsItsTaskWhenTheRegistryIsDown() {
    answers.add(new Answer(503, "down"));
    String spec = "{\"key\": {\"field\": \"k\", \"type\": \"text\"}, \"fields\": [], \"time\": {\"field\": \"t\","
        + " \"format\": \"epoch_ms\"}, \"count\": null, \"max_record_bytes\": 65536, \"min_time_ms\": 946684800000,"
        + " \"max_future_ms\": 60000, \"max_key_bytes\": 1024}";
    AvroEventParse parse = new AvroEventParse(spec, client());
    assertThrows(SchemaSource.RegistryUnavailable.class, () -> parse.call(new byte[] {0, 0, 0, 0, 9, 2, 'k'}, 1L));
  }
}
