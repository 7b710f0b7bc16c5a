"""The cold-start figures: ``startup.yaml`` (download, cache read and host-link speeds, CUDA graph
capture and warm-up costs), as one frozen record."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from runtime.catalog.data import read_yaml

_DATA = Path(__file__).with_name("startup.yaml")


class StartupFigures(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hub_download_gbs: float = Field(gt=0)
    cache_read_gbs: float = Field(gt=0)
    host_link_gbs: float = Field(gt=0)
    graph_capture_s_per_layer: float = Field(ge=0)
    warmup_s: float = Field(ge=0)


@cache
def startup_figures() -> StartupFigures:
    return StartupFigures.model_validate(read_yaml(_DATA))
