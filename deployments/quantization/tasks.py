"""The tasks of quantization: drive a run (sent by name by ``services`` after commit, and by
itself while the run goes on), resume runs whose driver died, purge expired calibration texts
(both beat's)."""

from __future__ import annotations

from celery import shared_task

from deployments.quantization import run as runs
from deployments.quantization import services

__all__: list[str] = ["drive_quantization", "purge_calibration_sets", "resume_quantizations"]


@shared_task(
    name="deployments.drive_quantization",
    ignore_result=True,
    soft_time_limit=runs.PASS_S + 120,
    time_limit=runs.PASS_S + 180,
)
def drive_quantization(run_id: str) -> str:
    outcome = runs.drive(run_id)
    if outcome == runs.CONTINUING:
        services.send_drive(run_id, countdown=1)
    return outcome


@shared_task(name="deployments.resume_quantizations", ignore_result=True)
def resume_quantizations() -> int:
    """Send the driving task for each run that nobody drives (its worker died)."""
    lapsed = services.lapsed_runs()
    for run_id in lapsed:
        services.send_drive(run_id)
    return len(lapsed)


@shared_task(name="deployments.purge_calibration_sets", ignore_result=True)
def purge_calibration_sets() -> int:
    return services.purge_expired_calibration()
