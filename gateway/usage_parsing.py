"""Reading token usage out of upstream responses, whole or streamed, without holding them back.

``StreamFilter`` sees a server-sent-event stream chunk by chunk and passes on every complete
event as soon as it has it. Only events that mention ``"usage": {`` are parsed; the usage-only
chunk that the gateway asked for on the client's behalf (``choices: []``) is dropped again. For
SGLang's native ``/generate`` stream, where each event carries cumulative ``meta_info``, the last
event is remembered and parsed once at the end.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.metering import Usage

_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_EVENT_END = re.compile(rb"\r?\n\r?\n")


def usage_from_openai(body: Any) -> Usage | None:
    """``usage`` of a chat/completions/embeddings response (``cached_tokens`` when reported)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
    )


def usage_from_native(body: Any) -> Usage | None:
    """``meta_info`` of SGLang's ``/generate`` answer: one object, or a list for a batch."""
    items = body if isinstance(body, list) else [body]
    total: Usage | None = None
    for item in items:
        meta = item.get("meta_info") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        usage = Usage(
            prompt_tokens=int(meta.get("prompt_tokens") or 0),
            completion_tokens=int(meta.get("completion_tokens") or 0),
            cached_tokens=int(meta.get("cached_tokens") or 0),
        )
        total = usage if total is None else total + usage
    return total


def usage_from_body(body: bytes, native: bool) -> Usage | None:
    try:
        parsed = orjson.loads(body)
    except ValueError:
        return None
    return usage_from_native(parsed) if native else usage_from_openai(parsed)


def _event_json(event: bytes) -> Any:
    for line in event.splitlines():
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload and payload != b"[DONE]":
                try:
                    return orjson.loads(payload)
                except ValueError:
                    return None
    return None


class StreamFilter:
    def __init__(self, *, native: bool, strip_usage_chunk: bool) -> None:
        self.native = native
        self.strip_usage_chunk = strip_usage_chunk
        self.usage: Usage | None = None
        self.done = False  # the stream's own end marker went by
        self._pending = b""
        self._last_native_event = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in what has arrived so far; a partial event waits for its end."""
        data = self._pending + chunk if self._pending else chunk
        end = _last_event_end(data)
        if end == 0:
            self._pending = data
            return b""
        complete, self._pending = data[:end], data[end:]
        if not self.done and b"data: [DONE]" in complete:
            self.done = True
        if self.native:
            self._remember_native(complete)
            return complete
        if _USAGE.search(complete) is None:
            return complete
        return self._take_usage(complete)

    def finish(self) -> bytes:
        """What is left when the upstream ends (an unterminated last event passes unchanged)."""
        rest, self._pending = self._pending, b""
        if self.native and rest.strip():
            self._remember_native(rest)
        self.settle()
        return rest

    def settle(self) -> Usage | None:
        """The usage seen so far: at the end, or when the client left before it."""
        if self.native and self._last_native_event:
            parsed = _event_json(self._last_native_event)
            if parsed is not None:
                self.usage = usage_from_native(parsed)
        return self.usage

    def _remember_native(self, complete: bytes) -> None:
        for event in reversed(_EVENT_END.split(complete)):
            if event.startswith(b"data:") and b"[DONE]" not in event:
                self._last_native_event = event
                return

    def _take_usage(self, complete: bytes) -> bytes:
        kept: list[bytes] = []
        for event in _split_events(complete):
            if _USAGE.search(event) is not None:
                parsed = _event_json(event)
                usage = usage_from_openai(parsed)
                if usage is not None:
                    self.usage = usage
                    if self.strip_usage_chunk and parsed.get("choices") == []:
                        continue
            kept.append(event)
        return b"".join(kept)


def _last_event_end(data: bytes) -> int:
    """Index just past the last blank line in ``data``, 0 when there is none."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


def _split_events(complete: bytes) -> list[bytes]:
    """Events with their terminating blank line kept, so joining them restores the bytes."""
    events: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(complete):
        events.append(complete[start : match.end()])
        start = match.end()
    if start < len(complete):
        events.append(complete[start:])
    return events
