"""The gateway's settings, read once at start-up from Django settings and the environment.

Every knob is an environment variable so the same image runs in ``make run`` and in ``k8s/``;
a malformed value stops start-up with a message naming the variable (``controlplane.env``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.env import env_bool, env_int, env_str
from gateway.admission import AdmissionSettings
from gateway.health import PROBE_SECONDS
from gateway.isolation import WINDOW_SECONDS
from gateway.placement import DOWN_SECONDS

MIB = 1024 * 1024


def _env_float(name: str, default: float) -> float:
    raw = env_str(name, "")
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from exc


@dataclass(frozen=True)
class GatewayConfig:
    redis_url: str
    # Wildcard domain for <slug>.<domain> addressing; empty turns host addressing off.
    inference_domain: str = ""
    max_body_bytes: int = 10 * MIB
    # Scale-from-zero: how long a request may wait for a replica, and how many may wait.
    hold_seconds: float = 60.0
    hold_queue: int = 64
    # Full route-table reload interval; change notifications reload sooner.
    refresh_seconds: float = 30.0
    # While requests are held, the table is reloaded this often to notice the first replica.
    hold_refresh_seconds: float = 0.5
    upstream_connect_timeout: float = 10.0
    # Generation can be long; this bounds a silent upstream, not a slow stream.
    upstream_read_timeout: float = 600.0
    # How long a replica slot where a request reached no engine is left out of placement.
    slot_down_seconds: float = DOWN_SECONDS
    # How often the routers of endpoints on several clusters are probed (``gateway.health``).
    router_probe_seconds: float = PROBE_SECONDS
    metrics_port: int = 9090
    # The metrics listener names every organization's endpoints: loopback unless an operator
    # opens it on purpose (a Prometheus scraping pod IPs sets 0.0.0.0 in k8s/base/gateway.yaml).
    metrics_host: str = "127.0.0.1"
    # Fair admission under overload (gateway.admission), and isolation under contention
    # (gateway.isolation): a key over its fair share confined to a shard of the replicas, the
    # others kept off it (GATEWAY_ISOLATION, default on; off: every key anywhere; a key counts
    # as active for GATEWAY_ISOLATION_WINDOW_SECONDS after its last request).
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)

    @classmethod
    def from_environment(cls) -> GatewayConfig:
        from django.conf import settings

        return cls(
            redis_url=settings.REDIS_URL,
            inference_domain=settings.INFERENCE_DOMAIN.strip(".").lower(),
            max_body_bytes=env_int("GATEWAY_MAX_BODY_BYTES", 10 * MIB),
            hold_seconds=_env_float("GATEWAY_HOLD_SECONDS", 60.0),
            hold_queue=env_int("GATEWAY_HOLD_QUEUE", 64),
            refresh_seconds=_env_float("GATEWAY_REFRESH_SECONDS", 30.0),
            upstream_read_timeout=_env_float("GATEWAY_UPSTREAM_TIMEOUT_SECONDS", 600.0),
            slot_down_seconds=_env_float("GATEWAY_SLOT_DOWN_SECONDS", DOWN_SECONDS),
            router_probe_seconds=_env_float("GATEWAY_ROUTER_PROBE_SECONDS", PROBE_SECONDS),
            metrics_port=env_int("PLINTH_GATEWAY_METRICS_PORT", 9090),
            metrics_host=env_str("PLINTH_GATEWAY_METRICS_HOST", "127.0.0.1") or "127.0.0.1",
            admission=AdmissionSettings(
                enabled=env_bool("GATEWAY_FAIR_ADMISSION", default=True),
                queue_factor=_env_float("GATEWAY_ADMISSION_QUEUE_FACTOR", 4.0),
                wait_seconds=_env_float("GATEWAY_ADMISSION_WAIT_SECONDS", 30.0),
                headroom=_env_float("GATEWAY_ADMISSION_HEADROOM", 0.1),
                per_replica=env_int("GATEWAY_ADMISSION_PER_REPLICA", 0),
                gateway_replicas=max(1, env_int("GATEWAY_REPLICAS", 1)),
                isolation=env_bool("GATEWAY_ISOLATION", default=True),
                isolation_window=_env_float("GATEWAY_ISOLATION_WINDOW_SECONDS", WINDOW_SECONDS),
            ),
        )
