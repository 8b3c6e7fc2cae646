"""Integration tests against a real Kafka-protocol broker and a real Redis (never mocks): the learner, replicas,
snapshot faults, processes and signals, the command line, feeds, subscriptions, the drift report and Prometheus;
their helpers are in ``helpers.py``."""
