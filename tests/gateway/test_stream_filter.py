"""Reading usage from streams without holding them back (pure: no processes)."""

from __future__ import annotations

import json

from gateway.metering import Usage
from gateway.usage_parsing import StreamFilter, usage_from_body


def event(payload: dict[str, object], end: bytes = b"\n\n") -> bytes:
    return b"data: " + json.dumps(payload).encode() + end


CONTENT = event({"choices": [{"delta": {"content": "hi"}}]})
USAGE = event(
    {
        "choices": [],
        "usage": {
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }
)
DONE = b"data: [DONE]\n\n"


def test_the_usage_chunk_the_gateway_asked_for_is_removed_and_read():
    stream = StreamFilter(native=False, strip_usage_chunk=True)
    out = stream.feed(CONTENT)
    assert not stream.done
    out += stream.feed(USAGE + DONE) + stream.finish()
    assert out == CONTENT + DONE
    assert stream.usage == Usage(prompt_tokens=7, completion_tokens=3, cached_tokens=4)
    assert stream.done


def test_a_client_that_asked_for_usage_keeps_its_chunk():
    stream = StreamFilter(native=False, strip_usage_chunk=False)
    out = stream.feed(CONTENT + USAGE + DONE) + stream.finish()
    assert out == CONTENT + USAGE + DONE
    assert stream.usage is not None and stream.usage.total == 10


def test_events_split_anywhere_pass_whole_and_as_soon_as_complete():
    stream = StreamFilter(native=False, strip_usage_chunk=True)
    whole = CONTENT + USAGE + DONE
    out = []
    for i in range(0, len(whole), 7):
        out.append(stream.feed(whole[i : i + 7]))
    out.append(stream.finish())
    assert b"".join(out) == CONTENT + DONE
    # The first event went out as soon as its blank line arrived, not at the end.
    first_nonempty = next(i for i, part in enumerate(out) if part)
    assert first_nonempty <= len(CONTENT) // 7
    assert stream.usage is not None


def test_crlf_separated_events_are_understood():
    stream = StreamFilter(native=False, strip_usage_chunk=True)
    crlf = CONTENT.replace(b"\n\n", b"\r\n\r\n")
    usage = USAGE.replace(b"\n\n", b"\r\n\r\n")
    assert stream.feed(crlf + usage) + stream.finish() == crlf
    assert stream.usage is not None


def test_native_generate_streams_report_the_last_cumulative_meta_info():
    stream = StreamFilter(native=True, strip_usage_chunk=False)
    first = event({"text": "a", "meta_info": {"prompt_tokens": 5, "completion_tokens": 1}})
    last = event(
        {
            "text": "ab",
            "meta_info": {"prompt_tokens": 5, "completion_tokens": 2, "cached_tokens": 1},
        }
    )
    assert stream.feed(first) + stream.feed(last) == first + last
    # A client that leaves before the end is still charged what was generated so far.
    assert stream.settle() == Usage(prompt_tokens=5, completion_tokens=2, cached_tokens=1)
    assert stream.feed(DONE) + stream.finish() == DONE


def test_whole_bodies_report_usage_or_nothing():
    body = json.dumps({"usage": {"prompt_tokens": 2, "completion_tokens": 9}}).encode()
    assert usage_from_body(body, native=False) == Usage(2, 9, 0)
    batch = json.dumps([{"meta_info": {"prompt_tokens": 1, "completion_tokens": 2}}] * 2).encode()
    assert usage_from_body(batch, native=True) == Usage(2, 4, 0)
    assert usage_from_body(b"not json", native=False) is None
