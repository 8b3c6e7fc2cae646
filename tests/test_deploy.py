"""Deployment files: dashboard and alerts use real metric names; compose, k8s, Prometheus, Grafana agree.

No Docker engine or cluster is needed: the files are parsed and cross-checked. When ``promtool`` is installed
(Debian package ``prometheus``), the Prometheus config, the alert rules (with their unit tests in
``deploy/prometheus/alerts_test.yml``) and every dashboard expression are also checked by it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.feeds import FeedMetrics
from service.metrics import ERROR_KINDS, Metrics
from service.settings import Settings
from service.tables import TRUNCATION_LIMITS, TRUNCATION_USED

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "topicstream.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
COMPOSE = ROOT / "docker-compose.yml"

_NAME = re.compile(r"\btopicstream_[A-Za-z0-9_]+")
_SELECTOR = re.compile(r"\b(topicstream_[A-Za-z0-9_]+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
# Labels Prometheus adds at scrape time.
_TARGET_LABELS = {"job", "instance"}
# Series that need not be on the dashboard.
_NOT_ON_DASHBOARD = {"topicstream_snapshot_timestamp_seconds", "topicstream_model_info"}


def _exposed() -> dict[str, set[str]]:
    """Every series name a :class:`Metrics` (or ``topicstream feeds``'s :class:`FeedMetrics`) can expose (with
    suffixes) -> its label names."""
    m = Metrics(role="learner")
    m.describe_model("scvb0", 10, 100)
    feeds = FeedMetrics()
    for wrapper in [*vars(m).values(), *vars(feeds).values()]:
        labelnames = getattr(wrapper, "_labelnames", ())
        if labelnames and hasattr(wrapper, "labels"):
            child = wrapper.labels(**{name: "x" for name in labelnames})
            if hasattr(child, "observe"):
                child.observe(0.01)
            elif hasattr(child, "inc"):
                child.inc()
    names: dict[str, set[str]] = {}
    for family in [*m.registry.collect(), *feeds.registry.collect()]:
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(k for k in sample.labels if k != "le")
            if sample.name.endswith("_bucket"):
                names[sample.name].add("le")
    return names


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _walk(obj: Any) -> list[Any]:
    out = [obj]
    if isinstance(obj, dict):
        for v in obj.values():
            out += _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _walk(v)
    return out


def _dashboard_exprs() -> list[str]:
    exprs = []
    for node in _walk(_dashboard()):
        if isinstance(node, dict):
            for key in ("expr", "definition"):
                if isinstance(node.get(key), str):
                    exprs.append(node[key])
            if isinstance(node.get("query"), dict) and isinstance(node["query"].get("query"), str):
                exprs.append(node["query"]["query"])
    return exprs


def _alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def _check_promql_names(exprs: list[str], exposed: dict[str, set[str]], where: str) -> set[str]:
    used: set[str] = set()
    for expr in exprs:
        for name in _NAME.findall(expr):
            assert name in exposed, f"{where}: {name!r} is not a series of Metrics or FeedMetrics ({expr})"
            used.add(name)
        for name, matchers in _SELECTOR.findall(expr):
            for label in _MATCHER.findall(matchers):
                assert label in exposed.get(name, set()) | _TARGET_LABELS, f"{where}: {name} has no label {label!r}"
    return used


# ------------------------------------------------------------------------------------------------- dashboard
def test_dashboard_uses_only_real_metric_names() -> None:
    exposed = _exposed()
    exprs = _dashboard_exprs()
    assert len(exprs) > 30
    used = _check_promql_names(exprs, exposed, "dashboard")
    # ... and shows every series (by base name).
    bases = {re.sub(r"_(total|bucket|count|sum|created|info)$", "", n) for n in exposed}
    used_bases = {re.sub(r"_(total|bucket|count|sum|created|info)$", "", n) for n in used}
    missing = bases - used_bases - {re.sub(r"_info$", "", n) for n in _NOT_ON_DASHBOARD} - _NOT_ON_DASHBOARD
    assert not missing, f"series not on the dashboard: {sorted(missing)}"


def test_dashboard_structure() -> None:
    d = _dashboard()
    assert d["uid"] == "topicstream"
    panels = d["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    titles = " | ".join(p["title"].lower() for p in panels)
    needed_panels = [
        *("articles per second", "dead-lettered by reason", "lag by partition", "end-to-end latency"),
        *("batch duration", "snapshot age", "snapshot version", "snapshot size", "snapshot duration"),
        *("vocabulary", "out-of-vocabulary", "prevalence", "drift", "topics used", "kernel", "errors"),
    ]
    for needed in needed_panels:
        assert needed in titles, f"no panel about {needed!r}"
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            assert t["expr"].strip()
    latency = [t["expr"] for p in panels if p["title"] == "End-to-end latency" for t in p["targets"]]
    assert {q for e in latency for q in re.findall(r"histogram_quantile\((0\.\d+)", e)} == {
        "0.5",
        "0.95",
        "0.99",
    }
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    assert "job" in variables


def _panel(title: str, kind: str = "timeseries") -> dict[str, Any]:
    (panel,) = [p for p in _dashboard()["panels"] if p["title"] == title and p["type"] == kind]
    return panel


def test_dashboard_annotates_topic_events() -> None:
    """Births, merges, splits and retirements are annotations (titled with the kind) and bars per interval."""
    (ann,) = [a for a in _dashboard()["annotations"]["list"] if "topicstream_topic_events_total" in a.get("expr", "")]
    assert ann["expr"] == 'increase(topicstream_topic_events_total{job="learner"}[1m]) > 0'
    assert ann["titleFormat"] == "{{kind}}" and ann["datasource"]["uid"] == "${datasource}"
    events = _panel("Topic events")
    assert events["fieldConfig"]["defaults"]["custom"]["drawStyle"] == "bars"
    # Each bar is the count's difference over its own interval: increase() over back-to-back windows misses the
    # events between one window's last scrape and the next one's first (about a quarter at 15 s scrapes).
    assert all("offset $__interval" in t["expr"] and "increase" not in t["expr"] for t in events["targets"])


def test_dashboard_leaves_standby_learners_out() -> None:
    standby = "unless on (instance) topicstream_learner_standby == 1"
    (age,) = _panel("Snapshot age", "stat")["targets"]
    assert standby in age["expr"]
    (share,) = _panel("Time spent per stage (share of wall clock)")["targets"]
    assert share["expr"].endswith(f'(up{{job=~"$job"}} == 1 {standby})')
    assert all('{job="learner"}' in t["expr"] for t in _panel("Learner lease")["targets"])


def test_dashboard_rates_have_per_second_units() -> None:
    """A panel of nothing but summed rates shows a count per second (not "short")."""
    rate = re.compile(r"\w+(?: by \([\w, ]+\))? ?\(rate\([^()]*\)\)(?: or vector\(0\))?")
    checked = 0
    for p in _dashboard()["panels"]:
        if p["type"] != "row" and all(rate.fullmatch(t["expr"]) for t in p["targets"]):
            unit = p["fieldConfig"]["defaults"]["unit"]
            assert unit in {"reqps", "cps"}, f"{p['title']}: {unit}"
            checked += 1
    assert checked >= 8


# ---------------------------------------------------------------------------------------------- prometheus
def test_alerts_use_real_metric_names_and_cover_the_brief() -> None:
    rules = _alert_rules()
    _check_promql_names([r["expr"] for r in rules], _exposed(), "alerts.yml")
    names = {r["alert"] for r in rules}
    needed_alerts = [
        *("TopicstreamLearnerDown", "TopicstreamConsumerLagGrowing", "TopicstreamNoOutput"),
        *("TopicstreamSnapshotStale", "TopicstreamDeadLetterSpike", "TopicstreamModelDriftSpike"),
    ]
    for needed in needed_alerts:
        assert needed in names
    for r in rules:
        assert r["labels"]["severity"] in {"critical", "warning", "info"}
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    lag = next(r for r in rules if r["alert"] == "TopicstreamConsumerLagGrowing")
    assert lag["for"] == "10m"
    assert 'if eq $labels.job "learner"' in lag["annotations"]["description"]  # more replicas do not help it
    truncation = next(r for r in rules if r["alert"] == "TopicstreamTruncationLimitsTopics")
    assert f"> {TRUNCATION_LIMITS} * topicstream_topic_slots" in truncation["expr"]  # the table's caption agrees
    assert (
        f'topicstream_topics_used{{job="learner"}} >= {TRUNCATION_USED} * topicstream_topic_slots' in truncation["expr"]
    )


def _kinds(expr: str, op: str) -> set[str]:
    found = re.search(rf'topicstream_errors_total{{kind{op}"([^"]+)"}}', expr)
    assert found, expr
    return set(found[1].split("|"))


def test_error_alerts_cover_every_kind() -> None:
    """The kinds that happen once per snapshot or event never reach a rate: TopicstreamErrorEvents takes those
    (each explained in its description), TopicstreamClientErrors every other kind."""
    rules = {r["alert"]: r for r in _alert_rules()}
    steady, events = rules["TopicstreamClientErrors"], rules["TopicstreamErrorEvents"]
    once = _kinds(events["expr"], "=~")
    assert once == {
        "fenced",
        "summary",
        "lineage",
        "partitions_lost",
        "dead_letter_refused",
        "input_recreated",
        "tokenizer",
        "partitions_elsewhere",
        "output_slimmed",
        "group_stalled",
    }
    assert once < set(ERROR_KINDS) and _kinds(steady["expr"], "!~") == once
    for kind in once:
        assert f'eq $labels.kind "{kind}"' in events["annotations"]["description"], kind


def test_readme_lists_every_alert() -> None:
    lines = (DEPLOY / "README.md").read_text().splitlines()
    (row,) = [line for line in lines if line.startswith("| `prometheus/alerts.yml`")]
    assert set(re.findall(r"`(Topicstream\w+)`", row)) == {r["alert"] for r in _alert_rules()}


def test_prometheus_scrapes_learner_replicas_and_feeds() -> None:
    cfg = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    for job in ("learner", "replica", "feeds"):
        sd = jobs[job]["dns_sd_configs"][0]
        assert sd["names"] == [job] and sd["port"] == 9100
    assert [Path(f).name for f in cfg["rule_files"]] == ["alerts.yml"]


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return path


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_checks_config_rules_and_alert_unit_tests(tmp_path: Path) -> None:
    promtool = _promtool()
    _run([promtool, "check", "rules", str(ALERTS)], ROOT)
    _run([promtool, "test", "rules", "alerts_test.yml"], ALERTS.parent)
    # The config names the rule file at its path in the container; check a copy that points at the file here.
    cfg = PROMETHEUS.read_text().replace("/etc/prometheus/alerts.yml", str(ALERTS))
    (tmp_path / "prometheus.yml").write_text(cfg)
    _run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], tmp_path)


def _normal_operation(replicas: int, minutes: int = 90) -> list[dict[str, str]]:
    """An hour and a half of healthy traffic: 600 articles a minute, 0.2 % dead-lettered, a steady lag of 50,
    snapshots written and loaded every minute, steady drift, rare vocabulary recycling, no errors.

    Who publishes (deploy/README.md): the ``replicas`` when there are any, the learner otherwise.
    """
    n = minutes
    procs = [("learner", "learner:9100")] + [("replica", f"replica-{i}:9100") for i in range(replicas)]
    series: list[dict[str, str]] = []

    def add(name: str, job: str, instance: str, values: str, **labels: str) -> None:
        labels = {"job": job, "instance": instance, **labels}
        selector = ", ".join(f'{k}="{v}"' for k, v in labels.items())
        series.append({"series": f"{name}{{{selector}}}", "values": values})

    for job, instance in procs:
        share = 600 if job == "learner" else 600 // replicas  # the replicas split the partitions
        publishes = job == "replica" or replicas == 0
        add("up", job, instance, f"1x{n}")
        add("topicstream_articles_consumed_total", job, instance, f"0+{share}x{n}")
        add("topicstream_articles_published_total", job, instance, f"0+{share}x{n}" if publishes else f"0x{n}")
        add("topicstream_articles_dead_lettered_total", job, instance, f"0+1x{n}", reason="not_json")
        add("topicstream_consumer_lag_messages", job, instance, f"50x{n}", topic="articles", partition="0")
        for le, per_minute in (("0.5", share - 6), ("5.0", share), ("+Inf", share)):
            add("topicstream_end_to_end_latency_seconds_bucket", job, instance, f"0+{per_minute}x{n}", le=le)
        add("topicstream_snapshot_timestamp_seconds", job, instance, f"0+60x{n}")
        add("topicstream_loop_heartbeat_timestamp_seconds", job, instance, f"0+60x{n}")
        add("topicstream_snapshot_failures_total", job, instance, f"0x{n}")
        for kind in ERROR_KINDS:
            add("topicstream_errors_total", job, instance, f"0x{n}", kind=kind)
    add("topicstream_model_drift", "learner", "learner:9100", f"0.02x{n}")
    add("topicstream_learner_standby", "learner", "learner:9100", f"0x{n}")
    add("topicstream_topics_holding_mass", "learner", "learner:9100", f"40x{n}")
    add("topicstream_topics_used", "learner", "learner:9100", f"15x{n}")
    add("topicstream_topic_slots", "learner", "learner:9100", f"100x{n}")
    add("topicstream_model_info", "learner", "learner:9100", f"1x{n}", algorithm="ohdp", role="learner", topics="100")
    add("topicstream_tokens_total", "learner", "learner:9100", f"0+120000x{n}")
    add("topicstream_vocabulary_recycled_total", "learner", "learner:9100", f"0+20x{n}")
    # The feed poller: one feed fetched every 5 minutes (a 304 between two 200s), one that fails now and then.
    add("up", "feeds", "feeds:9100", f"1x{n}")
    add("topicstream_feed_interval_seconds", "feeds", "feeds:9100", f"300x{n}")
    for feed, errors in (("https://a/rss", f"0x{n}"), ("https://b/rss", f"0x20 1x{n - 20}")):
        add("topicstream_feed_requests_total", "feeds", "feeds:9100", errors, feed=feed, result="error")
        add("topicstream_feed_requests_total", "feeds", "feeds:9100", f"0+0.2x{n}", feed=feed, result="200")
        add("topicstream_feed_last_success_timestamp_seconds", "feeds", "feeds:9100", f"0+60x{n}", feed=feed)
        add("topicstream_feed_errors_total", "feeds", "feeds:9100", f"0x{n}", feed=feed, kind="not_sent")
    return series


@pytest.mark.parametrize("replicas", [0, 1, 3], ids=["learner-publishes", "one-replica", "three-replicas"])
def test_no_alert_fires_in_normal_operation(tmp_path: Path, replicas: int) -> None:
    """Both topologies: the learner alone (publishing), and the learner beside replicas (they publish)."""
    series = _normal_operation(replicas)
    exposed = _exposed()
    for s in series:
        name = s["series"].split("{")[0]
        assert name == "up" or name in exposed, name
    alerts = sorted(r["alert"] for r in _alert_rules())
    checks = [{"eval_time": f"{t}m", "alertname": a, "exp_alerts": []} for t in (20, 45, 89) for a in alerts]
    tests = {"tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]}
    (tmp_path / "normal_test.yml").write_text(yaml.safe_dump({"rule_files": [str(ALERTS)], **tests}))
    _run([_promtool(), "test", "rules", "normal_test.yml"], tmp_path)


def test_promtool_parses_every_dashboard_expression(tmp_path: Path) -> None:
    promtool = _promtool()
    rules = []
    for i, expr in enumerate(_dashboard_exprs()):
        if expr.startswith("label_values("):
            continue  # a Grafana function, not PromQL
        promql = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$job", ".*")
        rules.append({"record": f"dashboard:expr_{i}", "expr": promql})
    (tmp_path / "dashboard_rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    _run([promtool, "check", "rules", "dashboard_rules.yml"], tmp_path)


# ------------------------------------------------------------------------------------------------- grafana
def test_grafana_provisioning_matches_compose() -> None:
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"]
    assert ds[0]["uid"] == "prometheus" and ds[0]["type"] == "prometheus"
    assert ds[0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/topicstream.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"] if v.startswith("./")}
    assert mounts[path] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


# ------------------------------------------------------------------------------------------------- compose
def _settings_vars() -> set[str]:
    return {"TOPICSTREAM_" + name.upper() for name in Settings.model_fields}


def test_compose_defines_the_services_and_start_order() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    for name in ("kafka", "kafka-init", "redis", "learner", "replica", "producer", "prometheus", "grafana"):
        assert name in services, name
    for name in ("kafka", "redis", "learner", "replica", "feeds", "prometheus", "grafana"):
        assert "test" in services[name]["healthcheck"], f"{name} has a healthcheck"
    # The feed poller runs when asked for (--profile feeds), with the shell's feed list; Prometheus's job finds it.
    assert services["feeds"]["profiles"] == ["feeds"] and services["feeds"]["command"] == ["feeds"]
    assert services["feeds"]["environment"]["TOPICSTREAM_FEEDS"] == "${TOPICSTREAM_FEEDS:-}"
    assert services["learner"]["depends_on"] == {
        "kafka-init": {"condition": "service_completed_successfully"},
        "redis": {"condition": "service_healthy"},
    }
    assert services["kafka-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["replica"]["depends_on"]["learner"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    # --scale replica=N: no fixed name; the HTTP API's host ports are a range with room for one replica per
    # input partition (6), on this host only.
    assert "container_name" not in services["replica"]
    assert services["replica"]["ports"] == ["127.0.0.1:8080-8085:8080"]
    assert services["replica"]["environment"]["TOPICSTREAM_API_PORT"] == "8080"
    assert services["learner"]["command"] == ["run"] and services["replica"]["command"] == ["replica"]
    assert services["producer"]["entrypoint"] == ["topicstream", "produce"]
    # Bind mounts exist in the repository.
    for svc in services.values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./deploy"):
                assert (ROOT / src).exists(), src


def test_compose_kafka_is_single_node_kraft_with_the_topics() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    env = services["kafka"]["environment"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:9093"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    listeners = dict(p.split(":", 1) for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) >= {env["KAFKA_CONTROLLER_LISTENER_NAMES"], env["KAFKA_INTER_BROKER_LISTENER_NAME"]}
    bootstrap = services["learner"]["environment"]["TOPICSTREAM_KAFKA_BOOTSTRAP"]
    assert f"//{bootstrap}" in env["KAFKA_ADVERTISED_LISTENERS"]
    script = " ".join(services["kafka-init"]["command"])
    fields = Settings.model_fields
    default = {name: fields[name].default for name in ("input_topic", "output_topic", "dlq_topic")}
    assert re.search(rf"--topic {re.escape(default['input_topic'])} --partitions 6\b", script)
    for topic in (default["output_topic"], default["dlq_topic"], f"{default['output_topic']}.lineage"):
        assert f"--topic {topic} " in script


def test_compose_and_k8s_configure_only_known_settings() -> None:
    known = _settings_vars()
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in ("learner", "replica", "producer", "feeds"):
        env = services[name]["environment"]
        unknown = {k for k in env if k.startswith("TOPICSTREAM_")} - known
        assert not unknown, f"{name}: {unknown}"
        assert env["TOPICSTREAM_METRICS_PORT"] == "9100"
    # Alerts and refusals tell operators to change the prefix: compose passes it (and the kernel's parameters)
    # through, with the settings' default.
    for name in ("learner", "replica"):
        env = services[name]["environment"]
        prefix = Settings.model_fields["redis_prefix"].default
        assert env["TOPICSTREAM_REDIS_PREFIX"] == f"${{TOPICSTREAM_REDIS_PREFIX:-{prefix}}}"
        assert "TOPICSTREAM_KERNEL_PARAMS" in env and env["TOPICSTREAM_KERNEL_PARAMS"] is None  # the shell's, or unset
    cm = yaml.safe_load((DEPLOY / "k8s/configmap.yaml").read_text())
    assert set(cm["data"]) <= known, set(cm["data"]) - known
    # The values are valid settings.
    values = {k.removeprefix("TOPICSTREAM_").lower(): v for k, v in cm["data"].items()}
    Settings(**values)


# ----------------------------------------------------------------------------------------------------- k8s
def _k8s() -> dict[tuple[str, str], dict[str, Any]]:
    docs = {}
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                assert doc["apiVersion"] and doc["metadata"]["name"], f
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def test_k8s_manifests() -> None:
    docs = _k8s()
    assert ("Namespace", "topicstream") in docs
    assert ("ConfigMap", "topicstream-config") in docs
    learner = docs[("Deployment", "topicstream-learner")]
    assert learner["spec"]["replicas"] == 1
    assert learner["spec"]["strategy"]["type"] == "Recreate"
    replica = docs[("Deployment", "topicstream-replica")]
    hpa = docs[("HorizontalPodAutoscaler", "topicstream-replica")]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "topicstream-replica"
    for dep, arg in ((learner, "run"), (replica, "replica")):
        pod = dep["spec"]["template"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (c,) = pod["spec"]["containers"]
        assert c["args"] == [arg]
        assert c["ports"][0]["containerPort"] == 9100
        # A replica is ready once it serves a snapshot: its HTTP API's GET /v1/model answers 503 until then.
        ready = ("/metrics", "metrics") if arg == "run" else ("/v1/model", "api")
        probes = {
            "livenessProbe": ("/healthz", "metrics"),
            "readinessProbe": ready,
            "startupProbe": ("/metrics", "metrics"),
        }
        for probe, (path, port) in probes.items():
            assert (c[probe]["httpGet"]["path"], c[probe]["httpGet"]["port"]) == (path, port)
        if arg == "replica":
            env = {e["name"]: e.get("value") for e in c["env"]}
            api = next(p["containerPort"] for p in c["ports"] if p["name"] == "api")
            assert env["TOPICSTREAM_API_PORT"] == str(api)
            service = docs[("Service", "topicstream-api")]["spec"]
            assert service["ports"][0]["targetPort"] == "api"
            assert service["selector"].items() <= pod["metadata"]["labels"].items()
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
        assert c["envFrom"][0]["configMapRef"]["name"] == "topicstream-config"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    for kind, name in docs:
        meta = docs[(kind, name)]["metadata"]
        if kind == "Deployment":  # Prometheus discovers the pods (deploy/README.md) ...
            annotations = docs[(kind, name)]["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9100"
        if kind == "Service":  # ... and not the Services too: every process would be scraped twice
            assert not any(k.startswith("prometheus.io/") for k in meta.get("annotations", {}))
    kustomization = yaml.safe_load((DEPLOY / "k8s/kustomization.yaml").read_text())
    for res in kustomization["resources"]:
        assert (DEPLOY / "k8s" / res).exists()


def test_dockerfile_is_non_root_with_topicstream_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "python:3.11-slim" in text
    assert 'ENTRYPOINT ["topicstream"]' in text
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}


def test_the_image_gets_every_package_and_nothing_else() -> None:
    """Every package pyproject.toml installs is copied into the build and imported there; the build context
    (.dockerignore: everything out, then these back in) holds nothing else."""
    found = re.search(
        r"\[tool\.setuptools\.packages\.find\]\s*include = \[([^]]*)\]", (ROOT / "pyproject.toml").read_text()
    )
    assert found
    packages = {p.strip().strip('"').rstrip("*") for p in found[1].split(",")}
    text = (ROOT / "Dockerfile").read_text()
    assert set(re.findall(r"^COPY (\w+) \./\1$", text, flags=re.M)) == packages
    imported = re.search(r'&& python -c "import ([^"]+)"', text)
    assert imported and {m.split(".")[0] for m in imported[1].split(", ")} == packages
    lines = [x for x in (ROOT / ".dockerignore").read_text().splitlines() if x and not x.startswith("#")]
    assert lines[0] == "*"
    context = packages | {"pyproject.toml", "README.md", "LICENSE"}
    assert {x[1:].rstrip("/") for x in lines if x.startswith("!")} == context
    assert "COPY pyproject.toml README.md LICENSE ./" in text  # pyproject's license-files: the build needs it


def test_the_image_can_run_every_command() -> None:
    """The image installed the dependencies alone, so ``topicstream report`` asked for ``pip install
    'topicstream[report]'``, which user 10001 cannot do in the image's venv. The build's own line is run here on
    this pyproject.toml (the image's Python is 3.11, which has tomllib)."""
    tomllib = pytest.importorskip("tomllib", reason="the Dockerfile's line needs Python 3.11's tomllib")
    text = (ROOT / "Dockerfile").read_text()
    build = text[text.index("FROM ${PYTHON_IMAGE} AS build") : text.index("# ---- runtime")]
    script = re.search(r'RUN python -c "(.*?)" \\\n\s*> /tmp/requirements.txt', build, flags=re.S)
    assert script, build
    code = script[1].replace("\\\n", "")  # the shell's line continuations
    printed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert printed.stdout.splitlines() == project["dependencies"] + project["optional-dependencies"]["report"]


def test_one_rule_for_who_publishes() -> None:
    """The replicas publish when they run; the learner does not (deploy/README.md, "Who publishes")."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert services["replica"]["command"] == ["replica"] and "profiles" not in services["replica"]  # it runs
    publish = services["learner"]["environment"]["TOPICSTREAM_LEARNER_PUBLISH"]
    assert re.fullmatch(r"\$\{TOPICSTREAM_LEARNER_PUBLISH:-false\}", publish), publish
    assert "TOPICSTREAM_LEARNER_PUBLISH" not in services["replica"]["environment"]
    docs = _k8s()
    assert "replicas" not in docs[("Deployment", "topicstream-replica")]["spec"]  # the autoscaler owns the count
    assert docs[("HorizontalPodAutoscaler", "topicstream-replica")]["spec"]["minReplicas"] >= 1
    cm = docs[("ConfigMap", "topicstream-config")]["data"]
    assert cm["TOPICSTREAM_LEARNER_PUBLISH"] == "false"
    (learner,) = docs[("Deployment", "topicstream-learner")]["spec"]["template"]["spec"]["containers"]
    assert "TOPICSTREAM_LEARNER_PUBLISH" not in {e["name"] for e in learner.get("env", [])}  # nothing overrides it
    assert Settings(learner_publish=cm["TOPICSTREAM_LEARNER_PUBLISH"]).learner_publish is False
