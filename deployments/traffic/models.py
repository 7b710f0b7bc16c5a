"""What flows through endpoints: metric samples (the probe's) and usage per key and minute."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from controlplane.models import MAX_ADAPTER_NAME, ApiKey, Organization
from deployments.endpoints.models import SLUG_MAX_LENGTH, Deployment


class MetricSample(models.Model):
    """Engine and router figures for one deployment over one probe interval."""

    id = models.BigAutoField(primary_key=True)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField(db_index=True)
    interval_s = models.FloatField(default=0)
    replicas_ready = models.PositiveIntegerField(default=0)
    requests = models.FloatField(default=0)
    prompt_tokens = models.FloatField(default=0)
    generation_tokens = models.FloatField(default=0)
    cached_tokens = models.FloatField(default=0)
    requests_per_s = models.FloatField(default=0)
    tokens_per_s = models.FloatField(default=0)
    ttft_p50 = models.FloatField(null=True, blank=True)
    ttft_p90 = models.FloatField(null=True, blank=True)
    itl_p50 = models.FloatField(null=True, blank=True)
    itl_p90 = models.FloatField(null=True, blank=True)
    running = models.FloatField(default=0)
    queued = models.FloatField(default=0)
    kv_usage = models.FloatField(null=True, blank=True)
    cache_hit_rate = models.FloatField(null=True, blank=True)
    # HiCache: the share of prompt tokens each KV tier served, {"device", "host", "storage"};
    # {} for engines without its tiers.
    cache_tiers = models.JSONField(default=dict, blank=True)
    spec_accept_length = models.FloatField(null=True, blank=True)
    # Each ready replica's own figures for this interval: a list of {"name", "revision",
    # "requests_per_s", "tokens_per_s", "running", "kv_usage"}, for the console's per-replica
    # and per-revision series (the fields above are their sums, or means for KV usage).
    replicas = models.JSONField(default=list, blank=True)
    # Per revision, while two serve (a canary beside the baseline): {"<number>": {"requests",
    # "requests_per_s", "tokens_per_s", "ttft_p50", "ttft_p90", "itl_p50", "itl_p90"}}; {} when
    # one revision serves alone (the fields above are then its figures).
    revisions = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-ts"]
        indexes = [models.Index(fields=["deployment", "-ts"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class UsageRecord(models.Model):
    """Tokens used per inference key per endpoint (and LoRA adapter) per minute (flushed from
    Redis by beat).

    The deployment is kept by id and slug rather than a foreign key so usage history
    survives the endpoint's deletion.
    """

    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="usage")
    deployment_id = models.UUIDField()
    deployment_slug = models.CharField(max_length=SLUG_MAX_LENGTH)
    # The LoRA adapter the requests called; "" for the base model.
    adapter = models.CharField(max_length=MAX_ADAPTER_NAME, default="", blank=True)
    minute = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "deployment_id", "adapter", "minute"],
                name="unique_usage_minute_adapter",
            )
        ]
        indexes = [models.Index(fields=["organization", "-minute"])]

    def __str__(self) -> str:
        return f"{self.deployment_slug} {self.minute:%Y-%m-%d %H:%M}"


class UsageFlushBatch(models.Model):
    """One claimed batch of the gateway's Redis counters that was added to UsageRecord.

    Written in the same transaction as the counts (``deployments.traffic.usage``): a flush that dies
    after that commit and before deleting the batch from Redis finds it here next time and
    only deletes it. Pruned after ``usage.BATCH_RETENTION``.
    """

    batch = models.CharField(max_length=100, primary_key=True)  # the Redis processing hash name
    flushed_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.batch
