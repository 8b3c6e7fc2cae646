"""The service: settings, input and output events, tokenizer and bounded vocabulary, Kafka clients, the batch
worker shared by the learner and the replicas, snapshots and the learner's lease in Redis, metrics, feeds, topic
names, subscriptions, drift history and report, and the ``topicstream`` command line (development tools are in
``service.dev``)."""
