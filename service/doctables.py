"""The tables of README.md (and of any page of docs/ that holds such a block) that are generated from the code, and
the one command that rewrites them.

``python -m service.doctables README.md docs/*.md`` (``make docs``) rewrites, in each file, every block
between ``<!-- doctables:NAME -->`` and ``<!-- /doctables:NAME -->`` with the table :data:`GENERATORS` makes
for NAME; ``--check`` only reports stale blocks (exit 1). ``tests/test_docs.py`` fails when a block differs from
what the code says, so a renamed metric, a new setting or a new command cannot leave the README behind.

What each table is generated from:

* ``settings``: the fields of :class:`service.settings.Settings` (:func:`service.settings.settings_table`);
* ``metrics`` and ``feed-metrics``: the series registered by :class:`service.metrics.Metrics` and
  :class:`service.feeds.FeedMetrics` (name, type and help from their registries; label names from the calls
  that create them);
* ``output-headers`` and ``dead-letter-headers``: the ``H_*`` constants of :mod:`service.pipeline` (each needs an
  entry in :data:`HEADER_DOCS`, or generation fails);
* ``dead-letter-reasons``: the reasons :func:`service.schemas.decode_article` can return (each needs an entry in
  :data:`REASON_DOCS`, or generation fails);
* ``commands``: the typer app of :mod:`service.cli` (names, arguments, options and the first paragraph of each
  help);
* ``eval-output``: the keys of ``topicstream eval --json`` (:data:`evaluation.command.OUTPUT_FIELDS`);
* ``redis-keys``: the keys under the Redis prefix and their types (:data:`service.keys.KEYS`);
* ``packages``: every Python package's docstring (first paragraph), plus :data:`DIRECTORY_DOCS` for the
  directories that are not packages;
* ``service-benchmark``: the runs saved by ``python -m benchmarks.bench_service --save LABEL`` in
  ``docs/service-benchmark.json`` (measurements, not code: regenerating the table never re-measures).

Importing this module imports neither numba nor a Kafka or Redis connection.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "DIRECTORY_DOCS",
    "GENERATORS",
    "HEADER_DOCS",
    "REASON_DOCS",
    "commands_table",
    "dead_letter_reasons",
    "feed_metrics_table",
    "headers_table",
    "metrics_table",
    "packages_table",
    "render",
    "service_benchmark_table",
    "stale_blocks",
]

ROOT = Path(__file__).resolve().parents[1]

#: What each header of :mod:`service.pipeline` means: constant name → (where it appears, meaning).
HEADER_DOCS: dict[str, tuple[str, str]] = {
    "H_TOPIC": (
        "output",
        "the dominant topic's stable id (its slot until topic hygiene moves a topic), the background topic left out; "
        "empty for an article without a word in the vocabulary",
    ),
    "H_TOPICS": ("output", "comma-separated stable ids of the topics in `top_topics` (empty when none qualifies)"),
    "H_VERSION": ("output", "version of the snapshot (model) that computed the mixture"),
    "H_ALGORITHM": ("output", "`scvb0`, `ohdp` or `pf`"),
    "H_REASON": ("dead letter", "why the message was rejected (the reasons below)"),
    "H_DETAIL": ("dead letter", "what exactly was wrong, at most 2,000 characters"),
    "H_SRC_TOPIC": ("dead letter", "topic the message was read from"),
    "H_SRC_PARTITION": ("dead letter", "its partition"),
    "H_SRC_OFFSET": ("dead letter", "its offset"),
    "H_ORIGINAL_BYTES": ("dead letter", "length of the original value in bytes"),
    "H_TRUNCATED": (
        "dead letter",
        "`true` when the value was cut to `TOPICSTREAM_DLQ_MAX_BYTES` (or left out: the producer refused it)",
    ),
    "H_ORIGINAL_SHA256": ("dead letter", "sha256 of the whole original value, when it was cut"),
    "H_ORIGINAL_KEY_SHA256": (
        "dead letter",
        "sha256 of the original key, when it was longer than 1,024 bytes (the dead letter then has no key)",
    ),
    "H_HEADERS_DROPPED": (
        "dead letter",
        "how many original headers were dropped because together they exceeded 16 KiB, or `unreadable` when a "
        "header key was not UTF-8 (the client reads none of them then)",
    ),
}

#: What each dead-letter reason (``Rejection.reason``) means.
REASON_DOCS: dict[str, str] = {
    "oversize": "the value is longer than `TOPICSTREAM_MAX_ARTICLE_BYTES`; or its output event, even without its title "
    "and url, is larger than the output topic takes (its `max.message.bytes`)",
    "not_utf8": "the value is not UTF-8",
    "not_json": "the value is not JSON",
    "not_object": "the JSON is not an object",
    "invalid": "a field is missing or wrong (e.g. no `id`, `text` not a string, both `text` and `title` empty or "
    "white space), "
    "or the message has no value (a tombstone)",
}

#: Directories that are not Python packages but are part of the repository.
DIRECTORY_DOCS: dict[str, str] = {
    "deploy": "Not a package: Prometheus scrape configuration and alert rules (with their promtool tests), the "
    "Grafana dashboard and its provisioning, Kubernetes manifests; `deploy/README.md` explains them and the "
    "`docker-compose.yml` of the repository root.",
    "docs": "Not a package: the design the code relies on (`docs/architecture.md`), the kernels' notes, topic "
    "hygiene, experiments and benchmark results (`docs/benchmarks.md` is written by `make bench`, "
    "`docs/experiments/` by `python -m benchmarks.pf_experiment --out docs/experiments`).",
}

#: Options every command that talks to Kafka or Redis takes; left out of the commands table (said below it).
_COMMON_OPTIONS = {"--bootstrap", "--redis-url", "--metrics-port"}


# ------------------------------------------------------------------------------------------------- metrics
def _label_names(module_file: str) -> dict[str, list[str]]:
    """Label names of every metric created in ``module_file`` by ``Counter(name, help, [labels], ...)`` (or
    ``labelnames=``; or ``counter(...)``, a ``partial`` of the class with the registry bound), read from the
    source: prometheus_client has no public way to ask a metric for them."""
    tree = ast.parse(Path(module_file).read_text(encoding="utf-8"))
    labels: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id.lower() not in {"counter", "gauge", "histogram", "summary", "info", "enum"}:
            continue
        if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            continue
        spec: ast.expr | None = node.args[2] if len(node.args) > 2 else None
        for kw in node.keywords:
            if kw.arg == "labelnames":
                spec = kw.value
        names = ast.literal_eval(spec) if spec is not None else []
        labels[node.args[0].value] = list(names)
    return labels


def _series_table(registry: object, module_file: str, info_labels: Iterable[str] = ()) -> str:
    from prometheus_client import CollectorRegistry

    assert isinstance(registry, CollectorRegistry)
    labels = _label_names(module_file)
    rows = ["| metric | type | labels | meaning |\n", "|---|---|---|---|\n"]
    for family in registry.collect():
        name = family.name
        if family.type == "counter":
            exposed, created = name + "_total", name + "_total" if name + "_total" in labels else name
        elif family.type == "info":
            exposed, created = name + "_info", name
        else:
            exposed, created = name, name
        if created not in labels:
            raise ValueError(f"{module_file}: cannot find where {exposed} is created")
        names = list(info_labels) if family.type == "info" else labels[created]
        help_text = family.documentation.replace("|", "\\|")
        rows.append(f"| `{exposed}` | {family.type} | {', '.join(names)} | {help_text} |\n")
    return "".join(rows)


def metrics_table() -> str:
    """Every series of :class:`service.metrics.Metrics` (the learner's and the replicas' ``/metrics``)."""
    from . import metrics

    m = metrics.Metrics("learner")
    m.describe_model("scvb0", 1, 1)  # the info's label names are its keys
    info = next(f for f in m.registry.collect() if f.type == "info")
    info_labels = [k for k in info.samples[0].labels] if info.samples else []
    assert metrics.__file__ is not None
    return _series_table(m.registry, metrics.__file__, info_labels)


def feed_metrics_table() -> str:
    """Every series of :class:`service.feeds.FeedMetrics` (``topicstream feeds``)."""
    from . import feeds

    assert feeds.__file__ is not None
    return _series_table(feeds.FeedMetrics().registry, feeds.__file__)


# ------------------------------------------------------------------------------------------------- events
def _check_described(table: str, described: Iterable[str], found: Iterable[str]) -> None:
    """Raise ``ValueError`` unless the table ``table`` of this module describes exactly the names ``found``."""
    missing = sorted(set(found) - set(described))
    unknown = sorted(set(described) - set(found))
    if missing or unknown:
        raise ValueError(f"service.doctables.{table}: describe {missing}, drop {unknown}")


def _header_constants() -> dict[str, str]:
    from . import pipeline

    return {k: v for k, v in vars(pipeline).items() if k.startswith("H_") and isinstance(v, str)}


def headers_table(where: str) -> str:
    """The headers :mod:`service.pipeline` writes on outputs (``where="output"``) or dead letters."""
    constants = _header_constants()
    _check_described("HEADER_DOCS", HEADER_DOCS, constants)
    rows = ["| header | meaning |\n", "|---|---|\n"]
    for const, value in constants.items():
        place, meaning = HEADER_DOCS[const]
        if place == where:
            rows.append(f"| `{value}` | {meaning} |\n")
    return "".join(rows)


def dead_letter_reasons() -> list[str]:
    """The reasons :func:`service.schemas.decode_article` returns, in the order the code checks them (read from
    its ``Rejection("reason", ...)`` calls)."""
    from . import schemas

    tree = ast.parse(inspect.getsource(schemas.decode_article))
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Rejection"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value not in found
        ):
            found.append(node.args[0].value)
    return found


def eval_output_table() -> str:
    """The keys of ``topicstream eval --json`` (:data:`evaluation.command.OUTPUT_FIELDS`)."""
    from evaluation.command import OUTPUT_FIELDS

    rows = ["| key | value |\n", "|---|---|\n"]
    rows += [f"| `{key}` | {meaning} |\n" for key, meaning in OUTPUT_FIELDS.items()]
    return "".join(rows)


def _redis_keys_table() -> str:
    from .keys import keys_table

    return keys_table()


def reasons_table() -> str:
    reasons = dead_letter_reasons()
    _check_described("REASON_DOCS", REASON_DOCS, reasons)
    rows = ["| reason | meaning |\n", "|---|---|\n"]
    rows += [f"| `{r}` | {REASON_DOCS[r]} |\n" for r in reasons]
    return "".join(rows)


# ------------------------------------------------------------------------------------------------- commands
def _usage(name: str, params: Iterable[object]) -> str:
    parts = [f"topicstream {name}"]
    for p in params:
        kind = getattr(p, "param_type_name", "")
        if kind == "argument":
            parts.append(f"[{str(getattr(p, 'name', '')).upper()}]")
            continue
        opts = [o for o in getattr(p, "opts", []) if o.startswith("--")]
        if not opts or opts[0] in _COMMON_OPTIONS:
            continue
        secondary = [o for o in getattr(p, "secondary_opts", []) if o.startswith("--")]
        if secondary:
            parts.append(f"[{opts[0]}/{secondary[0]}]")
        elif getattr(p, "is_flag", False):
            parts.append(f"[{opts[0]}]")
        else:
            parts.append(f"[{opts[0]} {str(getattr(p, 'name', '')).upper()}]")
    return " ".join(parts)


def commands_table() -> str:
    """Every command of ``topicstream`` with its arguments and options and the first line of its help."""
    import typer.main

    from .cli import app

    group = typer.main.get_command(app)
    rows = ["| command | what it does |\n", "|---|---|\n"]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        first = (command.help or "").strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|")
        usage = _usage(name, command.params).replace("|", "\\|")
        rows.append(f"| `{usage}` | {first} |\n")
    return "".join(rows)


# ------------------------------------------------------------------------------------------------- packages
def package_dirs(root: Path = ROOT) -> list[Path]:
    """Every directory of the repository holding an ``__init__.py`` (relative to ``root``), sorted."""
    skip = {".venv", "build", "node_modules"}
    found = []
    for init in root.rglob("__init__.py"):
        rel = init.parent.relative_to(root)
        if any(part.startswith(".") or part in skip or part.endswith(".egg-info") for part in rel.parts):
            continue
        found.append(rel)
    return sorted(found)


def _first_paragraph(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    return re.sub(r":[a-z]+:`([^`]+)`", r"`\1`", text).replace("``", "`")  # reST roles and literals → Markdown


def packages_table(root: Path = ROOT) -> str:
    """What each package and top-level directory holds, from the packages' own docstrings."""
    rows = ["| directory | what it holds |\n", "|---|---|\n"]
    entries = {f"{rel.as_posix()}/": _first_paragraph(root / rel / "__init__.py") for rel in package_dirs(root)}
    entries.update({f"{d}/": text for d, text in DIRECTORY_DOCS.items()})
    for directory in sorted(entries):
        text = entries[directory]
        if not text:
            raise ValueError(f"{directory}__init__.py has no docstring saying what the package holds")
        rows.append(f"| `{directory}` | {text.replace('|', chr(92) + '|')} |\n")
    return "".join(rows)


