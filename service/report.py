"""``topicstream report``: what the topics did over time, as a self-contained HTML page and a PNG.

Reads the bounded summary history (:mod:`service.history`) and the topic names (the hash ``P:topic-names``,
topic id → name, when it exists) from Redis, and shows:

- the prevalence over time of the topics with the highest mean prevalence over the history (so topics that
  faded are shown too), each labelled by its name or by its newest top words less the words common to many
  topics (:func:`common_words`);
- the topics that rose and faded most between a baseline record ("then": the oldest kept, or one chosen with
  ``--since``) and the newest ("now");
- the topics born since then (under half of :data:`USED` then, at least :data:`USED` now);
- the topics whose meaning changed most: the Jaccard distance between their top words then and now, among
  topics used both then and now.

The chart is drawn with matplotlib (the optional extra ``topicstream[report]``) into an inline SVG, text kept
as text, and a PNG. The page loads nothing from the network: no scripts, no fonts, no CDN.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from .history import SummaryHistory
from .names import TopicNames

__all__ = [
    "USED",
    "Analysis",
    "Change",
    "ReportUnavailable",
    "analyse",
    "baseline_index",
    "common_words",
    "draw",
    "label_of",
    "load",
    "parse_duration",
    "render_html",
    "write_report",
]

USED = 0.01
"""A topic holding at least this share of the corpus is "used" (the same 1 % as ``topicstream_topics_used``)."""
LIST_LEN = 5
"""Entries in each of the rose / faded / born / changed lists."""


class ReportUnavailable(RuntimeError):
    """matplotlib is not installed."""


@dataclass(frozen=True)
class Change:
    """One topic between the baseline record and the newest."""

    topic: int
    label: str
    then: float
    now: float
    words_then: list[str]
    words_now: list[str]

    @property
    def meaning_change(self) -> float:
        """Jaccard distance of the top-word sets (0: same words, 1: none shared)."""
        a, b = set(self.words_then), set(self.words_now)
        return 1.0 - len(a & b) / len(a | b) if a | b else 0.0


@dataclass
class Analysis:
    """Everything the page shows, computed from the history records."""

    records: list[dict[str, Any]]
    baseline: int
    lines: list[tuple[int, str, list[float]]] = field(default_factory=list)  # (topic, label, prevalence per record)
    rose: list[Change] = field(default_factory=list)
    faded: list[Change] = field(default_factory=list)
    born: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)

    @property
    def then(self) -> dict[str, Any]:
        return self.records[self.baseline]

    @property
    def now(self) -> dict[str, Any]:
        return self.records[-1]


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '24h' or '7d' in seconds; ``ValueError`` with the accepted forms otherwise."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise ValueError(f"expected a duration such as 90s, 15m, 24h or 7d, got {text!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"expected a positive duration such as 90s, 15m, 24h or 7d, got {text!r}")
    return seconds


def baseline_index(records: Sequence[Mapping[str, Any]], since_s: float | None = None) -> int:
    """Index of the baseline record: the oldest one, or the oldest of the newest records (in version order) created
    within ``since_s`` seconds of the newest, in order (the newest itself when none is). Counted back from the
    newest and stopped where the times run backwards: a record stamped later than its successor was written by a
    learner whose clock ran fast, and its time says nothing of how long ago it was."""
    if since_s is None or not records:
        return 0
    created = [float(r["created_at"]) for r in records]
    start = created[-1] - since_s
    i = len(records) - 1
    while i > 0 and start <= created[i - 1] <= created[i]:
        i -= 1
    return i


def _by_topic(record: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(t["topic"]): t for t in record["topics"]}


def common_words(record: Mapping[str, Any], share: float = 0.25) -> set[str]:
    """Words in the top words of more than ``share`` of the used topics ("said", "reuter", "mln" in a newswire):
    they tell topics apart badly, so labels skip them (the tables still show every top word)."""
    used = [t["top_words"] for t in record["topics"] if float(t["prevalence"]) >= USED]
    counts: dict[str, int] = {}
    for words in used:
        for w in set(words):
            counts[w] = counts.get(w, 0) + 1
    return {w for w, c in counts.items() if c > max(2, share * len(used))}


def label_of(
    topic: int, words: Sequence[str], names: Mapping[int, str], skip: set[str] | None = None, n_words: int = 3
) -> str:
    """A topic's name when it has one, else its first ``n_words`` top words that are not in ``skip``."""
    if topic in names:
        return names[topic]
    chosen = [w for w in words if w not in (skip or set())][:n_words]
    return " ".join(chosen or words[:n_words]) or f"topic {topic}"


