"""The docs stay true: generated tables match the code, every package is listed, every relative link resolves,
and the hand-written tables of docs/ that name code (Redis keys, particle-filter defaults) match it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import redis
from prometheus_client import generate_latest

from service import doctables
from service.schemas import Rejection, decode_article

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "deploy" / "README.md"]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------ generated tables
@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_generated_blocks_match_the_code(path: Path) -> None:
    stale = doctables.stale_blocks(_read(path))
    assert not stale, f"{path.name}: stale generated tables {stale}; run `make docs`"


def test_the_readme_and_docs_have_every_generated_table() -> None:
    text = "".join(_read(path) for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    present = re.findall(r"<!-- doctables:([a-z-]+) -->", text)
    assert sorted(present) == sorted(doctables.GENERATORS)  # each once


def test_every_package_and_top_level_directory_is_in_the_development_table() -> None:
    table = doctables.packages_table()
    packages = {p.as_posix() for p in doctables.package_dirs()}
    assert {"kernels", "service", "service/dev", "evaluation", "benchmarks", "tests"} <= packages
    assert {"tests/faults", "tests/naive", "tests/integration"} <= packages
    top = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and not p.name.endswith(".egg-info") and p.name != "build"
    }
    for directory in packages | top:
        assert f"| `{directory}/` |" in table, f"{directory}/ is missing from the README's Development table"


def test_a_package_without_a_docstring_fails_generation(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"pkg/__init__\.py has no docstring"):
        doctables.packages_table(tmp_path)


def test_metric_labels_read_from_the_source_are_the_real_ones() -> None:
    """The table's label names come from the source; the metric objects must accept exactly those."""
    from service.metrics import Metrics

    m = Metrics("learner")
    exposition = generate_latest(m.registry).decode()
    rows = re.findall(r"^\| `(topicstream_[a-z_]+)` \| (\w+) \| ([a-z, ]*) \|", doctables.metrics_table(), re.M)
    assert len(rows) > 20
    by_family = {c.describe()[0].name: c for c in vars(m).values() if hasattr(c, "describe")}
    for name, kind, labels in rows:
        assert f"# HELP {name} " in exposition  # the name a scraper sees
        if kind == "info":
            continue
        metric = by_family[name.removesuffix("_total")]
        names = [x for x in labels.split(", ") if x]
        if names:
            metric.labels(**dict.fromkeys(names, "x"))  # raises ValueError on wrong label names
        else:
            with pytest.raises(ValueError):
                metric.labels(anything="x")


def test_dead_letter_reasons_are_the_ones_the_decoder_returns() -> None:
    samples = [None, b"x" * 2000, b"\xff\xfe", b"{", b"[1]", b'{"id": ""}', b'{"id": "a", "text": ""}']
    returned = set()
    for value in samples:
        result = decode_article(value, max_bytes=1000)
        assert isinstance(result, Rejection)
        returned.add(result.reason)
    assert returned == set(doctables.dead_letter_reasons()) == set(doctables.REASON_DOCS)


def test_every_header_constant_is_described() -> None:
    from service import pipeline

    constants = {k for k in vars(pipeline) if k.startswith("H_")}
    assert constants == set(doctables.HEADER_DOCS)
    rendered = doctables.headers_table("output") + doctables.headers_table("dead letter")
    for k in constants:
        assert f"`{getattr(pipeline, k)}`" in rendered


def test_every_command_is_in_the_commands_table() -> None:
    import typer.main

    from service.cli import app

    table = doctables.commands_table()
    for name in typer.main.get_command(app).commands:  # type: ignore[attr-defined]
        assert f"| `topicstream {name}" in table


# ------------------------------------------------------------------------------------------ hand-written tables
def test_redis_keys_in_the_architecture_page_are_the_keys_the_code_builds() -> None:
    from service.history import SummaryHistory
    from service.lease import Lease
    from service.lineage import LineageStore
    from service.names import TopicNames
    from service.seen import SeenIds
    from service.snapshot import SnapshotStore

    client = redis.Redis()  # never connected: the classes only derive key names here
    store = SnapshotStore(client, prefix="P")
    lease = Lease(client, prefix="P")
    history = SummaryHistory(client, prefix="P")
    keys = [
        store.channel,
        lease.key,
        lease.token_key,
        f"{lease.key}:grace",
        history.versions_key,
        history.records_key,
        TopicNames(client, "P").key,
        LineageStore(client, "P").key,
        LineageStore(client, "P").counts_key,
        *SeenIds(client, "P").keys,
    ]
    source = inspect.getsource(SnapshotStore)
    for part in ("version", "latest", "kept"):
        assert f'"snapshot", "{part}"' in source
        keys.append(f"P:snapshot:{part}")
    assert '"snapshot", version, "data"' in source and '"snapshot", version, "meta"' in source
    keys += ["P:snapshot:<v>:data", "P:snapshot:<v>:meta", "P:summary"]
    text = _read(ROOT / "docs" / "architecture.md")
    table = text[text.index("## Redis keys") :]
    for key in keys:
        assert f"| `{key}` |" in table, f"{key} is missing from docs/architecture.md's Redis keys"


def test_particle_filter_defaults_in_the_docs_are_the_code_defaults() -> None:
    from kernels.particle_filter import ParticleFilterLDA

    defaults = {
        name: p.default
        for name, p in inspect.signature(ParticleFilterLDA.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    text = _read(ROOT / "docs" / "particle-filter.md")
    rows = re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| ([^|]+) \|", text[text.index("## Defaults") :], re.M)
    assert rows
    for names, values in rows:
        for name, value in zip(re.findall(r"`(\w+)`", names), values.split(", "), strict=True):
            expected = defaults[name]
            shown = value.strip().strip("`").replace(",", "")
            assert shown in (str(expected), f'"{expected}"'), f"{name}: docs say {value}, code says {expected!r}"


# ------------------------------------------------------------------------------------------ links
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings of ``markdown``."""
    found = set()
    for heading in re.findall(r"^#+\s+(.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve_inside_the_repository(path: Path) -> None:
    """Links go to files of the repository only (the docs must stay true offline and in a fork)."""
    text = re.sub(r"```.*?```", "", _read(path), flags=re.S)  # code blocks hold no links
    assert not re.findall(r"<[a-z]+://[^>]*>", text), f"{path.name}: a link outside the repository"
    for target in _LINK.findall(text):
        assert not re.match(r"[a-z]+:", target), f"{path.name}: {target} is outside the repository"
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        assert dest.is_relative_to(ROOT), f"{path.name}: {target} points outside the repository"
        assert dest.exists(), f"{path.name}: {target} does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(_read(dest)), f"{path.name}: {target}: no heading #{anchor}"


_PATH = re.compile(r"`((?:\.\./)?[\w.-]+(?:/[\w.-]+)+\.(?:py|md|yml|yaml|json|png|toml))`")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_file_paths_named_in_the_docs_exist(path: Path) -> None:
    """A path in backticks (`service/worker.py`) names a file of the repository, from its root or the page."""
    for name in set(_PATH.findall(_read(path))):
        if name.startswith("../shared/"):  # the corpora and papers, outside the repository by design
            continue
        assert (ROOT / name).exists() or (path.parent / name).exists(), f"{path.name}: `{name}` does not exist"
