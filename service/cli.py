"""The ``topicstream`` command line."""

import typer

app = typer.Typer(help="Streaming topic models over Kafka.", no_args_is_help=True)


from service.evaluation import eval_command  # noqa: E402

app.command("eval")(eval_command)
