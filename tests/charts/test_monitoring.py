"""k8s/monitoring: ServiceMonitors, PodMonitors and Grafana dashboards for Plinth.

The Prometheus Operator's kinds are checked against a schema of the fields Plinth uses (unknown
fields fail, as the operator's CRD prunes them silently); their selectors and ports against what
k8s/base and the renderers really produce. Every metric a dashboard queries is parsed out of its
PromQL (a real parser) and must exist in SGLang 0.5.23's catalogue (read from the shared
reference folder) or in an exporter of Plinth's (the gateway's and the control plane's
registries, collected here).
"""

from __future__ import annotations

import csv
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from prometheus_client import REGISTRY as PROCESS_REGISTRY
from prometheus_client.metrics_core import Metric

import gateway.observability  # noqa: F401 - registers the gateway's families in PROCESS_REGISTRY
from controlplane import metrics as controlplane_metrics
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render import KubeOptions, render_revision
from tests.drivers.reference_specs import REF, load_spec, revision_plan

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
MONITORING = K8S / "monitoring"
# shared/ lies beside the checkout (CI clones main next to a copy of it).
SGLANG_METRICS = ROOT.parent / "shared" / "reference" / "sglang-0.5.23-metrics.tsv"
VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]

# --- the Prometheus Operator's kinds (monitoring.coreos.com/v1), the fields Plinth uses -------

DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
RELABELING = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": LABEL_NAME}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                *("replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep"),
                *("Replace", "Keep", "Drop", "HashMod", "LabelMap", "LabelDrop", "LabelKeep"),
            ]
        },
    },
}
SECRET_KEY_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "key"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "key": {"type": "string", "minLength": 1},
        "optional": {"type": "boolean"},
    },
}
SCRAPE_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string", "minLength": 1},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": DURATION},
        "scrapeTimeout": {"type": "string", "pattern": DURATION},
        "honorLabels": {"type": "boolean"},
        "authorization": {
            "type": "object",
            "additionalProperties": False,
            "required": ["credentials"],
            "properties": {"type": {"type": "string"}, "credentials": SECRET_KEY_SELECTOR},
        },
        "relabelings": {"type": "array", "items": RELABELING},
        "metricRelabelings": {"type": "array", "items": RELABELING},
    },
}
NAMESPACE_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "any": {"type": "boolean"},
        "matchNames": {"type": "array", "items": {"type": "string"}},
    },
}


def _monitor_schema(kind: str, endpoints_field: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": {
                "type": "object",
                "required": ["name", "namespace"],
                "properties": {
                    "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                    "namespace": {"type": "string"},
                    "labels": STRING_MAP,
                },
            },
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", endpoints_field],
                "properties": {
                    "selector": LABEL_SELECTOR,
                    "namespaceSelector": NAMESPACE_SELECTOR,
                    "jobLabel": {"type": "string"},
                    endpoints_field: {"type": "array", "minItems": 1, "items": SCRAPE_ENDPOINT},
                },
            },
        },
    }


SCHEMAS = {
    "ServiceMonitor": _monitor_schema("ServiceMonitor", "endpoints"),
    "PodMonitor": _monitor_schema("PodMonitor", "podMetricsEndpoints"),
}


# --- what `kubectl apply -k k8s/monitoring` sends ---------------------------------------------


