"""Reading stored jobs trusts nothing: ``wire.decode`` answers a job or
``UnparseablePayload``, whatever the bytes, and the dead entry of bytes it refused can
always be written.

A worker files what ``decode`` refuses and runs what it returns: any other exception
from it, or a returned "job" whose fields have the wrong types, would reach code that
assumes a job (and, before the settlement was hardened, stop the worker).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cogworker_async.errors import UnparseablePayload
from cogworker_async.jobs import wire
from cogworker_async.settings import MAX_PAYLOAD_BYTES
from tests.strategies import (
    ANY_TEXT,
    BIG,
    DEEP,
    LONE_SURROGATES,
    deep_text,
    encodings,
    job_payloads,
    json_values,
    stored_bytes,
)

LIMITS: Final = st.one_of(st.just(MAX_PAYLOAD_BYTES), st.integers(0, 256))
"""``max_payload_bytes`` as configured, and small enough to refuse many payloads."""
NOW: Final = 1_700_000_000.0


def decoded_or_refused(raw: bytes, max_bytes: int) -> dict[str, Any] | None:
    """``decode(raw)``, checked to be a job; None if refused as ``UnparseablePayload``
    (any other exception fails the test)."""
    try:
        payload = wire.decode(raw, max_bytes)
    except UnparseablePayload as exc:
        refusal = exc
    else:
        assert isinstance(payload, dict)
        assert isinstance(payload["jid"], str)
        assert isinstance(payload["class"], str)
        assert isinstance(payload["args"], list)
        assert isinstance(payload["kwargs"], dict)
        assert len(raw) <= max_bytes
        return dict(payload)
    assert str(refusal), "a refusal says why"
    return None


def assert_dead_entry_writable(raw: bytes) -> None:
    entry = wire.unparseable_entry(raw, queue="default", reason="not JSON", now=NOW)
    written = wire.encode(entry, wire.NO_SIZE_LIMIT)
    kept = json.loads(written)
    assert base64.b64decode(kept["raw_payload_base64"]) == raw


@given(raw=stored_bytes(), max_bytes=LIMITS)
@example(raw=b'{"jid": "a", "class": "b", "args": [' + str(BIG).encode() + b"]}",
         max_bytes=MAX_PAYLOAD_BYTES)
@example(raw=('{"jid": "a", "class": "b", "args": [' + deep_text(DEEP, "list") + "]}").encode(),
         max_bytes=MAX_PAYLOAD_BYTES)
@example(raw=b'{"jid": "\\ud800", "class": "\\udfff", "kwargs": {"\\ud800": 1}}',
         max_bytes=MAX_PAYLOAD_BYTES)
@example(raw=b'{"jid": "\xed\xa0\x80", "class": "b"}', max_bytes=MAX_PAYLOAD_BYTES)
@example(raw=b'{"jid": "a", "class": "b", "args": [NaN, -Infinity, 1e999]}',
         max_bytes=MAX_PAYLOAD_BYTES)
def test_decode_returns_a_job_or_refuses_any_bytes(raw: bytes, max_bytes: int) -> None:
    decoded_or_refused(raw, max_bytes)
    assert_dead_entry_writable(raw)


@given(value=json_values(ANY_TEXT, nan=True), ascii_only=st.booleans())
def test_decode_of_any_json_value_returns_a_job_or_refuses(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    payload = decoded_or_refused(raw, MAX_PAYLOAD_BYTES)
    if not isinstance(value, dict):
        assert payload is None


@given(payload=job_payloads(json_values(ANY_TEXT, leaves=12), st.text()))
@example(payload={"jid": "\ud800", "class": "\udfff", "args": ["a\udc80b", BIG],
                  "kwargs": {"\ud800": [-BIG]}})
def test_a_job_written_as_escaped_json_reads_back_equal(payload: dict[str, Any]) -> None:
    """Whatever ``encode`` writes (it escapes non-ASCII, surrogates included), ``decode``
    reads back as it was, when the fields have the types of a job and the fields that
    end up in key names are valid text (a lone surrogate there is refused)."""
    raw = wire.encode(payload, wire.NO_SIZE_LIMIT)
    decoded = decoded_or_refused(raw, wire.NO_SIZE_LIMIT)
    keyed = [payload.get(f) for f in wire.KEYED_FIELDS]
    shaped = (isinstance(payload["jid"], str) and isinstance(payload["class"], str)
              and isinstance(payload["args"], list) and isinstance(payload["kwargs"], dict)
              and not any(isinstance(v, str) and has_surrogate(v) for v in keyed))
    assert (decoded is not None) == shaped
    if decoded is not None:
        assert decoded == payload


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(char) <= 0xDFFF for char in text)


JOB_TEXT: Final = '{"jid": "%s", "class": "b"}'
JSON_IN_ANOTHER_ENCODING: Final = {
    **{f"surrogate {s!r} as UTF-8 bytes": (JOB_TEXT % s).encode("utf-8", "surrogatepass")
       for s in LONE_SURROGATES},
    "UTF-16 with BOM": (JOB_TEXT % "a").encode("utf-16"),
    "UTF-16-LE": (JOB_TEXT % "a").encode("utf-16-le"),
    "UTF-32": (JOB_TEXT % "a").encode("utf-32"),
}
"""Bytes that are a job in some encoding, but not as UTF-8: either not UTF-8 at all
(Python's strict codec refuses them) or, read as UTF-8, not JSON (NULs between the
characters)."""


@pytest.mark.parametrize("raw", JSON_IN_ANOTHER_ENCODING.values(),
                         ids=JSON_IN_ANOTHER_ENCODING.keys())
def test_a_job_that_is_json_only_in_another_encoding_is_refused(raw: bytes) -> None:
    """The README: a stored job that "is not UTF-8 goes to dead with its exact bytes"."""
    with pytest.raises((UnicodeDecodeError, json.JSONDecodeError)):
        json.loads(raw.decode("utf-8"))
    assert decoded_or_refused(raw, MAX_PAYLOAD_BYTES) is None
    assert_dead_entry_writable(raw)


@given(raw=encodings(json_values(ANY_TEXT, nan=True)) | st.binary(), reason=ANY_TEXT,
       queue=ANY_TEXT)
def test_the_dead_entry_of_any_bytes_can_be_encoded(raw: bytes, reason: str, queue: str) -> None:
    """The reason and queue name are what the worker had at hand: a parser message, a
    queue name read from Redis; neither may stop the entry being written."""
    entry = wire.unparseable_entry(raw, queue=queue, reason=reason, now=NOW)
    kept = json.loads(wire.encode(entry, wire.NO_SIZE_LIMIT))
    assert base64.b64decode(kept["raw_payload_base64"]) == raw
    assert kept["error_message"] == reason
