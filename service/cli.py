"""The ``topicstream`` command line."""

import typer

app = typer.Typer(help="Streaming topic models over Kafka.", no_args_is_help=True)
