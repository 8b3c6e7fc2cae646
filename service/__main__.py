"""``python -m service`` is the ``topicstream`` command."""

from .cli import app

app()
