"""The commands a user types: topics, subscribe, produce, and `make run`'s demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.learner import Learner
from service.settings import Settings

from .helpers import good_articles, read_all, run_until, sample

pytestmark = pytest.mark.integration


def env_for(s: Settings) -> dict[str, str]:
    fields = ("kafka_bootstrap", "redis_url", "input_topic", "output_topic", "dlq_topic", "redis_prefix")
    return {f"TOPICSTREAM_{f.upper()}": str(getattr(s, f)) for f in fields}


def test_produce_file_then_topics_and_subscribe(settings: Settings, tmp_path: Path) -> None:
    s = settings
    path = tmp_path / "articles.jsonl"
    articles = good_articles(150, seed=7)
    path.write_bytes(b"\n".join(articles) + b"\nnot json\n")
    runner = CliRunner()
    result = runner.invoke(app, ["produce", str(path)], env=env_for(s))
    assert result.exit_code == 0, result.output
    assert "produced 151 articles" in result.output

    learner = Learner(s)
    run_until(learner, 151)
    assert sample(learner.metrics, "topicstream_articles_dead_lettered_total", reason="not_json") == 1

    result = runner.invoke(app, ["topics", "--json"], env=env_for(s))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["articles_learned"] == 150 and len(summary["topics"]) == s.topics
    assert all(t["top_words"] for t in summary["topics"] if t["prevalence"] > 0.05)
    table = runner.invoke(app, ["topics", "--limit", "3"], env=env_for(s))
    assert table.exit_code == 0 and "prevalence" in table.output

    outputs = read_all(s, s.output_topic, 150)
    dominant = json.loads(outputs[0].value())["top_topics"][0]["topic"]
    expected = sum(1 for m in outputs if str(dominant).encode() in dict(m.headers())["topicstream-topics"].split(b","))
    result = runner.invoke(
        app, ["subscribe", str(dominant), "--from-beginning", "--limit", str(expected)], env=env_for(s)
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == expected and all(line["weight"] >= 0.1 for line in lines)


def test_topics_without_a_snapshot_says_so(settings: Settings) -> None:
    result = CliRunner().invoke(app, ["topics"], env=env_for(settings))
    assert result.exit_code == 1 and "no snapshot" in result.output


def test_make_run_demo_starts_everything_shows_topics_and_stops(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICSTREAM_")}
    proc = subprocess.run(
        [sys.executable, "-m", "service", "demo", "--duration", "45", "--rate", "400"],  # first test: cold numba cache
        env={**env, "COLUMNS": "160"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "articles learned" in proc.stdout and "top words" in proc.stdout
    assert "stopped" in proc.stdout
    learner_log = (tmp_path / ".topicstream" / "learner.log").read_text()
    assert "snapshot" in learner_log and "Traceback" not in learner_log