# ------------------------------------------------------------------------------------------------- service benchmark
#: Runs of ``python -m benchmarks.bench_service --save LABEL``, rendered by :func:`service_benchmark_table`.
SERVICE_BENCHMARK = ROOT / "docs" / "service-benchmark.json"

_BENCH_ROWS: list[tuple[str, Callable[[dict], str]]] = [
    ("code (git), date, load average before → after", lambda r: f"`{r['code']}`, {r['date']}, "
     f"{r['load_before']:.1f} → {r['load_after']:.1f} on {r['cores']} cores"),
    ("backlog of {backlog:,} BBC articles, K = {topics}, W = {vocab:,}: articles/s",
     lambda r: f"{r['backlog']['articles_per_s']:,.0f}"),
    ("learner RSS at a quarter / at the end / peak of the second half (MB)",
     lambda r: "{rss_quarter_mb:.0f} / {rss_end_mb:.0f} / {rss_peak_second_half_mb:.0f}".format(**r["backlog"])),
    ("cores used while draining it: learner / broker",
     lambda r: "{learner_cores:.2f} / {broker_cores:.2f}".format(**r["backlog"])),
    ("learner time by stage (decode, tokenize, kernel, publish, commit, snapshot)",
     lambda r: ", ".join(f"{100 * r['backlog'][f'stage_{s}_s'] / _busy(r):.0f} %"
                         for s in ("decode", "tokenize", "kernel", "publish", "commit", "snapshot"))),
    ("snapshot ({backlog_snapshot_mb} MB): written in / holds the batch loop up for",
     lambda r: f"{r['steady_1000']['snapshot_mean_s']:.2f} s / {r['steady_1000']['stall_mean_ms']:.0f} ms"),
    ("consume → publish latency at a steady 1,000 articles/s, snapshots every 5 s: p50 / p95 / p99 (ms)",
     lambda r: _latency(r["steady_1000"])),
    ("the floor under it: `benchmarks/passthrough.py` (same broker, clients and batching, learns nothing) at 1,000/s",
     lambda r: _latency(r["floor_1000"])),
    ("the same at a steady 3,000 articles/s", lambda r: _latency(r["steady_3000"])),
    ("the floor at 3,000/s", lambda r: _latency(r["floor_3000"])),
    ("inference, one replica: articles/s (cores used; articles per core-second)",
     lambda r: _replicas(r, 1)),
    ("inference, two replicas on two partitions: articles/s (cores used; articles per core-second)",
     lambda r: _replicas(r, 2)),
]  # fmt: skip


