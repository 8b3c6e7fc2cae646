"""The service: settings, input and output events, tokenizer and bounded vocabulary, Kafka clients, the batch
worker shared by the learner and the replicas, snapshots and the learner's lease in Redis, metrics, feeds, topic
names, subscriptions, drift history and report, and the ``topicstream`` command line (development tools are in
``service.dev``)."""

from importlib.metadata import PackageNotFoundError, version

try:
    #: The installed distribution's version (pyproject.toml), shown by ``topicstream --version`` and on
    #: ``topicstream_model_info``, so that an operator can tell old processes from new ones during an upgrade.
    __version__ = version("topicstream")
except PackageNotFoundError:  # the source tree, not installed
    __version__ = "0+unknown"
