"""Tables a person reads in a terminal: the topics of a snapshot summary, the topics a subscription's words mean."""

from __future__ import annotations

from typing import Any

from rich.table import Table

__all__ = ["EMPTY", "TRUNCATION_LIMITS", "TRUNCATION_USED", "matches_table", "topics_table"]

#: A topic slot holding less of the corpus than this is empty: never used yet, or freed by topic hygiene (a merge
#: or a retirement moved its tokens away). Topic hygiene's own line (``TopicHygiene.empty_below``), written again
#: rather than imported: importing ``kernels`` would load numba into every command that prints a table.
EMPTY = 1e-4

#: An online HDP whose topics holding 95 % of the weight fill more than this share of its truncation K is limited by
#: K, not by the data (docs/ohdp.md, "When the truncation limits the count"); the alert
#: ``TopicstreamTruncationLimitsTopics`` (deploy/prometheus/alerts.yml) uses the same share.
TRUNCATION_LIMITS = 0.8
#: ... and so is one with at least this share of its slots holding 1 % of the weight or more: a K far too small,
#: where the HDP joins subjects into muddled topics rather than spreading its mass over every slot.
TRUNCATION_USED = 0.9


def topics_table(
    summary: dict[str, Any],
    n_words: int = 8,
    limit: int | None = None,
    names: dict[int, str] | None = None,
    show_empty: bool = False,
    one_line: bool = False,
    more: str = "--limit",
    smallest: float = EMPTY,
) -> Table:
    """The topics of a snapshot summary as a rich table, most prevalent first (with their names, if any); the
    background topic (the words every article uses) is marked as such. Empty slots (:data:`EMPTY`) are left out
    unless ``show_empty``: their top words are leftovers, and an online HDP has most of its truncation empty; the
    caption says how many were left out, and, for an online HDP, when its truncation limits the number of topics
    (:data:`TRUNCATION_LIMITS`, :data:`TRUNCATION_USED`). ``one_line``: each topic on one line, its words cut to
    the width (a live view that must fit the terminal); ``more``: what shows the topics beyond ``limit``;
    ``smallest``: topics of a smaller prevalence are left out too, and counted (a live view shows the topics
    used, not the slots a small corpus leaves nearly empty)."""
    rows = sorted(summary["topics"], key=lambda t: -t["prevalence"])
    hidden = 0 if show_empty else sum(1 for t in rows if t["prevalence"] < EMPTY)
    small = 0 if show_empty else sum(1 for t in rows if EMPTY <= t["prevalence"] < smallest)
    rows = rows if show_empty else [t for t in rows if t["prevalence"] >= max(EMPTY, smallest)]
    shown_by = "(topicstream topics --all shows them)"
    notes = [f"{_count(hidden, 'empty topic slot')} not shown {shown_by}"] if hidden else []
    if small:
        notes.append(f"{_count(small, 'topic')} of a prevalence under {smallest:.0%} not shown")
    holding, used, slots = summary.get("topics_holding_95"), summary["topics_used"], len(summary["topics"])
    crowded = holding is not None and (holding > TRUNCATION_LIMITS * slots or used >= TRUNCATION_USED * slots)
    if summary["algorithm"] == "ohdp" and crowded:
        notes.append(
            f"{holding} of the {slots} topic slots hold 95 % of the weight and {used} hold at least 1 %: the "
            "truncation, not the data, limits the number of topics; raise TOPICSTREAM_TOPICS (docs/ohdp.md)"
        )
    table = Table(
        caption="\n".join(notes) or None,
        caption_justify="left",
        title=f"{summary['algorithm']} · snapshot v{summary['version']} · "
        f"{summary['articles_learned']:,} articles · {summary['topics_used']} topics used · "
        f"drift {summary['model_drift']:.3f}",
        title_justify="left",
        expand=one_line,
    )
    # One line a topic: every column but the words keeps its width, the words take what is left and are cut
    # (rich otherwise shrinks the columns it may wrap, down to nothing: the numbers vanished at 80 columns).
    cut: dict[str, Any] = {"no_wrap": True, "overflow": "ellipsis"} if one_line else {}
    table.add_column("topic", justify="right", no_wrap=one_line)
    if names:
        table.add_column("name", width=16 if one_line else None, **cut)
    table.add_column("prevalence", justify="right", no_wrap=one_line)
    table.add_column("drift", justify="right", no_wrap=one_line)
    table.add_column("top words", ratio=1 if one_line else None, **cut)
    if limit is not None and len(rows) > limit:
        notes.append(f"{len(rows) - limit} more not shown ({more})")
        table.caption = "\n".join(notes)
    for t in rows[:limit]:
        label = f"{t['topic']} (background)" if t.get("background") else str(t["topic"])
        cells = [label] + ([names.get(t["topic"], "")] if names else [])
        cells += [f"{t['prevalence']:.3f}", f"{t['drift']:.3f}", " ".join(t["top_words"][:n_words])]
        table.add_row(*cells)
    return table


def _count(n: int, thing: str) -> str:
    """``n`` and ``thing``, plural unless one: "1 topic", "3 topics"."""
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def matches_table(matches: list[Any], words: str, version: Any) -> Table:
    """The topics that ``words`` resolved to (``service.follow.Match`` list), best first."""
    table = Table(title=f"topics for {words!r} · snapshot v{version}", title_justify="left")
    for col, justify in (("topic", "right"), ("name", "left"), ("score", "right"), ("top words", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for m in matches:
        table.add_row(str(m.topic), m.name or "", f"{m.score:.2f}", " ".join(m.top_words[:8]))
    return table


def names_table(names: dict[int, str], summary: dict[str, Any] | None, prefix: str) -> Table:
    """``topicstream label`` without arguments: each named topic, its name and its top words in ``summary``."""
    words = {t["topic"]: " ".join(t["top_words"][:8]) for t in (summary or {"topics": []})["topics"]}
    table = Table(title=f"topic names under Redis prefix {prefix!r}", title_justify="left")
    for col in ("topic", "name", "top words"):
        table.add_column(col)
    for k, n in names.items():
        table.add_row(str(k), n, words.get(k, ""))
    return table
