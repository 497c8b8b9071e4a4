import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import get_args

import pytest

from cogworker_async.errors import PayloadTooLarge, SerializationError, UnparseablePayload
from cogworker_async.jobs import wire
from cogworker_async.worker import outcome
from cogworker_async.worker.recovery import process_died_entry


def test_build_and_encode_round_trip() -> None:
    payload = wire.build("m.f", (1, "a"), {"k": [1, 2]}, queue="q", retry=3, now=10.0)
    raw = wire.encode(payload, 1000)
    decoded = wire.decode(raw, 1000)
    assert decoded == {**payload, "args": [1, "a"]}
    assert set(payload) >= {"jid", "class", "args", "kwargs", "queue", "retry", "created_at",
                            "enqueued_at"}


@pytest.mark.parametrize("bad", [object(), {1, 2}, datetime.now(UTC), b"bytes"])
def test_non_json_arguments_are_refused_with_a_type_error(bad: object) -> None:
    payload = wire.build("m.f", [bad], {}, queue="q", retry=True, now=1.0)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        wire.encode(payload, 10_000)


def test_nan_is_refused() -> None:
    with pytest.raises(SerializationError):
        wire.encode(wire.build("m.f", [float("nan")], {}, queue="q", retry=True, now=1.0), 1000)


def test_oversized_payload_is_refused_with_a_value_error() -> None:
    payload = wire.build("m.f", ["x" * 2000], {}, queue="q", retry=True, now=1.0)
    with pytest.raises(ValueError, match="max_payload_bytes") as info:
        wire.encode(payload, 1000)
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
        wire.decode(raw, 10_000_000)


def test_decode_refuses_oversized_raw_without_parsing() -> None:
    with pytest.raises(UnparseablePayload, match="over the limit"):
        wire.decode(b'{"jid": "x", "class": "m.f"}' + b" " * 100, 50)


def test_jid_of_reads_what_it_can() -> None:
    assert wire.jid_of(json.dumps({"jid": "abc"}).encode()) == "abc"
    assert wire.jid_of(b"garbage") is None
    assert wire.jid_of(b'{"jid": 5}') is None


# -- the payload's fields ----------------------------------------------------------------


def test_field_names_are_the_payload_keys() -> None:
    """``Field`` (what the accessors take) and ``Payload`` (what mypy checks a payload
    against) name the same fields, once each."""
    names = get_args(wire.Field)
    assert len(names) == len(set(names))
    assert set(names) == wire.Payload.__required_keys__ | wire.Payload.__optional_keys__
    assert wire.Payload.__required_keys__ == {"jid", "class", "args", "kwargs"}


def test_every_field_the_package_writes_is_declared() -> None:
    """The writers' entries hold only ``Payload`` fields (mypy checks the literals; this
    checks what they build at run time)."""
    new = wire.build("m.f", [1], {"k": 2}, queue="q", retry=3, now=10.0)
    policy = outcome.RetryDelays(1.0, 10.0)
    failed = outcome.after_failure(new, ValueError("boom"), now=11.0, policy=policy).entry
    again = outcome.after_failure(failed, ValueError("boom"), now=12.0, policy=policy).entry
    interrupted = outcome.interrupt(wire.encode(failed, 10_000), RuntimeError("x"), now=13.0)
    raw = wire.encode(new, 10_000)
    entries: list[Mapping[str, object]] = [
        new, failed, again, interrupted.entry,
        wire.unparseable_entry(b"\xff", queue="q", reason="not JSON", now=1.0),
        process_died_entry(raw, max_orphanings=3, identity="h:1:a", info={"pid": 1}, now=2.0),
        process_died_entry(b"\xff", max_orphanings=3, identity="h:1:a", info=None, now=2.0),
    ]
    declared = set(get_args(wire.Field))
    for entry in entries:
        assert set(entry) <= declared


def test_text_fields_are_strings_or_none() -> None:
    payload = {"jid": "j1", "class": 5, "queue": None, "periodic": ["p"]}
    assert wire.jid(payload) == "j1"
    assert wire.name(payload) is None
    assert wire.name({"class": "m.f"}) == "m.f"
    assert wire.text(payload, "queue") is None
    assert wire.text(payload, "periodic") is None
    assert wire.text({}, "unique_digest") is None


@pytest.mark.parametrize(("stored", "read"), [
    (0, 0), (3, 3), (-1, -1), (True, None), (False, None), (1.0, None), ("2", None), (None, None),
])
def test_counts_are_ints_and_never_bools(stored: object, read: int | None) -> None:
    assert wire.count({"retry_count": stored}, "retry_count") == read


@pytest.mark.parametrize(("stored", "read"), [
    (5, 5.0), (1.5, 1.5), (-2, -2.0), (0, 0.0), (True, None), ("5", None), (None, None),
    (math.nan, None), (math.inf, None), (-math.inf, None), (10**400, None),
])
def test_numbers_are_finite_floats(stored: object, read: float | None) -> None:
    assert wire.number({"enqueued_at": stored}, "enqueued_at") == read
    assert wire.finite_number(stored) == read


def test_arguments_read_as_a_list_and_a_dict() -> None:
    assert wire.args_of({"args": [1]}) == [1]
    assert wire.args_of({"args": {"a": 1}}) == []
    assert wire.kwargs_of({"kwargs": {"a": 1}}) == {"a": 1}
    assert wire.kwargs_of({"kwargs": [1]}) == {}
    assert wire.args_of({}) == []
    assert wire.kwargs_of({}) == {}


def test_value_and_has_read_what_is_stored() -> None:
    payload = {"failed_at": None, "error_class": 5}
    assert wire.has(payload, "failed_at")
    assert not wire.has(payload, "retried_at")
    assert wire.value(payload, "error_class") == 5
    assert wire.value(payload, "failed_at", "x") is None  # present: its value, even None
    assert wire.value(payload, "retried_at", "x") == "x"


@pytest.mark.parametrize(("stored", "queue"), [
    ("emails", "emails"), ("a:b.c-d_e", "a:b.c-d_e"), ("q" * 128, "q" * 128),
    ("q" * 129, "fallback"), ("", "fallback"), ("a b", "fallback"), ("é", "fallback"),
    (5, "fallback"), (None, "fallback"),
])
def test_queue_of_is_a_valid_queue_name_or_the_fallback(stored: object, queue: str) -> None:
    assert wire.queue_of({"queue": stored}, "fallback") == queue
    assert wire.queue_of({}, "fallback") == "fallback"
    assert wire.queue_of(None, "fallback") == "fallback"


def test_no_size_limit_refuses_nothing() -> None:
    payload = wire.build("m.f", ["x" * 100_000], {}, queue="q", retry=True, now=1.0)
    raw = wire.encode(payload, wire.NO_SIZE_LIMIT)
    assert wire.decode(raw, wire.NO_SIZE_LIMIT) == payload