def _latency(steady: dict) -> str:
    return "{p50_ms:,.0f} / {p95_ms:,.0f} / {p99_ms:,.0f} ({seconds:.0f} s)".format(**steady)


def _replicas(run: dict, count: int) -> str:
    rate, cores = run["replicas"][f"replicas_{count}_articles_per_s"], run["replicas"][f"replicas_{count}_cores"]
    return f"{rate:,.0f} ({cores:.2f}; {rate / cores:,.0f})"


def _busy(run: dict) -> float:
    stages = ("decode", "tokenize", "kernel", "publish", "commit", "snapshot")
    return sum(run["backlog"][f"stage_{s}_s"] for s in stages) or 1.0


def service_benchmark_table(path: Path = SERVICE_BENCHMARK) -> str:
    """The saved runs of ``benchmarks/bench_service.py`` side by side, one column per label (a run that lacks a
    measurement, e.g. an older code's missing metric, shows —)."""
    import json

    runs = json.loads(path.read_text(encoding="utf-8"))
    labels = sorted(runs, key=lambda label: runs[label]["date"])
    first = runs[labels[-1]]
    fill = {**first["args"], "backlog_snapshot_mb": f"{first['backlog']['snapshot_mb']:.0f}"}
    rows = ["| measured by `python -m benchmarks.bench_service` | " + " | ".join(labels) + " |\n"]
    rows.append("|---|" + "---:|" * len(labels) + "\n")
    for name, cell in _BENCH_ROWS:
        values = []
        for label in labels:
            try:
                values.append(cell(runs[label]))
            except (KeyError, TypeError, ValueError):
                values.append("—")
        rows.append(f"| {name.format(**fill)} | " + " | ".join(values) + " |\n")
    return "".join(rows)


