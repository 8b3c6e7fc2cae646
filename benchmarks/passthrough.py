"""The floor under the service's latency: a process that answers every article at once, learning nothing.

``bench_service`` runs it as a peer in the same run and at the same rates as the learner: it reads the input topic
and writes one small output per article, keyed by the article's key, with the service's own Kafka clients
(``service.kafka.make_consumer`` / ``make_producer``, same settings from the same ``TOPICSTREAM_*`` variables) and
the service's batch size and batch timeout (``batch_size`` messages or ``batch_timeout_s``, whichever comes first,
each batch's wait counted from now: the worker's shorter wait after a long batch is not needed by a process that
does no work). What it measures is
what the broker and the client settings cost on this machine; the learner's latency minus this is the learner's
own. It commits its offsets after each batch without waiting for acknowledgements (it is a floor, not a service).

    TOPICSTREAM_KAFKA_BOOTSTRAP=... TOPICSTREAM_INPUT_TOPIC=... TOPICSTREAM_OUTPUT_TOPIC=... \\
        python -m benchmarks.passthrough
"""

from __future__ import annotations

import signal
import threading

import orjson
from confluent_kafka import TopicPartition

from service.kafka import make_consumer, make_producer, next_offsets
from service.settings import load_settings


def main() -> None:
    settings = load_settings()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = make_consumer(settings, "topicstream-passthrough")
    producer = make_producer(settings)
    consumer.subscribe([settings.input_topic])
    try:
        while not stop.is_set():
            msgs = consumer.consume(num_messages=settings.batch_size, timeout=settings.batch_timeout_s)
            producer.poll(0)
            good = [m for m in msgs if m.error() is None]
            for msg in good:
                producer.produce(settings.output_topic, key=msg.key(), value=orjson.dumps({"offset": msg.offset()}))
            if good:
                offsets = [TopicPartition(t, p, o) for (t, p), o in next_offsets(good).items()]
                consumer.commit(offsets=offsets, asynchronous=True)
    finally:
        producer.flush(30)
        consumer.close()


if __name__ == "__main__":
    main()
