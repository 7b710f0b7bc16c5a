"""Driving one quantization run: claim it, start its attempt through the cluster's driver, read
the tool's events into the records until the attempt ends, start the next attempt where the
process died without a word.

Called by the ``deployments.drive_quantization`` task. A pass drives for at most ``PASS_S``
and then hands over (the task sends itself again), so no worker holds a run for hours; beat's
``deployments.resume_quantizations`` sends the task for every run whose lease lapsed (its
worker died, or its message was lost), and the next pass re-attaches to the same attempt: the
driver's record of it (a folder of files on this machine, a Job on the cluster) is read again
from where the run's saved cursor says the last read stopped (the local driver reads its file
from the first line), and the lines already applied are skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from controlplane.services import reveal_secret
from deployments.clusters.drivers import driver_for
from deployments.drivers import base
from deployments.drivers.base import Driver
from deployments.drivers.errors import DriverError, PermanentDriverError
from deployments.quantization import services
from deployments.quantization.models import QuantizationRun, RunStatus
from deployments.quantization.recipes import job_of

logger = logging.getLogger(__name__)
PASS_S = 300
POLL_S = 2.0
DONE = "done"
CONTINUING = "continuing"
SKIPPED = "skipped"


def _hf_token(run: QuantizationRun) -> str | None:
    if not run.hf_token_secret:
        return None
    secret = run.organization.secrets.filter(name=run.hf_token_secret).first()
    if secret is None:
        raise PermanentDriverError(f"the secret {run.hf_token_secret!r} is gone")
    return reveal_secret(secret)


def drive(
    run_id: str,
    *,
    pass_s: float = PASS_S,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """One pass over the run: DONE when it ended, CONTINUING when it still runs, SKIPPED when
    another task holds it."""
    run = services.claim(run_id)
    if run is None:
        return SKIPPED
    driver = driver_for(run.cluster)
    try:
        return _drive(run, driver, clock() + pass_s, poll_s, sleep, clock)
    except PermanentDriverError as exc:
        services.finish(run, RunStatus.FAILED, str(exc))
        return DONE
    except DriverError as exc:  # temporary: the next pass tries again
        logger.warning("quantization run %s: %s", run_id, exc)
        return CONTINUING
    finally:
        services.release(run)
        driver.close()


def _drive(
    run: QuantizationRun,
    driver: Driver,
    until: float,
    poll_s: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> str:
    if run.status == RunStatus.QUEUED:
        services.begin_attempt(run)
    job = job_of(run, namespace=run.cluster.namespace, hf_token=_hf_token(run))
    if run.finished:  # cancelled: stop whatever runs
        driver.remove_quantization(job)
        return DONE
    driver.start_quantization(job)
    while True:
        progress = driver.read_quantization(job, after=run.log_cursor)
        services.record_progress(run, progress)
        run.refresh_from_db(fields=["status"])
        if run.finished:
            driver.remove_quantization(job)
            return DONE
        if progress.state in (base.QUANTIZE_SUCCEEDED, base.QUANTIZE_FAILED):
            # Every line is recorded: what it ran in goes (the hub token's Secret with it).
            ok = progress.state == base.QUANTIZE_SUCCEEDED
            services.finish(
                run, RunStatus.SUCCEEDED if ok else RunStatus.FAILED,
                "" if ok else run.error or progress.message,
            )  # fmt: skip
            driver.remove_quantization(job)
            return DONE
        if progress.state == base.QUANTIZE_GONE:
            logger.warning("quantization run %s attempt %d died: %s", run.pk, run.attempt,
                           progress.message)  # fmt: skip
            if not services.begin_attempt(run):
                why = f"its process died {run.attempt} times; last: {progress.message}"
                services.finish(run, RunStatus.FAILED, why)
                return DONE
            job = job_of(run, namespace=run.cluster.namespace, hf_token=job.hf_token)
            driver.start_quantization(job)
            continue
        if clock() >= until:
            return CONTINUING
        sleep(poll_s)
