package io.streamfold.events;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.streamfold.sink.Retry;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;

/**
 * A Confluent-compatible schema registry's `GET <base>/schemas/ids/{id}` (Apicurio's ccompat API at
 * `<registry>/apis/ccompat/v7`), with HTTP basic auth when a user is given.
 *
 * <p>Only a 404 whose body carries error_code 40403 ("schema not found") means the id is unknown: any other
 * 404 is a wrong base URL, not a bad record. A connection failure, a timeout, a 429 or a 5xx is retried with
 * backoff (sink/Retry: the rules and log lines of the sink's outages) for up to the budget; when it runs
 * out, or on any other answer (401, 403, a body that is not a schema), RegistryUnavailable fails the task,
 * and Spark retries it.
 */
public final class RegistryClient implements SchemaSource {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int NOT_FOUND_CODE = 40403;

  private final String base;
  private final String authorization;
  private final long budgetMs;
  private transient HttpClient http;

  /** A registry's ccompat base URL; its user (none: no auth) and password; how long to wait out an outage. */
  public RegistryClient(String baseUrl, String user, String password, long budgetMs) {
    base = baseUrl.endsWith("/") ? baseUrl.substring(0, baseUrl.length() - 1) : baseUrl;
    authorization = user == null || user.isEmpty() ? null : "Basic " + Base64.getEncoder()
        .encodeToString((user + ":" + (password == null ? "" : password)).getBytes(StandardCharsets.UTF_8));
    this.budgetMs = budgetMs;
  }

  @Override
  public String identity() {
    return base;
  }

  /** An answer worth asking again for: a 429 or a 5xx. */
  private static final class TransientAnswer extends RuntimeException {
    private static final long serialVersionUID = 1L;

    TransientAnswer(String message) {
      super(message);
    }
  }

  @Override
  public Registered fetch(int id) throws SchemaNotFound {
    Registered registered;
    try {
      registered = Retry.retrying(what(id), budgetMs, RegistryClient::isTransient, () -> ask(id));
    } catch (RegistryUnavailable failed) {
      throw failed;
    } catch (RuntimeException outage) {
      Throwable cause = outage instanceof IllegalStateException && outage.getCause() != null ? outage.getCause() : outage;
      throw new RegistryUnavailable(what(id) + " unavailable for " + budgetMs / 1000.0 + " s, last: "
          + Retry.oneLine(cause), outage);
    }
    if (registered == null) {
      throw new SchemaNotFound("schema id " + id + " is unknown to the registry");
    }
    return registered;
  }

  private static boolean isTransient(Exception error) {
    return error instanceof IOException || error instanceof TransientAnswer;
  }

  /** One request: the schema, null for "no such id", else an exception (TransientAnswer worth retrying). */
  private Registered ask(int id) throws IOException {
    HttpResponse<String> response;
    try {
      response = client().send(request(id), HttpResponse.BodyHandlers.ofString());
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw new RegistryUnavailable(what(id) + " interrupted", interrupted);
    }
    int status = response.statusCode();
    if (status == 200) {
      return registered(id, response.body());
    }
    if (status == 404 && errorCode(response.body()) == NOT_FOUND_CODE) {
      return null;
    }
    String answer = "HTTP " + status + ": " + shortBody(response);
    if (status == 429 || status >= 500) {
      throw new TransientAnswer(answer);
    }
    throw new RegistryUnavailable(what(id) + " answered " + answer, null);
  }

  private String what(int id) {
    return "the schema registry at " + base + " (schema id " + id + ")";
  }

  private HttpClient client() {
    if (http == null) {
      http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    }
    return http;
  }

  private HttpRequest request(int id) {
    HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(base + "/schemas/ids/" + id))
        .timeout(Duration.ofSeconds(10))
        .header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
    if (authorization != null) {
      request.header("Authorization", authorization);
    }
    return request.GET().build();
  }

  /** A 200's body, {"schema": TEXT, "schemaType": TYPE} (no schemaType: Avro, as Confluent's API has it). */
  private Registered registered(int id, String body) {
    JsonNode answer;
    try {
      answer = JSON.readTree(body);
    } catch (IOException notJson) {
      throw new RegistryUnavailable(what(id) + " answered 200 with a body that is not JSON", notJson);
    }
    JsonNode schema = answer == null ? null : answer.get("schema");
    if (schema == null || !schema.isTextual()) {
      throw new RegistryUnavailable(what(id) + " answered 200 without a schema", null);
    }
    JsonNode type = answer.get("schemaType");
    return new Registered(type != null && type.isTextual() ? type.asText() : "AVRO", schema.asText());
  }

  /** The error_code of an error body, or 0 when there is none. */
  private static int errorCode(String body) {
    try {
      JsonNode code = JSON.readTree(body).get("error_code");
      return code != null && code.canConvertToInt() ? code.asInt() : 0;
    } catch (IOException | RuntimeException notAnError) {
      return 0;
    }
  }

  private static String shortBody(HttpResponse<String> response) {
    String body = response.body() == null ? "" : response.body().strip();
    return body.length() > 200 ? body.substring(0, 200) : body;
  }
}