def analyse(
    records: Sequence[Mapping[str, Any]], names: Mapping[int, str] | None = None, top: int = 8, baseline: int = 0
) -> Analysis:
    """Pick the lines to draw and the topics that rose, faded, were born or changed meaning most."""
    if not records:
        raise ValueError("no history records to analyse")
    names = names or {}
    recs = [dict(r) for r in records]
    now, then = _by_topic(recs[-1]), _by_topic(recs[baseline])
    skip = common_words(recs[-1])
    series: dict[int, list[float]] = {k: [] for k in now}
    for r in recs:
        prev = _by_topic(r)
        for k in series:
            series[k].append(float(prev[k]["prevalence"]) if k in prev else 0.0)
    peak = sorted(series, key=lambda k: (-sum(series[k]), k))[:top]
    out = Analysis(recs, baseline)
    out.lines = [(k, label_of(k, now[k]["top_words"], names, skip), series[k]) for k in peak]

    changes = []
    for k, t in now.items():
        old = then.get(k)
        changes.append(
            Change(
                k,
                label_of(k, t["top_words"], names, skip),
                float(old["prevalence"]) if old else 0.0,
                float(t["prevalence"]),
                list(old["top_words"]) if old else [],
                list(t["top_words"]),
            )
        )
    born = [c for c in changes if c.then < USED / 2 and c.now >= USED]
    out.born = sorted(born, key=lambda c: -c.now)[:LIST_LEN]
    born_ids = {c.topic for c in born}
    out.rose = sorted((c for c in changes if c.now > c.then and c.topic not in born_ids), key=lambda c: c.then - c.now)
    out.rose = out.rose[:LIST_LEN]
    out.faded = sorted((c for c in changes if c.now < c.then), key=lambda c: c.now - c.then)[:LIST_LEN]
    both = [c for c in changes if c.then >= USED and c.now >= USED and c.meaning_change > 0]
    out.changed = sorted(both, key=lambda c: (-c.meaning_change, -c.now))[:LIST_LEN]
    return out


# ------------------------------------------------------------------------------------------------ drawing
def _x_values(records: Sequence[Mapping[str, Any]], x: str) -> tuple[list[Any], str]:
    if x == "articles":
        return [int(r["articles_learned"]) for r in records], "articles learned"
    if x == "time":
        # UTC, as `topicstream topics` and the lineage show times: a report is read in other zones than it is made in
        utc = [dt.datetime.fromtimestamp(float(r["created_at"]), dt.timezone.utc) for r in records]
        return [t.replace(tzinfo=None) for t in utc], "snapshot time (UTC)"
    raise ValueError(f"x must be 'time' or 'articles', got {x!r}")


def draw(analysis: Analysis, title: str, x: str = "time", top_ticks: Sequence[tuple[float, str]] = ()) -> Any:
    """The prevalence chart as a matplotlib ``Figure`` (no pyplot: no global state, no display needed).

    ``top_ticks`` label positions of the horizontal axis along the top (e.g. the dates that the article counts
    of a replayed stream reached)."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportUnavailable(
            "topicstream report draws its chart with matplotlib: pip install 'topicstream[report]'"
        ) from None
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG (searchable, checked by the tests)
    matplotlib.rcParams["svg.hashsalt"] = "topicstream"  # the same history gives the same page
    xs, xlabel = _x_values(analysis.records, x)
    fig = Figure(figsize=(11, 5.2), layout="constrained")
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    for i, (k, label, ys) in enumerate(analysis.lines):
        style = "-" if i < 10 else "--"
        ax.plot(xs, ys, style, color=colors(i % 10), lw=2, marker="o", ms=2.5, label=f"#{k} {label}")
    if analysis.baseline > 0:
        ax.axvline(xs[analysis.baseline], color="0.6", lw=1, ls=":", label="baseline (then)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("prevalence (share of the corpus)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if top_ticks:
        top = ax.secondary_xaxis("top")
        top.set_xticks([t for t, _ in top_ticks], [label for _, label in top_ticks], fontsize=8)
    ax.set_title(title, loc="left", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False, title="topic · top words")
    return fig


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]  # drop the XML declaration and DOCTYPE: the SVG is inlined in HTML
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)  # RDF about the file: not shown


# ------------------------------------------------------------------------------------------------ the page
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1150px;color:#222}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:1.8rem}
.meta{color:#555;margin-top:0} figure{margin:1rem 0} figure svg{width:100%;height:auto}
figcaption{color:#555;font-size:.9rem}
table{border-collapse:collapse;width:100%;font-size:.92rem}
th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #ddd;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.up{color:#1a7f37} .down{color:#c62828} .none{color:#777;font-style:italic}
td s{color:#c62828} td b{color:#1a7f37;font-weight:600}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:0 2rem}
"""


