"""Everything that talks to the world: Kafka, Redis, Prometheus, the command line."""
