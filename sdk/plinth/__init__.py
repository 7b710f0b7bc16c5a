"""Plinth's Python SDK: ``Plinth`` (sync) and ``AsyncPlinth`` clients, typed models, errors."""

from plinth.client import AsyncPlinth, Plinth
from plinth.errors import (
    AuthenticationFailed,
    Conflict,
    ConnectionFailed,
    FieldError,
    NotFound,
    PermissionDenied,
    PlinthError,
    RateLimited,
    ServerError,
    ValidationFailed,
)

__all__ = [
    "AsyncPlinth",
    "AuthenticationFailed",
    "Conflict",
    "ConnectionFailed",
    "FieldError",
    "NotFound",
    "PermissionDenied",
    "Plinth",
    "PlinthError",
    "RateLimited",
    "ServerError",
    "ValidationFailed",
]
