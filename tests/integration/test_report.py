"""``topicstream report``: the analysis, the self-contained page and PNG, the command, and the page as a real
headless Chromium renders it (skipped only when no browser is installed: ``apt-get install chromium``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from typer.testing import CliRunner

from service.cli import app
from service.history import SummaryHistory
from service.report import analyse, baseline_index, load, parse_duration, write_report
from tests.conftest import Endpoints

pytestmark = pytest.mark.integration

pytest.importorskip("matplotlib", reason="the report extra is not installed: pip install 'topicstream[report]'")

WORDS = {
    0: ["election", "vote", "party", "minister", "campaign", "poll", "parliament", "seats", "coalition", "leader"],
    1: ["oil", "crude", "opec", "barrel", "prices", "output", "energy", "gas", "brent", "supply"],
    2: ["virus", "vaccine", "health", "cases", "hospital", "outbreak", "doctors", "patients", "disease", "ward"],
    3: ["bank", "rates", "inflation", "central", "interest", "growth", "economy", "bond", "yield", "dollar"],
}
# Topic 3 changes meaning halfway: its last five words are replaced by these.
NEW_WORDS_3 = ["chip", "semiconductor", "factory", "wafer", "export"]


def records(n: int = 12) -> list[dict[str, Any]]:
    """History records with four stories: 0 fades, 1 rises, 2 is born halfway, 3 changes meaning halfway."""
    out = []
    for v in range(1, n + 1):
        f = (v - 1) / (n - 1)  # 0 .. 1 along the history
        p = [0.5 - 0.3 * f, 0.2 + 0.2 * f, 0.0 if f < 0.5 else 0.2 * f, 0.0]
        p[3] = 1.0 - sum(p)
        words3 = WORDS[3] if f < 0.5 else WORDS[3][:5] + NEW_WORDS_3
        out.append(
            {
                "version": 10 * v,
                "algorithm": "scvb0",
                "created_at": 1_750_000_000.0 + 60 * v,
                "articles_learned": 1000 * v,
                "topics": [
                    {"topic": k, "prevalence": p[k], "top_words": words3 if k == 3 else WORDS[k]} for k in range(4)
                ],
            }
        )
    return out


def test_analysis_finds_the_stories() -> None:
    a = analyse(records(), names={1: "Oil prices"}, top=3)
    assert [k for k, _, _ in a.lines] == [0, 1, 3]  # highest mean prevalence
    labels = dict((k, label) for k, label, _ in a.lines)
    assert labels[1] == "Oil prices" and labels[0] == "election vote party"
    assert [c.topic for c in a.rose] == [1]
    assert [c.topic for c in a.born] == [2] and a.born[0].then == 0.0
    assert [c.topic for c in a.faded] == [0, 3]
    assert a.faded[0].then == pytest.approx(0.5) and a.faded[0].now == pytest.approx(0.2)
    assert [c.topic for c in a.changed] == [3]
    assert a.changed[0].meaning_change == pytest.approx(1 - 5 / 15)
    # From a baseline after topic 3's change and topic 2's birth, neither story is there any more.
    later = analyse(records(), baseline=8)
    assert later.born == [] and later.changed == []
    with pytest.raises(ValueError, match="no history"):
        analyse([])


def test_baseline_and_durations() -> None:
    recs = records()
    assert baseline_index(recs) == 0
    assert baseline_index(recs, since_s=150) == len(recs) - 3  # records are 60 s apart
    assert baseline_index(recs, since_s=1e9) == 0
    # Versions 0-5 by a learner whose clock ran 10 minutes fast, then its successor's, 60 s apart in truth: the
    # last 5 minutes are the successor's last 6 records, not a fast record 9 minutes old.
    skewed = [{"created_at": 1000.0 + 60 * v + (600 if v < 6 else 0)} for v in range(12)]
    assert baseline_index(skewed, since_s=300) == 6
    assert parse_duration("90") == 90 and parse_duration("15m") == 900 and parse_duration("2d") == 172800
    for bad in ("", "h", "-5m", "soon", "inf"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_page_is_self_contained_and_png_is_written(tmp_path: Path) -> None:
    page, png = tmp_path / "r.html", tmp_path / "r.png"
    write_report(records(), page, png, names={1: "Oil <prices>"}, top=4, title="Drift & co")
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>")
    # Nothing is fetched: no scripts, stylesheets, images or fonts by address (the only URLs are XML namespaces).
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\((?!#)", text, re.I)
    assert all(ref.startswith("#") for ref in re.findall(r'(?:href|src)="([^"]*)"', text))
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    assert text.count("<svg") == 1 and "<?xml" not in text
    assert "Oil &lt;prices&gt;" in text and "Oil <prices>" not in text and "Drift &amp; co" in text
    for section in ("prevalence", "rose", "faded", "born", "changed"):
        assert f'id="{section}"' in text
    assert "<s>ward</s>" not in text and "<b>chip</b>" in text and "<s>bond</s>" in text
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width > 800 and height > 400


def said(result: Any) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def _cli_env(endpoints: Endpoints, prefix: str) -> dict[str, str]:
    return {"TOPICSTREAM_REDIS_URL": endpoints.redis_url, "TOPICSTREAM_REDIS_PREFIX": prefix}


def test_command_reads_history_and_names_from_redis(endpoints: Endpoints, tmp_path: Path) -> None:
    prefix = f"test-report-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(endpoints.redis_url)
    runner = CliRunner()
    page = tmp_path / "drift.html"
    result = runner.invoke(app, ["report", "--out", str(page)], env=_cli_env(endpoints, prefix))
    assert result.exit_code == 1 and "no summary history under Redis prefix" in said(result)
    assert not page.exists()

    history = SummaryHistory(client, prefix)
    for r in records():
        history.append(r)
    client.hset(f"{prefix}:topic-names", mapping={"2": "Outbreak", "not-an-id": "ignored"})
    recs, names = load(client, prefix)
    assert len(recs) == 12 and names == {2: "Outbreak"}

    result = runner.invoke(app, ["report", "--out", str(page), "--x", "articles"], env=_cli_env(endpoints, prefix))
    assert result.exit_code == 0, result.output
    assert page.exists() and page.with_suffix(".png").exists()
    assert "Outbreak" in page.read_text(encoding="utf-8")
    assert "12 snapshots kept, versions 10..120" in said(result)

    with pytest.MonkeyPatch.context() as mp:  # as if the report extra were not installed
        mp.setitem(sys.modules, "matplotlib", None)
        result = runner.invoke(app, ["report", "--out", str(tmp_path / "x.html")], env=_cli_env(endpoints, prefix))
    assert result.exit_code == 2 and "pip install 'topicstream[report]'" in said(result)
    result = runner.invoke(app, ["report", "--out", str(tmp_path / "no" / "x.html")], env=_cli_env(endpoints, prefix))
    assert result.exit_code == 2 and "cannot write the report" in said(result)
    result = runner.invoke(app, ["report", "--since", "soon"], env=_cli_env(endpoints, prefix))
    assert result.exit_code == 2 and "duration" in said(result)
    result = runner.invoke(app, ["report", "--x", "words"], env=_cli_env(endpoints, prefix))
    assert result.exit_code == 2 and "time or articles" in said(result)


# ------------------------------------------------------------------------------------------------ a real browser
def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless browser installed (apt-get install chromium)")


def _chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",  # root in CI containers
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1280,1800",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _browser()
    from PIL import Image  # comes with matplotlib

    page = tmp_path / "drift.html"
    write_report(records(), page, None, top=4)
    dom = _chromium(browser, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # The browser parsed the inline SVG with the chart's text as text: axis labels and each line's legend entry.
    assert re.search(r"<svg[^>]*>", html)
    for text in ("prevalence (share of the corpus)", "#0 election vote party", "#1 oil crude opec", "#3 bank rates"):
        assert text in html, text
    for section in ("rose", "faded", "born", "changed"):
        assert f'<section id="{section}">' in html
    assert html.count("<tr>") >= 1 + 4  # header rows + at least one row in the lists

    shot = tmp_path / "page.png"
    run = _chromium(browser, tmp_path / "profile", f"--screenshot={shot}", page.as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int32)
    assert pixels.shape == (1800, 1280, 3)
    ink = float((pixels.sum(axis=2) < 600).mean())
    assert ink > 0.01, f"the page looks blank ({ink:.2%} non-white pixels)"
    # The first two lines' colours (matplotlib's tab10 blue and orange) are on screen.
    for colour in ((31, 119, 180), (255, 127, 14)):
        near = int((np.abs(pixels - np.array(colour)).max(axis=2) < 12).sum())
        assert near > 200, f"no line of colour {colour} on the screenshot"
