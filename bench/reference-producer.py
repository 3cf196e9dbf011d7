# The reference for bench/hung-broker.ts: an idempotent, acks=all librdkafka producer
# (confluent-kafka) writing RATE records/s to TOPIC, open loop. On stdin EOF it flushes and
# prints one JSON line: the wall-clock times (ms) of every acknowledged record.
import json, sys, threading, time, uuid
from confluent_kafka import Producer

brokers, topic, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
acked = []
producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "acks": "all", "linger.ms": 0, "queue.buffering.max.messages": 1000000})
stop = threading.Event()

def delivered(err, _msg):
    if err is None:
        acked.append(time.time() * 1000)

def run():
    interval, next_at = 1.0 / rate, time.monotonic()
    while not stop.is_set():
        producer.produce(topic, key=str(uuid.uuid4()), value=b'{"reference":true}', on_delivery=delivered)
        producer.poll(0)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))

thread = threading.Thread(target=run, daemon=True)
thread.start()
print(json.dumps({"ready": True}), flush=True)
sys.stdin.read()
stop.set()
thread.join()
producer.flush(10)
print(json.dumps({"acked": acked}), flush=True)
