"""Schemas shared by every route group: the error shape, pagination, a time range, strict input
models."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja import Schema
from pydantic import AfterValidator, ConfigDict, Field, create_model

from controlplane.services import ServiceError


def _to_utc(value: datetime) -> datetime:
    # PostgreSQL refuses offsets beyond ±15:59 that ISO 8601 allows; UTC is always storable.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("date out of range") from exc


UtcDatetime = Annotated[datetime, AfterValidator(_to_utc)]


MAX_RANGE = timedelta(days=31)


class RangeQuery(Schema):
    start: UtcDatetime | None = Field(None, description="ISO 8601; default: an hour before end")
    end: UtcDatetime | None = Field(None, description="ISO 8601; default: now")


def time_range(query: RangeQuery) -> tuple[datetime, datetime]:
    """``[start, end)`` of ``query``: an hour before ``end`` by default, at most 31 days."""
    try:
        end = query.end or timezone.now()
        start = query.start or end - timedelta(hours=1)
    except (OverflowError, ValueError) as exc:
        raise ServiceError("start and end must be dates near the present", field="start") from exc
    if start >= end:
        raise ServiceError("start must be before end", field="start")
    if end - start > MAX_RANGE:
        raise ServiceError("the range can span at most 31 days", field="start")
    return start, end


class StrictIn(Schema):
    """Request bodies: unknown fields are refused (422 naming them).

    Numbers and strings use pydantic's Strict types field by field ("3" is not 3); the model is
    not strict as a whole because JSON has no datetime or UUID type to be strict about.
    """

    model_config = ConfigDict(extra="forbid")


class FieldErrorOut(Schema):
    field: str = Field(description="dotted path of the input at fault, e.g. spec.parallelism.tp")
    code: str
    message: str
    fix: str | None = None


class ErrorDetailOut(Schema):
    code: str = Field(description="stable, machine-readable")
    message: str
    fields: list[FieldErrorOut] = []


class ErrorOut(Schema):
    error: ErrorDetailOut


class PageQuery(Schema):
    limit: int = Field(50, ge=1, le=200, description="items per page")
    offset: int = Field(0, ge=0, le=1_000_000, description="items to skip")


def page_schema(item: type[Schema], name: str) -> type[Schema]:
    """``{"items": [...], "count": N, "next": url|null}`` for one item type, named for OpenAPI."""
    return create_model(
        name,
        __base__=Schema,
        items=(list[item], ...),  # type: ignore[valid-type]  # a type made at run time
        count=(int, Field(description="items matching the filters, all pages")),
        next=(str | None, Field(None, description="URL of the next page, null on the last")),
    )


def page_of(
    request: HttpRequest,
    rows: QuerySet[Any],
    page: PageQuery,
    out: Callable[[Any], Any] = lambda row: row,
) -> dict[str, Any]:
    """One page of ``rows`` (ordered) and their count: two queries whatever their number."""
    items = [out(row) for row in rows[page.offset : page.offset + page.limit]]
    return page_body(request, items, rows.count(), page)


def page_body(
    request: HttpRequest, items: list[Any], count: int, page: PageQuery
) -> dict[str, Any]:
    """The page response with the ``next`` link (same filters, next offset)."""
    following = page.offset + page.limit
    next_url = None
    if following < count:
        query = request.GET.copy()
        query["offset"] = str(following)
        query["limit"] = str(page.limit)
        next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    return {"items": items, "count": count, "next": next_url}
