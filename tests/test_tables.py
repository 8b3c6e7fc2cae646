"""The topics table a person reads (service/tables.py)."""

from __future__ import annotations

from service.tables import EMPTY, TRUNCATION_LIMITS, TRUNCATION_USED, topics_table


def summary(prevalences: list[float]) -> dict:
    return {
        "algorithm": "ohdp",
        "version": 7,
        "articles_learned": 1000,
        "topics_used": sum(p >= 0.01 for p in prevalences),
        "model_drift": 0.0,
        "topics": [
            {"topic": k, "prevalence": p, "drift": 0.0, "top_words": [f"w{k}"], "background": False}
            for k, p in enumerate(prevalences)
        ],
    }


def test_empty_slots_are_left_out_and_counted_unless_asked_for() -> None:
    s = summary([0.5, 0.0, 0.3, EMPTY / 2, 0.2 - EMPTY / 2, EMPTY])
    table = topics_table(s)
    assert list(table.columns[0].cells) == ["0", "2", "4", "5"]  # most prevalent first; EMPTY itself is a topic
    assert table.caption == "2 empty topic slots not shown (topicstream topics --all shows them)"
    everything = topics_table(s, show_empty=True)
    assert list(everything.columns[0].cells) == ["0", "2", "4", "5", "3", "1"] and everything.caption is None
    assert list(topics_table(s, limit=2).columns[0].cells) == ["0", "2"]
    assert topics_table(summary([0.6, 0.4])).caption is None


def test_an_online_hdp_limited_by_its_truncation_is_told_to_raise_it() -> None:
    crowded = summary([0.1] * 10) | {"topics_holding_95": 9}  # 9 of 10 slots hold 95 %: > TRUNCATION_LIMITS
    caption = topics_table(crowded).caption
    assert isinstance(caption, str) and "9 of the 10 topic slots hold 95 % of the weight and 10 hold" in caption
    assert "raise TOPICSTREAM_TOPICS" in caption
    assert topics_table(crowded | {"algorithm": "scvb0"}).caption is None  # K is the number of topics asked for
    # 8 of 10 hold 95 % (not more than TRUNCATION_LIMITS): quiet while fewer than 9 hold 1 % (TRUNCATION_USED) ...
    roomy = summary([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.04, 0.005, 0.005]) | {"topics_holding_95": 8}
    assert roomy["topics_used"] == 8 and int(TRUNCATION_LIMITS * 10) == 8 and TRUNCATION_USED * 10 == 9
    assert topics_table(roomy).caption is None
    # ... and not when muddles hold the mass and every slot carries at least 1 %.
    muddled = summary([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.03, 0.01, 0.01]) | {"topics_holding_95": 8}
    caption = topics_table(muddled).caption
    assert isinstance(caption, str) and "8 of the 10 topic slots hold 95 % of the weight and 10 hold" in caption
    both = topics_table(crowded | {"topics": crowded["topics"] + summary([0.0])["topics"]}).caption
    assert isinstance(both, str) and both.splitlines()[0].startswith("1 empty topic slot not shown")


def test_the_live_view_gives_each_topic_one_line_of_an_80_column_terminal() -> None:
    """``make run``'s live table wrapped each topic's eight words onto two lines at 80 columns (three with a name
    column), so a 24-line terminal showed 10 of 16 topics, and the rows re-sorted at every refresh came and went.
    With ``one_line`` the words are cut to the width, and the caption says how many rows ``limit`` left out."""
    import io

    from rich.console import Console

    s = summary([0.2] + [0.05] * 16)
    for topic in s["topics"]:
        topic["top_words"] = ["football", "goal", "striker", "midfielder", "defender", "goalkeeper", "league", "cup"]
    for names in (None, {0: "Football and everything said about it"}):
        out = io.StringIO()
        Console(file=out, width=80).print(topics_table(s, limit=12, names=names, one_line=True, more="a taller one"))
        lines = out.getvalue().splitlines()
        rows = [line for line in lines if "football" in line]
        assert len(rows) == 12 and all(len(line) <= 80 for line in lines)
        assert [row.split("│")[1].strip() for row in rows] == [str(k) for k in range(12)]  # the ids, the numbers
        assert "prevalence" in lines[2] and "drift" in lines[2] and all("0.050 │ 0.000" in row for row in rows[1:])
        assert lines[-1].strip() == "5 more not shown (a taller one)"
    wrapped = io.StringIO()
    Console(file=wrapped, width=80).print(topics_table(s, limit=12))
    assert len(wrapped.getvalue().splitlines()) > len(lines)  # the table `topicstream topics` prints still wraps


def test_a_live_view_of_a_small_corpus_shows_the_topics_used_and_counts_the_rest() -> None:
    """A 600-article file of three subjects at K = 20: "4 topics used" over 20 rows, 16 of them slivers whose words
    mixed every subject."""
    s = summary([0.34, 0.31, 0.28, 0.03] + [0.0025] * 16)
    table = topics_table(s, smallest=0.01)
    assert list(table.columns[0].cells) == ["0", "1", "2", "3"]
    assert table.caption == "16 topics of a prevalence under 1% not shown"
    assert len(list(topics_table(s).columns[0].cells)) == 20  # `topicstream topics` shows every topic but empty slots
    one = topics_table(summary([0.5, 0.495, 0.005, EMPTY / 2]), smallest=0.01).caption
    assert one == (
        "1 empty topic slot not shown (topicstream topics --all shows them)\n1 topic of a prevalence under 1% not shown"
    )
