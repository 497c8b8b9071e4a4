import json
from datetime import UTC, datetime

import pytest

from cogworker_async import job
from cogworker_async.errors import PayloadTooLarge, SerializationError, UnparseablePayload


def test_build_and_encode_round_trip() -> None:
    payload = job.build("m.f", (1, "a"), {"k": [1, 2]}, queue="q", retry=3, now=10.0)
    raw = job.encode(payload, 1000)
    decoded = job.decode(raw, 1000)
    assert decoded == {**payload, "args": [1, "a"]}
    assert set(payload) >= {"jid", "class", "args", "kwargs", "queue", "retry", "created_at",
                            "enqueued_at"}


@pytest.mark.parametrize("bad", [object(), {1, 2}, datetime.now(UTC), b"bytes"])
def test_non_json_arguments_are_refused_with_a_type_error(bad: object) -> None:
    payload = job.build("m.f", [bad], {}, queue="q", retry=True, now=1.0)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        job.encode(payload, 10_000)


def test_nan_is_refused() -> None:
    with pytest.raises(SerializationError):
        job.encode(job.build("m.f", [float("nan")], {}, queue="q", retry=True, now=1.0), 1000)


def test_oversized_payload_is_refused_with_a_value_error() -> None:
    payload = job.build("m.f", ["x" * 2000], {}, queue="q", retry=True, now=1.0)
    with pytest.raises(ValueError, match="max_payload_bytes") as info:
        job.encode(payload, 1000)
    assert isinstance(info.value, PayloadTooLarge)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        b'{"jid": "x"}',
        b'{"class": "m.f"}',
        b'{"jid": "x", "class": "m.f", "args": {}}',
        b'{"jid": "x", "class": "m.f", "kwargs": []}',
        b"\xff\xfe\xfd",
        b"[" * 100_000 + b"]" * 100_000,
        b"",
    ],
)
def test_decode_refuses_whatever_is_not_a_job(raw: bytes) -> None:
    with pytest.raises(UnparseablePayload):
        job.decode(raw, 10_000_000)


def test_decode_refuses_oversized_raw_without_parsing() -> None:
    with pytest.raises(UnparseablePayload, match="over the limit"):
        job.decode(b'{"jid": "x", "class": "m.f"}' + b" " * 100, 50)


def test_jid_of_reads_what_it_can() -> None:
    assert job.jid_of(json.dumps({"jid": "abc"}).encode()) == "abc"
    assert job.jid_of(b"garbage") is None
    assert job.jid_of(b'{"jid": 5}') is None
