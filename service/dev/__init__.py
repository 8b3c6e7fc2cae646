"""Development tools, not the service: ``make run``'s demo, the article generator, and the local broker + Redis
started from pip-installed binaries (used by the demo, the tests and the benchmarks)."""
