"""SGLang's per-request metrics file (``--export-metrics-to-file``): a JSON line per request.

SGLang 0.5.23's ``FileRequestMetricsExporter`` appends one record per finished request to
``<--export-metrics-to-file-dir>/sglang-request-metrics-<YYYYmmdd_HH>.log``: the request's
parameters as a JSON string under ``request_parameters``, then its ``meta_info`` (id, token
counts, ``e2e_latency`` and, metrics being on, the timing stats ``queue_time`` and
``prefill_launch_latency``). Health checks are not recorded. Here the times are the engine's
simulated seconds, so a benchmark can tell what the engine did to a request from what the
processes in front of it added, however loaded the host.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import IO, Any

HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"


class RequestMetricsFile:
    """Appends records to the hour's file in ``directory`` (made if missing)."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._hour = ""
        self._file: IO[str] | None = None

    def write(self, rid: str, parameters: dict[str, Any], meta_info: dict[str, Any]) -> None:
        if HEALTH_CHECK_RID_PREFIX in rid:
            return
        hour = datetime.now().strftime("%Y%m%d_%H")
        if hour != self._hour or self._file is None:
            self.close()
            path = self.directory / f"sglang-request-metrics-{hour}.log"
            self._file = path.open("a", encoding="utf-8")
            self._hour = hour
        record = {"request_parameters": json.dumps(parameters), **meta_info}
        # A line is small and flushed at once, so a reader sees whole records.
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