def _when(record: Mapping[str, Any]) -> str:
    t = float(record.get("created_at", 0.0))
    when = dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%MZ") if t > 0 else "?"
    return f"v{record['version']} ({when}, {int(record['articles_learned']):,} articles)"


def _words(words: Sequence[str], n: int = 8, mark: Sequence[str] = (), tag: str = "b") -> str:
    """The first ``n`` words, escaped; those not in ``mark`` wrapped in ``tag`` (when ``mark`` is given)."""
    keep = set(mark)
    out = [html.escape(w) if not keep or w in keep else f"<{tag}>{html.escape(w)}</{tag}>" for w in words[:n]]
    return " ".join(out) or '<span class="none">—</span>'


def _table(section: str, heading: str, rows: Sequence[Change], empty: str, meaning: bool = False) -> str:
    e = html.escape
    out = [f'<section id="{section}"><h2>{e(heading)}</h2>']
    if not rows:
        out.append(f'<p class="none">{e(empty)}</p></section>')
        return "".join(out)
    if meaning:
        out.append(
            "<table><thead><tr><th>topic</th><th>top words then (<s>dropped</s>)</th>"
            "<th>top words now (<b>new</b>)</th><th>words replaced</th></tr></thead><tbody>"
        )
        for c in rows:
            out.append(
                f"<tr><td>#{c.topic} {e(c.label)}</td><td>{_words(c.words_then, mark=c.words_now, tag='s')}</td>"
                f"<td>{_words(c.words_now, mark=c.words_then, tag='b')}</td>"
                f'<td class="num">{c.meaning_change:.0%}</td></tr>'
            )
    else:
        out.append(
            "<table><thead><tr><th>topic</th><th>then</th><th>now</th><th>change</th><th>top words now</th>"
            "</tr></thead><tbody>"
        )
        for c in rows:
            cls = "up" if c.now >= c.then else "down"
            out.append(
                f'<tr><td>#{c.topic} {e(c.label)}</td><td class="num">{c.then:.1%}</td><td class="num">{c.now:.1%}'
                f'</td><td class="num {cls}">{c.now - c.then:+.1%}</td><td>{_words(c.words_now)}</td></tr>'
            )
    out.append("</tbody></table></section>")
    return "".join(out)


def render_html(analysis: Analysis, svg: str, title: str, source: str) -> str:
    """The self-contained page: the inline SVG chart and the four tables."""
    e = html.escape
    a = analysis
    algorithm = a.now.get("algorithm", "")
    meta = (
        f"{e(source)} · {e(algorithm)} · {len(a.records)} snapshots kept in the bounded history · "
        f"then = {e(_when(a.then))} · now = {e(_when(a.now))}"
    )
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width,initial-scale=1">',
            f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
            f'<h1>{e(title)}</h1><p class="meta">{meta}</p>',
            f'<figure id="prevalence">{svg}<figcaption>Prevalence of the {len(a.lines)} topics with the highest '
            "mean prevalence, each labelled by its name or by its newest top words (less words common to many "
            "topics). Older history is kept at coarser spacing.</figcaption></figure>",
            '<div class="grid">',
            _table("rose", "Rose most", a.rose, "No topic gained prevalence."),
            _table("faded", "Faded most", a.faded, "No topic lost prevalence."),
            "</div>",
            _table(
                "born",
                f"Born (under {USED / 2:.1%} then, at least {USED:.0%} now)",
                a.born,
                "No topic was born since then.",
            ),
            _table(
                "changed",
                "Changed meaning most (topics used then and now)",
                a.changed,
                "No used topic changed its top words.",
                meaning=True,
            ),
            "</body></html>\n",
        ]
    )


def write_report(
    records: Sequence[Mapping[str, Any]],
    html_path: Path,
    png_path: Path | None,
    names: Mapping[int, str] | None = None,
    top: int = 8,
    baseline: int = 0,
    x: str = "time",
    title: str = "Topic drift",
    source: str = "",
    top_ticks: Sequence[tuple[float, str]] = (),
) -> Analysis:
    """Analyse ``records`` and write the page (and the PNG when ``png_path`` is given)."""
    analysis = analyse(records, names, top=top, baseline=baseline)
    fig = draw(analysis, f"{title}: prevalence of the top {len(analysis.lines)} topics", x=x, top_ticks=top_ticks)
    html_path.write_text(render_html(analysis, _svg(fig), title, source), encoding="utf-8")
    if png_path is not None:
        fig.savefig(png_path, dpi=110, metadata={"Software": None})
    return analysis


def load(client: redis.Redis, prefix: str) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The history records and topic names stored under ``prefix``."""
    return SummaryHistory(client, prefix).read(), TopicNames(client, prefix).all()
