"""Tables a person reads in a terminal: the topics of a snapshot summary."""

from __future__ import annotations

from typing import Any

from rich.table import Table

__all__ = ["topics_table"]


def topics_table(
    summary: dict[str, Any], n_words: int = 8, limit: int | None = None, names: dict[int, str] | None = None
) -> Table:
    """The topics of a snapshot summary as a rich table, most prevalent first (with their names, if any); the
    background topic (the words every article uses) is marked as such."""
    table = Table(
        title=f"{summary['algorithm']} · snapshot v{summary['version']} · "
        f"{summary['articles_learned']:,} articles · {summary['topics_used']} topics used · "
        f"drift {summary['model_drift']:.3f}",
        title_justify="left",
    )
    table.add_column("topic", justify="right")
    if names:
        table.add_column("name")
    table.add_column("prevalence", justify="right")
    table.add_column("drift", justify="right")
    table.add_column("top words")
    rows = sorted(summary["topics"], key=lambda t: -t["prevalence"])
    for t in rows[:limit]:
        label = f"{t['topic']} (background)" if t.get("background") else str(t["topic"])
        cells = [label] + ([names.get(t["topic"], "")] if names else [])
        cells += [f"{t['prevalence']:.3f}", f"{t['drift']:.3f}", " ".join(t["top_words"][:n_words])]
        table.add_row(*cells)
    return table
