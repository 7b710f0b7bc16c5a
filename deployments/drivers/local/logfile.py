"""Reading one local process' log file: a tail, or what was written after a cursor.

A process writes its stdout and stderr straight into ``<name>.log`` (it outlives the worker, so
nothing sits in between to stamp its lines). The times of lines are therefore the ones the
process wrote itself at their start, read once the line's terminal escapes are gone (smg colours
its stamp even into a file): SGLang's ``[2025-06-01 12:00:00]`` and the simulator's copy of it
(local time, as Python's logging formats ``asctime``), smg's ``2025-06-01 12:00:00`` (UTC,
though it names no zone: the caller says which zone a process' zoneless stamps are in), or an
ISO 8601 time with a zone (the driver's own ``--- starting`` lines). A line without one (a
traceback, a uvicorn access line, a wrapped message) takes the time of the stamped line before
it: it was written at or after that time. Lines before any stamp have no known time.

A cursor is ``<inode>:<offset>:<head>``: the byte after the last line returned, and a checksum
of the file's first bytes (up to that offset), because a file removed and written again may get
the same inode. Only whole lines are returned (a line still being written waits for its
newline), so following never shows half a line. A cursor of another file, or past the end, is
not used: the answer is a fresh tail, marked not ``continued``.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import BinaryIO

from deployments.drivers.base import plain_text

# "[2025-06-01 12:00:00" (SGLang, "[... TP0]" too), "2025-06-01 12:00:00" (smg),
# "2025-06-01T12:00:00.123456Z" (ISO 8601).
_STAMP = re.compile(
    r"^\[?(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>[.,]\d+)?"
    r"(?P<zone>Z|[+-]\d{2}:?\d{2})?(?![\d.:])"
)
_LINE = re.compile(rb"[^\n]*\n|[^\n]+\Z")
_CURSOR = re.compile(r"\A(\d{1,20}):(\d{1,20}):([0-9a-f]{8})\Z")
# A cursor checks that the file still begins with the bytes it began with (up to this many).
HEAD_BYTES = 256


@dataclass(frozen=True)
class FileLines:
    """Lines read from a log file (text, time or None), and where the next read starts."""

    lines: list[tuple[str, datetime | None]]
    cursor: str
    continued: bool
    more: bool


def line_time(line: str, zone: tzinfo | None = None) -> datetime | None:
    """The time stamped at the start of ``line`` (plain text), aware. A stamp without a zone is
    in ``zone``; None: the machine's local time (which SGLang's logging uses)."""
    match = _STAMP.match(line)
    if match is None:
        return None
    fraction = (match["fraction"] or "").replace(",", ".")[:7]  # microseconds at most
    named = (match["zone"] or "").replace("Z", "+00:00")
    try:
        stamp = datetime.fromisoformat(f"{match['date']}T{match['time']}")
        stamp = stamp.replace(microsecond=int((fraction[1:] or "0").ljust(6, "0")))
        if named:
            return datetime.fromisoformat(f"{stamp.isoformat()}{named}")
        return stamp.replace(tzinfo=zone) if zone is not None else stamp.astimezone()
    except ValueError:
        return None  # a stamp-shaped text that is no time (month 13)


def read_log(
    path: Path,
    *,
    tail: int,
    after: str | None,
    since: datetime | None,
    max_bytes: int,
    zone: tzinfo | None = None,
) -> FileLines:
    """The last ``tail`` lines of ``path``, or the next ``tail`` after the cursor ``after``, as
    plain text (``base.plain_text``); ``zone`` is that of the process' zoneless stamps.

    Reads at most ``max_bytes`` bytes. Links are not followed (``O_NOFOLLOW``): the name was
    listed as a plain file, and must not have become a link to someone else's file since.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())
        size, inode = status.st_size, status.st_ino
        offset = _offset(handle, after, inode, size)
        if offset is not None:
            return _continue(handle, inode, offset, size, tail, since, max_bytes, zone)
        return _tail(handle, inode, size, tail, since, max_bytes, zone)


def _cursor(handle: BinaryIO, inode: int, offset: int) -> str:
    head = zlib.crc32(_read_at(handle, 0, min(offset, HEAD_BYTES)))
    return f"{inode}:{offset}:{head:08x}"


def _offset(handle: BinaryIO, after: str | None, inode: int, size: int) -> int | None:
    """The offset of a cursor of this very file, or None."""
    match = _CURSOR.match(after or "")
    if match is None or int(match[1]) != inode or int(match[2]) > size:
        return None
    offset = int(match[2])
    return offset if _cursor(handle, inode, offset) == after else None


def _tail(
    handle: BinaryIO,
    inode: int,
    size: int,
    tail: int,
    since: datetime | None,
    max_bytes: int,
    zone: tzinfo | None,
) -> FileLines:
    start = max(0, size - max_bytes)
    chunk = _read_at(handle, start, size - start)
    if start > 0:  # began mid-line: the first line is a fragment
        chunk = chunk[chunk.find(b"\n") + 1 :] if b"\n" in chunk else b""
        start = size - len(chunk)
    whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for its newline
    stamped = _stamped(whole, zone)
    lines = [(text, ts) for text, ts in stamped if since is None or _at_or_after(ts, since)]
    cursor = _cursor(handle, inode, start + len(whole))
    return FileLines(lines[-tail:], cursor, continued=False, more=False)


def _continue(
    handle: BinaryIO,
    inode: int,
    offset: int,
    size: int,
    tail: int,
    since: datetime | None,
    max_bytes: int,
    zone: tzinfo | None,
) -> FileLines:
    chunk = _read_at(handle, offset, min(size - offset, max_bytes))
    end = chunk.rfind(b"\n") + 1
    if end == 0 and len(chunk) == max_bytes:
        end = len(chunk)  # one line longer than a whole read: shown in pieces, never stuck
    taken = _split_lines(chunk[:end])[:tail]
    consumed = sum(len(raw) for raw in taken)
    # Lines after a cursor were written after the lines already shown: one of unknown time is
    # kept, one stamped before ``since`` is not.
    kept = [
        (text, ts)
        for text, ts in _stamped(b"".join(taken), zone)
        if since is None or ts is None or ts >= since
    ]
    position = offset + consumed
    more = position < offset + end or offset + len(chunk) < size
    return FileLines(kept, _cursor(handle, inode, position), continued=True, more=more)


def _read_at(handle: BinaryIO, offset: int, length: int) -> bytes:
    handle.seek(offset)
    return handle.read(length)


def _stamped(chunk: bytes, zone: tzinfo | None) -> list[tuple[str, datetime | None]]:
    """Each line as plain text with its time: its own stamp, else the last stamped line's."""
    found: list[tuple[str, datetime | None]] = []
    current: datetime | None = None
    for raw in _split_lines(chunk):
        text = plain_text(_decode(raw))
        current = line_time(text, zone) or current
        found.append((text, current))
    return found


def _split_lines(chunk: bytes) -> list[bytes]:
    """The lines of ``chunk``, each with its newline. Only a newline ends a line: a carriage
    return (a progress bar redrawing itself) is part of the line, which ``plain_text`` renders."""
    return _LINE.findall(chunk)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _at_or_after(ts: datetime | None, since: datetime) -> bool:
    # A line of unknown time (before any stamp in what was read) cannot be shown to be recent.
    return ts is not None and ts >= since
