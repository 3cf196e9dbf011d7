package dev.msgbridge.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The msgbridge tracker's message-state job on Kafka Streams: send-results (accepted ones) and
 * delivery_status, co-partitioned by message id, folded into one state per message (status only
 * moves up, each timestamp the earliest seen, an event id applied once, the last 32 ids kept),
 * published whole to the output topic on each change. exactly_once_v2, a RocksDB store with its
 * changelog. Prints "RUNNING <epoch ms>" once running.
 *
 * args: bootstrap applicationId resultsTopic statusTopic outputTopic stateDir
 */
public final class TrackerStreams {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, Integer> RANK = Map.of("accepted", 0, "sent", 1, "delivered", 2, "read", 3, "delivery_failed", 4);
  private static final Map<String, String> FIELD = Map.of("accepted", "acceptedAt", "sent", "sentAt", "delivered", "deliveredAt", "read", "readAt", "delivery_failed", "failedAt");

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], appId = args[1], results = args[2], status = args[3], output = args[4], stateDir = args[5];
    Topology topology = new Topology();
    topology.addSource("results", Serdes.String().deserializer(), Serdes.ByteArray().deserializer(), results);
    topology.addSource("status", Serdes.String().deserializer(), Serdes.ByteArray().deserializer(), status);
    topology.addProcessor("fold", Fold::new, "results", "status");
    topology.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("message-state"), Serdes.String(), Serdes.String()), "fold");
    topology.addSink("out", output, Serdes.String().serializer(), Serdes.String().serializer(), "fold");

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    // Static membership: a restarted instance takes its tasks back at once. Without it, Kafka
    // Streams (which does not leave its group on close) waits for the old member's session
    // timeout (45 s) before a restart is running again.
    props.put(StreamsConfig.consumerPrefix("group.instance.id"), appId + "-instance-1");

    KafkaStreams streams = new KafkaStreams(topology, props);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setStateListener((next, previous) -> {
      if (next == KafkaStreams.State.RUNNING) System.out.println("RUNNING " + System.currentTimeMillis());
      if (next == KafkaStreams.State.ERROR) System.out.println("ERROR " + System.currentTimeMillis());
      System.out.flush();
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      stopped.countDown();
    }));
    streams.start();
    stopped.await();
  }

  static final class Fold implements Processor<String, byte[], String, String> {
    private ProcessorContext<String, String> context;
    private KeyValueStore<String, String> store;

    @Override
    public void init(ProcessorContext<String, String> context) {
      this.context = context;
      this.store = context.getStateStore("message-state");
    }

    @Override
    public void process(Record<String, byte[]> record) {
      try {
        JsonNode event = JSON.readTree(record.value());
        Header idHeader = record.headers().lastHeader("event-id");
        Header businessHeader = record.headers().lastHeader("business-id");
        String eventId = idHeader == null ? null : new String(idHeader.value(), StandardCharsets.UTF_8);
        String business = businessHeader == null ? "" : new String(businessHeader.value(), StandardCharsets.UTF_8);
        String id;
        String status;
        String at;
        boolean isResult = event.has("outcome");
        if (isResult) {
          if (!"accepted".equals(event.path("outcome").asText())) return;
          id = event.path("messageId").asText();
          status = "accepted";
          at = event.path("acceptedAt").asText();
        } else {
          JsonNode update = event.path("statusUpdate");
          id = update.path("id").asText();
          status = update.path("status").asText();
          at = Instant.ofEpochSecond(Long.parseLong(event.path("timestamp").asText())).toString();
        }
        if (!RANK.containsKey(status) || id.isEmpty()) return;
        String current = store.get(id);
        ObjectNode state = current == null ? newState(id, business, event, isResult) : (ObjectNode) JSON.readTree(current);
        ArrayNode ids = (ArrayNode) state.get("eventIds");
        if (eventId != null) for (JsonNode seen : ids) if (seen.asText().equals(eventId)) return;
        boolean changed = false;
        String field = FIELD.get(status);
        if (state.get(field).isNull() || state.get(field).asText().compareTo(at) > 0) {
          state.put(field, at);
          changed = true;
        }
        if (RANK.get(status) > RANK.get(state.get("status").asText())) {
          state.put("status", status);
          changed = true;
        }
        if (isResult && state.get("requestId").isNull()) {
          state.put("requestId", event.path("requestId").asText());
          state.put("recipient", event.path("recipient").asText());
          state.put("type", event.path("type").asText());
          changed = true;
        }
        if (!changed) return;
        state.put("events", state.get("events").asInt() + 1);
        state.put("updatedAt", Instant.now().toString());
        if (eventId != null) {
          ids.add(eventId);
          while (ids.size() > 32) ids.remove(0);
        }
        String value = JSON.writeValueAsString(state);
        store.put(id, value);
        context.forward(new Record<>(id, value, record.timestamp()));
      } catch (Exception e) {
        // A record that is not an event is skipped, as the tracker does.
      }
    }

    private static ObjectNode newState(String id, String business, JsonNode event, boolean isResult) {
      ObjectNode s = JSON.createObjectNode();
      s.put("messageId", id);
      s.putNull("requestId");
      s.put("businessId", isResult ? event.path("businessId").asText(business) : business);
      s.putNull("recipient");
      s.putNull("type");
      s.put("status", "accepted");
      for (String f : new String[] {"acceptedAt", "sentAt", "deliveredAt", "readAt", "failedAt", "error"}) s.putNull(f);
      s.put("events", 0);
      s.putNull("updatedAt");
      s.putArray("eventIds");
      return s;
    }
  }
}