# ------------------------------------------------------------------------------------------------- the blocks
def _settings_table() -> str:
    from .settings import settings_table

    return settings_table()


GENERATORS: dict[str, Callable[[], str]] = {
    "settings": _settings_table,
    "metrics": metrics_table,
    "feed-metrics": feed_metrics_table,
    "output-headers": lambda: headers_table("output"),
    "dead-letter-headers": lambda: headers_table("dead letter"),
    "dead-letter-reasons": reasons_table,
    "commands": commands_table,
    "eval-output": eval_output_table,
    "redis-keys": _redis_keys_table,
    "packages": packages_table,
    "service-benchmark": service_benchmark_table,
}

_BLOCK = re.compile(r"(<!-- doctables:([a-z-]+) -->\n)(.*?)(<!-- /doctables:\2 -->)", re.DOTALL)


def render(text: str, cache: dict[str, str] | None = None) -> str:
    r"""``text`` with every generated block replaced by what its generator makes now.

    >>> old = "<!-- doctables:output-headers -->\n| stale |\n<!-- /doctables:output-headers -->"
    >>> render(old).splitlines()[1:3]
    ['| header | meaning |', '|---|---|']
    >>> render(old).splitlines()[3].split(" | ")[0]
    '| `topicstream-topic`'
    """
    cache = {} if cache is None else cache

    def replace(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return m.group(1) + cache[name] + m.group(4)

    return _BLOCK.sub(replace, text)


def stale_blocks(text: str) -> list[str]:
    """Names of the generated blocks in ``text`` whose content differs from what the code says now."""
    fresh = render(text)
    old = {m.group(2): m.group(3) for m in _BLOCK.finditer(text)}
    new = {m.group(2): m.group(3) for m in _BLOCK.finditer(fresh)}
    return [name for name in old if old[name] != new[name]]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = [Path(a) for a in argv if a != "--check"] or [ROOT / "README.md"]
    status = 0
    cache: dict[str, str] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        if not _BLOCK.search(text):
            print(f"{path}: no generated blocks")
            continue
        new = render(text, cache)
        if new == text:
            print(f"{path}: up to date")
        elif check:
            print(f"{path}: stale blocks {', '.join(stale_blocks(text))} (run: python -m service.doctables {path})")
            status = 1
        else:
            path.write_text(new, encoding="utf-8")
            print(f"{path}: updated")
    return status


if __name__ == "__main__":  # python -m service.doctables [--check] README.md docs/architecture.md
    sys.exit(main(sys.argv[1:]))