def build(folder: Path) -> list[dict[str, Any]]:
    """The kustomization's resources and generated ConfigMaps, with its labels applied."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        objects += [d for d in yaml.safe_load_all((folder / resource).read_text()) if d]
    for generator in kustomization.get("configMapGenerator", []):
        options = generator.get("options", {})
        assert options.get("disableNameSuffixHash"), "one name across releases"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": generator["name"],
                    "namespace": generator["namespace"],
                    "labels": dict(options.get("labels", {})),
                },
                "data": {
                    Path(f).name: (folder / f).read_text(encoding="utf-8")
                    for f in generator["files"]
                },
            }
        )
    labels = {k: v for entry in kustomization.get("labels", []) for k, v in entry["pairs"].items()}
    for obj in objects:
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), **labels}
    return objects


OBJECTS = build(MONITORING)


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in OBJECTS if o["kind"] == kind]


def base_objects() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((K8S / "base").glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert not selector.get("matchExpressions"), "only matchLabels here"
    return selector["matchLabels"].items() <= labels.items()


def test_monitors_have_the_operators_shape() -> None:
    monitors = of_kind("ServiceMonitor") + of_kind("PodMonitor")
    assert {(m["kind"], m["metadata"]["name"]) for m in monitors} == {
        ("ServiceMonitor", "plinth-web"),
        ("ServiceMonitor", "plinth-gateway"),
        ("PodMonitor", "plinth-engines"),
        ("PodMonitor", "plinth-routers"),
    }
    for monitor in monitors:
        jsonschema.validate(monitor, SCHEMAS[monitor["kind"]])


def test_the_schema_refuses_a_field_the_operator_does_not_know() -> None:
    monitor = json.loads(json.dumps(of_kind("ServiceMonitor")[0]))
    monitor["spec"]["endpoints"][0]["bearerToken"] = "inline"  # removed from the CRD long ago
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, SCHEMAS["ServiceMonitor"])


@pytest.mark.parametrize("version", VERSIONS)
def test_built_in_kinds_and_the_example_secret_validate_strictly(version: str) -> None:
    built_in = [o for o in OBJECTS if o["apiVersion"] == "v1"]
    assert {o["kind"] for o in built_in} == {"ConfigMap"}
    for obj in built_in:
        kubernetes_validate.validate(obj, version, strict=True)
    example = yaml.safe_load((MONITORING / "secret.example.yaml").read_text())
    kubernetes_validate.validate(example, version, strict=True)


def test_service_monitors_select_plinths_services_by_port_name() -> None:
    services = [o for o in base_objects() if o["kind"] == "Service"]
    for monitor in of_kind("ServiceMonitor"):
        assert monitor["metadata"]["namespace"] == "plinth-system"
        selected = [
            s for s in services if selects(monitor["spec"]["selector"], s["metadata"]["labels"])
        ]
        assert len(selected) == 1, monitor["metadata"]["name"]
        ports = {p["name"] for p in selected[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports


def test_the_web_scrape_bears_the_token_the_web_pods_read() -> None:
    web = next(m for m in of_kind("ServiceMonitor") if m["metadata"]["name"] == "plinth-web")
    credentials = web["spec"]["endpoints"][0]["authorization"]["credentials"]
    deployment = next(
        o
        for o in base_objects()
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "plinth-web"
    )
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    token = next(e for e in env if e["name"] == "PLINTH_METRICS_TOKEN")
    ref = token["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == (credentials["name"], credentials["key"])
    example = yaml.safe_load((MONITORING / "secret.example.yaml").read_text())
    assert example["metadata"]["name"] == ref["name"] and ref["key"] in example["stringData"]


def _pod_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    templates = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            templates.append(obj["spec"]["template"])
        if obj["kind"] == "LeaderWorkerSet":
            lws = obj["spec"]["leaderWorkerTemplate"]
            templates += [lws["leaderTemplate"], lws["workerTemplate"]]
    return templates


@pytest.mark.parametrize("spec", ["llama-3.1-8b-h100", "deepseek-v3-tp16-2x-h200"])
def test_pod_monitors_find_the_rendered_engines_and_routers_by_port_name(spec: str) -> None:
    rendered = render_revision(REF, revision_plan(load_spec(spec)), KubeOptions())
    templates = _pod_templates(rendered)
    for monitor, role in (("plinth-engines", "engine"), ("plinth-routers", "router")):
        pod_monitor = next(m for m in of_kind("PodMonitor") if m["metadata"]["name"] == monitor)
        assert pod_monitor["metadata"]["namespace"] == "plinth-endpoints"
        selected = [
            t
            for t in templates
            if selects(pod_monitor["spec"]["selector"], t["metadata"]["labels"])
        ]
        assert selected, f"{monitor} selects no pod of {spec}"
        is_router = [t["metadata"]["labels"][L.ROLE] == "router" for t in selected]
        assert all(is_router) if role == "router" else not any(is_router)
        for template in selected:
            ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
            for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]:
                assert endpoint["port"] in ports


def test_only_a_multi_node_replicas_leader_is_scraped() -> None:
    engines = next(m for m in of_kind("PodMonitor") if m["metadata"]["name"] == "plinth-engines")
    keep = engines["spec"]["podMetricsEndpoints"][0]["relabelings"][0]
    label = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", L.LWS_WORKER_INDEX)
    assert keep["sourceLabels"] == [label] and keep["action"] == "keep"
    pattern = re.compile(f"^(?:{keep['regex']})$")  # Prometheus anchors relabel regexes
    assert pattern.match("") and pattern.match("0")  # a single-node pod; the leader
    assert not pattern.match("1")


# --- dashboards ------------------------------------------------------------------------------

# The dashboards' JSON lives in the chart, which renders it into the ConfigMap plinth-dashboards.
DASHBOARD_DIR = ROOT / "charts" / "plinth" / "dashboards"
DASHBOARDS = sorted(DASHBOARD_DIR.glob("*.json"))
# Grafana's macros are not PromQL: each stands for a range, as Grafana substitutes it.
GRAFANA_RANGES = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)
LABEL_VALUES = re.compile(r"^label_values\((?P<expr>.+),\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\)$")


@cache
def sglang_names() -> frozenset[str]:
    """Every sample name SGLang 0.5.23 exposes: the catalogue's names, with the suffixes a
    histogram or summary adds (a counter's name there already ends in ``_total``)."""
    names: set[str] = set()
    with SGLANG_METRICS.open(encoding="utf-8") as handle:
        rows = csv.reader((line for line in handle if not line.startswith("#")), delimiter="\t")
        for row in rows:
            name, kind = row[0], row[1]
            names |= exposed(name, kind.lower())
    assert "sglang:time_to_first_token_seconds_bucket" in names  # the catalogue was read
    return frozenset(names)


def exposed(name: str, kind: str) -> set[str]:
    suffixes = {
        "counter": ("" if name.endswith("_total") else "_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
        "summary": ("", "_count", "_sum", "_created"),
        "info": ("_info",),
    }.get(kind, ("",))
    return {name + suffix for suffix in suffixes}


def families(registry: Any) -> list[Metric]:
    return list(registry.collect())


@pytest.fixture
def plinth_names(db: None) -> frozenset[str]:
    """Every sample name Plinth's exporters expose: the gateway (the process-wide registry it
    serves) and the control plane's ``/metrics``, its domain's scrape-time families included."""
    found: set[str] = set()
    for family in families(PROCESS_REGISTRY) + families(controlplane_metrics.REGISTRY):
        found |= exposed(family.name, family.type)
    for family_name in (
        "plinth_gateway_route_table_age_seconds",
        "plinth_endpoints",
        "plinth_task_queue_depth",
        "plinth_reconcile_duration_seconds_bucket",
        "plinth_http_request_duration_seconds_bucket",
    ):
        assert family_name in found  # every exporter was collected
    return frozenset(found)


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every query a dashboard runs: panel targets and variable queries."""
    found = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            match = LABEL_VALUES.match(text.strip())
            assert match, f"variable {variable['name']}: label_values(<metric>, <label>) expected"
            found.append((f"variable {variable['name']}", match["expr"]))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f"panel {panel['title']!r} queries nothing"
        found += [(f"panel {panel['title']!r}", t["expr"]) for t in panel["targets"]]
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana's macros replaced first)."""
    tree = promql_parser.parse(GRAFANA_RANGES.sub("5m", expr))
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"select metrics by name, not by matcher alone: {expr}"
            names.add(node.name)

    promql_parser.walk(tree, visit)
    return names


def unknown_names(dashboard: dict[str, Any], known: frozenset[str]) -> list[str]:
    return [
        f"{where}: {name}"
        for where, expr in expressions(dashboard)
        for name in sorted(metric_names(expr))
        if name not in known
    ]


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return board


def test_there_is_a_dashboard_for_endpoints_and_one_for_the_platform() -> None:
    uids = [load(path)["uid"] for path in DASHBOARDS]
    assert sorted(uids) == ["plinth-endpoints", "plinth-platform"]
    generated = of_kind("ConfigMap")[0]
    assert generated["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(generated["data"]) == [path.name for path in DASHBOARDS]
    for path in DASHBOARDS:
        assert generated["data"][path.name] == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_metric_a_dashboard_queries_exists(path: Path, plinth_names: frozenset[str]) -> None:
    dashboard = load(path)
    assert unknown_names(dashboard, sglang_names() | plinth_names) == []
    panel_ids = [p["id"] for p in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids))


def test_the_check_catches_a_name_sglang_does_not_have(plinth_names: frozenset[str]) -> None:
    # 0.5.23 has no sglang:time_per_output_token_seconds (SGLANG.md section 3.2).
    dashboard = load(DASHBOARD_DIR / "plinth-endpoints.json")
    panel = next(p for p in dashboard["panels"] if p["type"] != "row")
    panel["targets"][0]["expr"] = (
        "histogram_quantile(0.9, sum by (le) "
        "(rate(sglang:time_per_output_token_seconds_bucket[$__rate_interval])))"
    )
    assert unknown_names(dashboard, sglang_names() | plinth_names) == [
        f"panel {panel['title']!r}: sglang:time_per_output_token_seconds_bucket"
    ]


def test_the_endpoint_dashboard_shows_sglangs_serving_figures() -> None:
    queried = {
        name
        for _, expr in expressions(load(DASHBOARD_DIR / "plinth-endpoints.json"))
        for name in metric_names(expr)
    }
    assert {
        "sglang:time_to_first_token_seconds_bucket",  # TTFT
        "sglang:inter_token_latency_seconds_bucket",  # ITL
        "sglang:generation_tokens_total",  # throughput
        "sglang:cached_tokens_total",  # cache hit rate (with prompt tokens)
        "sglang:prompt_tokens_total",
        "sglang:spec_accept_length",  # speculator acceptance
        "sglang:spec_accept_rate",
    } <= queried


def test_the_platform_dashboard_shows_every_control_plane_family() -> None:
    queried = {
        name
        for _, expr in expressions(load(DASHBOARD_DIR / "plinth-platform.json"))
        for name in metric_names(expr)
    }
    assert {
        "plinth_http_request_duration_seconds_bucket",
        "plinth_reconcile_duration_seconds_bucket",
        "plinth_reconcile_duration_seconds_count",
        "plinth_task_queue_depth",
        "plinth_endpoints",
        "plinth_gateway_route_table_age_seconds",
    } <= queried
