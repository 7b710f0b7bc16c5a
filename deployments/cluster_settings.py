"""What an operator sets once per Kubernetes cluster (``ClusterSettings``). What a cluster's
settings and observed GPU inventory say about a spec before it is deployed there is
``deployments.clusters.checks``'.

Stored as JSON on ``Cluster.operator_settings``, written only by ``deployments.clusters.services``
(admins), checked here when saved: every name is checked as Kubernetes would check it, so a saved
setting never makes the API server refuse a manifest later. The pure renderers
(``deployments.drivers.kube.render``) read it; nothing here knows the ORM or the client.

The GPU map says which nodes hold each catalogue GPU: one node label and the values that mean
that GPU. Defaults are the values NVIDIA GPU feature discovery sets on ``nvidia.com/gpu.product``
(``runtime/catalog/gpus.yaml``); an operator's entries replace the default of their GPU only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from deployments.aiperf import AIPERF_VERSION, PYTHON_IMAGE
from runtime.catalog import GPU_PRODUCT_LABEL, SUPPORTED_SGLANG_VERSIONS, get_gpu, list_gpus

# Kubernetes' own rules (apimachinery validation): a DNS-1123 label and subdomain, and a
# qualified name (an optional subdomain prefix, "/", then up to 63 name characters).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# An image reference: registry/path:tag or @digest, no whitespace and nothing a shell would read.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
# Label and annotation keys Plinth writes itself: selectors and ownership depend on them.
RESERVED_PREFIXES = ("plinth.dev/", "app.kubernetes.io/", "leaderworkerset.sigs.k8s.io/")
# What a tenant's spec may set that the operator otherwise decides (the spec field each names).
TENANT_OVERRIDES = {
    "engine_image": "runtime.image",
    "router_image": "runtime.router_image",
    "env": "runtime.env",
    "extra_flags": "runtime.extra_flags",
}
TenantOverride = Literal["engine_image", "router_image", "env", "extra_flags"]


def _fail(code: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(code, message)


def qualified_name(value: str) -> str:
    """A label or annotation key, or a taint key: ``[prefix/]name`` as Kubernetes accepts it."""
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise _fail("invalid_key", f"{value!r}: the prefix before '/' must be a DNS subdomain")
    if not _NAME_PART.fullmatch(name):
        raise _fail(
            "invalid_key",
            f"{value!r}: up to 63 letters, digits, '-', '_' and '.', starting and ending with "
            "a letter or digit",
        )
    return value


def label_value(value: str) -> str:
    if not _LABEL_VALUE.fullmatch(value):
        raise _fail(
            "invalid_label_value",
            f"{value!r}: up to 63 letters, digits, '-', '_' and '.', starting and ending with a "
            "letter or digit",
        )
    return value


def dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise _fail("invalid_name", f"{value!r} is not a Kubernetes object name (DNS subdomain)")
    return value


def dns_label(value: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise _fail("invalid_name", f"{value!r} is not a DNS label (up to 63 a-z, 0-9 and '-')")
    return value


def image_ref(value: str) -> str:
    if not _IMAGE.fullmatch(value):
        raise _fail("invalid_image", f"{value!r} is not an image reference")
    return value


def _own_key(value: str) -> str:
    qualified_name(value)
    if value.startswith(RESERVED_PREFIXES):
        raise _fail("reserved_key", f"{value!r}: Plinth sets the keys under {value.split('/')[0]}")
    return value


Key = Annotated[str, Field(max_length=316)]
Name = Annotated[str, StringConstraints(max_length=253)]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuSelector(_Strict):
    """The nodes that hold one GPU type: ``label`` set to one of ``values``."""

    label: Key = GPU_PRODUCT_LABEL
    values: tuple[Annotated[str, StringConstraints(max_length=63)], ...] = Field(min_length=1)

    @field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        return qualified_name(value)

    @field_validator("values")
    @classmethod
    def _values(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not value:
                raise _fail("invalid_label_value", "a GPU's label value cannot be empty")
            label_value(value)
        return values

    def node_selector_term(self) -> dict[str, Any]:
        """The required node affinity term that pins a pod to these nodes."""
        expression = {"key": self.label, "operator": "In", "values": list(self.values)}
        return {"matchExpressions": [expression]}

    def matches(self, labels: Mapping[str, str]) -> bool:
        return labels.get(self.label) in self.values


class Toleration(_Strict):
    """A Kubernetes toleration (``operator`` Exists takes no ``value``)."""

    key: Key | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: Annotated[str, StringConstraints(max_length=63)] | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _coherent(self) -> Toleration:
        if self.key is not None:
            qualified_name(self.key)
        if self.value is not None:
            label_value(self.value)
        if self.operator == "Exists" and self.value:
            raise _fail("invalid_toleration", "a toleration with operator Exists has no value")
        if self.key is None and self.operator != "Exists":
            raise _fail("invalid_toleration", "a toleration without a key needs operator Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise _fail("invalid_toleration", "toleration_seconds applies to NoExecute only")
        return self

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key is not None:
            out["key"] = self.key
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        """Whether this toleration lets a pod onto a node with ``taint`` (the scheduler's rule)."""
        if self.effect is not None and self.effect != taint.get("effect"):
            return False
        if self.key is None:
            return True
        if self.key != taint.get("key"):
            return False
        return self.operator == "Exists" or (self.value or "") == (taint.get("value") or "")


class HostPathCache(_Strict):
    """Each node caches weights on its own disk: downloaded once per node."""

    type: Literal["host_path"] = "host_path"
    path: Annotated[str, StringConstraints(max_length=4096)] = "/var/lib/plinth/model-cache"

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        parts = value.split("/")
        if not value.startswith("/") or value == "/" or ".." in parts or "\x00" in value:
            raise _fail("invalid_path", "an absolute directory other than /, without '..'")
        return value


class ClaimCache(_Strict):
    """An existing PersistentVolumeClaim in the namespace (ReadWriteMany so every node shares
    it): weights downloaded once per claim."""

    type: Literal["claim"] = "claim"
    claim_name: Name

    @field_validator("claim_name")
    @classmethod
    def _name(cls, value: str) -> str:
        return dns_subdomain(value)


class SharedClaimCache(_Strict):
    """A ReadWriteMany claim Plinth creates per endpoint (``<slug>-model-cache``), shared by its
    replicas: weights downloaded once per endpoint, removed with it."""

    type: Literal["rwx"] = "rwx"
    storage_class: Name | None = None
    size_gib: int = Field(default=500, ge=1, le=1_000_000)

    @field_validator("storage_class")
    @classmethod
    def _class(cls, value: str | None) -> str | None:
        return None if value is None else dns_subdomain(value)


class NoCache(_Strict):
    """No cache shared between pods: each engine downloads the weights itself when it starts,
    into its own emptyDir (for clusters whose policy forbids hostPath and that have no
    ReadWriteMany storage). The only choice where engines get the model hub token."""

    type: Literal["none"] = "none"


ModelCache = Annotated[
    HostPathCache | ClaimCache | SharedClaimCache | NoCache, Field(discriminator="type")
]


ImageRef = Annotated[str, StringConstraints(max_length=255)]


class AiperfImage(_Strict):
    """AIPerf from an image with ``aiperf`` on its PATH: benchmark Jobs install nothing.

    The Job then reaches no package index, which is what an air-gapped cluster needs: mirror
    Plinth's image (``docker/aiperf/Dockerfile``) into its registry and name the mirror here.
    """

    type: Literal["image"] = "image"
    image: ImageRef | None = Field(
        default=None,
        description="an image with aiperf " + AIPERF_VERSION + " on its PATH; null: the "
        "platform's (PLINTH_BENCHMARK_IMAGE, else Plinth's published AIPerf image)",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else image_ref(value)


class AiperfFromIndex(_Strict):
    """AIPerf installed with pip from ``index_url`` by every benchmark Job (about 1.2 GB).

    Into a plain Python image, before the run: only for a cluster that reaches that index, the
    public one or a mirror of it inside the cluster. Never chosen unless an operator names it.
    """

    type: Literal["pip"] = "pip"
    index_url: Annotated[str, StringConstraints(max_length=2048)] = Field(
        description="a package index (PEP 503 simple API) the pods reach, e.g. "
        "https://pypi.org/simple or an in-cluster mirror"
    )
    image: ImageRef = Field(default=PYTHON_IMAGE, description="a Python 3.10+ image with pip")

    @field_validator("index_url")
    @classmethod
    def _index_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or value != value.strip():
            raise _fail("invalid_url", f"{value!r} is not an http(s) URL of a package index")
        if parts.username or parts.password:
            # It would be in the Job's command line, which anyone who reads Jobs sees.
            raise _fail("credentials_in_url", "the index URL cannot carry credentials")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return image_ref(value)


BenchmarkAiperf = Annotated[AiperfImage | AiperfFromIndex, Field(discriminator="type")]


def default_gpu_map() -> dict[str, GpuSelector]:
    """Every catalogue GPU with the values GPU feature discovery gives its nodes."""
    return {gpu.id: GpuSelector(values=gpu.gpu_products) for gpu in list_gpus()}


class ClusterSettings(_Strict):
    """Per-cluster choices an operator makes once, rendered into every endpoint's manifests."""

    gpu_map: dict[str, GpuSelector] = Field(
        default_factory=default_gpu_map,
        description="catalogue GPU id -> the node label and values of nodes with that GPU",
    )
    gpu_resource: Key = Field(
        default="nvidia.com/gpu", description="the device plugin's resource name"
    )
    gpu_tolerations: tuple[Toleration, ...] = Field(
        default=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
        description="tolerations of engine pods for GPU nodes' taints",
    )
    topology_label: Key | None = Field(
        default=None,
        description="node label of a topology domain (a rack, an NVLink clique): the nodes of "
        "one multi-node replica prefer one domain",
    )
    node_selector: dict[Key, Annotated[str, StringConstraints(max_length=63)]] = Field(
        default_factory=dict, description="extra node labels every pod needs"
    )
    tolerations: tuple[Toleration, ...] = Field(default=(), description="tolerations of every pod")
    priority_class_name: Name | None = None
    runtime_class_name: Name | None = Field(default=None, description="engine pods' RuntimeClass")
    service_account_name: Name | None = Field(
        default=None, description="engine pods' ServiceAccount"
    )
    image_pull_secrets: tuple[Name, ...] = Field(default=(), max_length=16)
    engine_images: dict[str, Annotated[str, StringConstraints(max_length=255)]] = Field(
        default_factory=dict, description="SGLang version -> the engine image to run for it"
    )
    router_image: Annotated[str, StringConstraints(max_length=255)] | None = None
    model_cache: ModelCache = Field(default_factory=HostPathCache)
    benchmark_aiperf: BenchmarkAiperf = Field(
        default_factory=AiperfImage,
        description="where benchmark Jobs get AIPerf: an image with it on PATH (type image, the "
        "default; no package index needed) or pip from a package index on each run (type pip)",
    )
    labels: dict[Key, Annotated[str, StringConstraints(max_length=63)]] = Field(
        default_factory=dict, description="extra labels on every object and pod"
    )
    annotations: dict[Key, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict, description="extra annotations on every object and pod"
    )
    # Fences (the renderer's docstring says what each closes).
    platform_namespace: Name = Field(
        default="plinth-system",
        description="namespace of Plinth's gateway and worker: the only pods outside an "
        "endpoint's own that its NetworkPolicies let in",
    )
    monitoring_namespace: Name | None = Field(
        default=None,
        description="namespace whose pods (Prometheus) may scrape engine and router metrics; "
        "null: none may",
    )
    engine_run_as_user: int | None = Field(
        default=None,
        ge=1,
        le=2_147_483_647,
        description="user id engines (and weight downloads) run as, non-root; null keeps the "
        "image's user (the SGLang image runs as root). A host_path cache must be writable by it",
    )
    read_only_root: bool = Field(
        default=True,
        description="engines' root filesystem read-only (the model cache, /dev/shm and /tmp "
        "stay writable); off only for an engine image that writes elsewhere",
    )
    tenant_overrides: tuple[TenantOverride, ...] = Field(
        default=("engine_image", "router_image", "env", "extra_flags"),
        description="what an endpoint's settings may set over the cluster's: engine_image "
        "(runtime.image), router_image, env, extra_flags",
    )
    # A fleet (``deployments.fleet``): how Plinth's gateway reaches an endpoint's router on this
    # cluster, and what its GPUs cost relative to other clusters'.
    router_address: Annotated[str, StringConstraints(max_length=250)] | None = Field(
        default=None,
        description="the URL the gateway reaches an endpoint's router on this cluster by (an "
        "ingress or load balancer), with {endpoint} for the endpoint's slug, e.g. "
        "https://{endpoint}.gpu-east.example.com; null: the address the driver observes "
        "(in-cluster DNS, for a gateway inside this cluster)",
    )
    gpu_price_factor: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="this cluster's GPU-hour price relative to the catalogue's (0.5: half): the "
        "cheapest-first placement fills the cluster with the lowest factor first",
    )

    @field_validator("gpu_map")
    @classmethod
    def _gpu_map(cls, value: dict[str, GpuSelector]) -> dict[str, GpuSelector]:
        """Keys as catalogue ids (an alias is accepted); the catalogue's defaults fill the rest."""
        merged = default_gpu_map()
        for name, selector in value.items():
            try:
                merged[get_gpu(name).id] = selector
            except KeyError as exc:
                raise _fail("unknown_gpu", str(exc)) from None
        return merged

    @field_validator("gpu_resource", "topology_label")
    @classmethod
    def _qualified(cls, value: str | None) -> str | None:
        return None if value is None else qualified_name(value)

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            qualified_name(key)
            label_value(item)
        return value

    @field_validator("platform_namespace", "monitoring_namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return None if value is None else dns_label(value)

    @field_validator("priority_class_name", "runtime_class_name", "service_account_name")
    @classmethod
    def _object_name(cls, value: str | None) -> str | None:
        return None if value is None else dns_subdomain(value)

    @field_validator("image_pull_secrets")
    @classmethod
    def _secret_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dns_subdomain(name) for name in value)

    @field_validator("engine_images")
    @classmethod
    def _engine_images(cls, value: dict[str, str]) -> dict[str, str]:
        for version, image in value.items():
            if version not in SUPPORTED_SGLANG_VERSIONS:
                raise _fail(
                    "unsupported_version",
                    f"SGLang {version!r} is not supported; use "
                    + " or ".join(SUPPORTED_SGLANG_VERSIONS),
                )
            image_ref(image)
        return value

    @field_validator("router_image")
    @classmethod
    def _router_image(cls, value: str | None) -> str | None:
        return None if value is None else image_ref(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            _own_key(key)
            label_value(item)
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            _own_key(key)
        return value

    @field_validator("router_address")
    @classmethod
    def _router_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.replace("{endpoint}", "endpoint"))
        if parts.scheme not in ("http", "https") or not parts.hostname or value != value.strip():
            raise _fail("invalid_url", f"{value!r} is not an http(s) URL")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise _fail("invalid_url", "no credentials, query or fragment in a router address")
        if value.replace("{endpoint}", "").count("{") or "}" in value.replace("{endpoint}", ""):
            raise _fail("invalid_url", "{endpoint} is the only placeholder")
        return value.rstrip("/")

    def router_address_of(self, slug: str) -> str | None:
        """The gateway's address of endpoint ``slug``'s router here; None: the observed one."""
        return self.router_address.replace("{endpoint}", slug) if self.router_address else None

    @field_validator("tenant_overrides")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value))

    def gpu_selector(self, gpu: str) -> GpuSelector:
        """The nodes of catalogue GPU ``gpu`` (an id or alias) on this cluster."""
        gpu_id = get_gpu(gpu).id
        return self.gpu_map.get(gpu_id) or GpuSelector(values=get_gpu(gpu_id).gpu_products)

    def gpu_of_node(self, labels: Mapping[str, str]) -> str:
        """The catalogue GPU of a node with ``labels``; "" when none of the map matches."""
        return next((gpu for gpu, sel in self.gpu_map.items() if sel.matches(labels)), "")

    def allows(self, override: str) -> bool:
        return override in self.tenant_overrides

    def stored(self) -> dict[str, Any]:
        """As kept in ``Cluster.operator_settings`` and shown by the API."""
        return self.model_dump(mode="json")


class SettingsInvalid(ValueError):
    """Settings that break a rule: ``problems`` as (field path, message), every one."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in problems))
        self.problems = problems


def parse_settings(data: Mapping[str, Any] | None) -> ClusterSettings:
    """``data`` as ClusterSettings, or :class:`SettingsInvalid` naming every field at fault."""
    try:
        return ClusterSettings.model_validate(dict(data or {}))
    except ValidationError as exc:
        raise SettingsInvalid(
            [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        ) from None
