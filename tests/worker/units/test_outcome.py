import random

from cogworker_async.errors import UnknownJob
from cogworker_async.jobs import wire
from cogworker_async.jobs.status import Ended
from cogworker_async.jobs.wire import Payload
from cogworker_async.worker import outcome
from cogworker_async.worker.outcome import Ack, Filing, RetryDelays

POLICY = RetryDelays(base_delay=10.0, max_delay=1000.0)


def payload(**extra: object) -> dict[str, object]:
    return {"jid": "j1", "class": "m.f", "args": [], "kwargs": {}, "queue": "default",
            "retry": 2, **extra}


def test_first_failure_retries_with_count_zero_and_records_the_error() -> None:
    filed = outcome.after_failure(payload(), ValueError("bad"), now=100.0, policy=POLICY,
                                  rng=random.Random(0))
    assert filed.target == "retry"
    assert not filed.terminal
    assert 7.5 <= filed.delay <= 12.5
    assert filed.entry["retry_count"] == 0
    assert filed.entry["error_class"] == "ValueError"
    assert filed.entry["error_message"] == "bad"
    assert filed.entry["failed_at"] == 100.0
    assert "retried_at" not in filed.entry


def test_retries_used_up_goes_to_dead() -> None:
    second = outcome.after_failure(payload(retry_count=0, failed_at=1.0), ValueError("x"),
                                   now=200.0, policy=POLICY)
    assert (second.target, second.entry["retry_count"]) == ("retry", 1)
    assert second.entry["failed_at"] == 1.0
    assert second.entry["retried_at"] == 200.0
    third = outcome.after_failure(payload(retry_count=1), ValueError("x"), now=300.0,
                                  policy=POLICY)
    assert (third.target, third.terminal, third.delay) == ("dead", True, 0.0)


def test_retry_false_and_zero_go_straight_to_dead() -> None:
    for retry in (False, 0):
        filed = outcome.after_failure(payload(retry=retry), ValueError("x"), now=1.0,
                                      policy=POLICY)
        assert filed.target == "dead"


def test_terminal_errors_go_to_dead_whatever_the_retries() -> None:
    filed = outcome.after_failure(payload(retry=True), UnknownJob("nope"), now=1.0,
                                  policy=POLICY, terminal=True)
    assert filed.target == "dead"
    assert filed.entry["error_class"] == "UnknownJob"


def test_the_original_payload_is_not_modified() -> None:
    original = payload()
    outcome.after_failure(original, ValueError("x"), now=1.0, policy=POLICY)
    assert "retry_count" not in original


def test_a_huge_error_message_is_truncated() -> None:
    filed = outcome.after_failure(payload(), ValueError("x" * 50_000), now=1.0, policy=POLICY)
    assert len(filed.entry["error_message"]) == outcome.MAX_ERROR_MESSAGE


def test_unparseable_keeps_the_exact_bytes() -> None:
    import base64

    raw = b"\xff\xfenot json"
    filed = outcome.unparseable(raw, queue="q", reason="not JSON", now=5.0)
    assert filed.target == "dead"
    assert filed.terminal
    assert base64.b64decode(filed.entry["raw_payload_base64"]) == raw
    assert filed.entry["error_class"] == "UnparseablePayload"


def test_interrupt_refiles_from_the_payload_as_fetched() -> None:
    import json

    raw = json.dumps(payload(retry=3, retry_count=0)).encode()
    filed = outcome.interrupt(raw, RuntimeError("logging bug"), now=9.0)
    assert filed.target == "retry"
    assert filed.delay == outcome.INTERRUPT_DELAY
    assert (filed.entry["interrupted_count"], filed.entry["retry_count"]) == (1, 1)
    assert filed.entry["error_message"] == "logging bug"


def test_interrupt_without_retries_left_goes_to_dead() -> None:
    import json

    for fields in ({"retry": False}, {"retry": 2, "retry_count": 1}):
        filed = outcome.interrupt(json.dumps(payload(**fields)).encode(), RuntimeError("x"),
                                  now=1.0)
        assert filed.target == "dead", fields


def test_interrupt_past_the_limit_goes_to_dead() -> None:
    import json

    raw = json.dumps(payload(retry=True, interrupted_count=outcome.MAX_INTERRUPTS)).encode()
    assert outcome.interrupt(raw, RuntimeError("x"), now=1.0).target == "dead"


def test_interrupt_of_unreadable_bytes_keeps_them() -> None:
    filed = outcome.interrupt(b"\xff garbage", RuntimeError("x"), now=1.0)
    assert filed.target == "dead"
    assert "raw_payload_base64" in filed.entry


# -- expiry: a job past its deadline is not run ----------------------------------------


def _with_deadline(deadline: float, **fields: object) -> Payload:
    payload = wire.build("work", [1], {}, queue="default", retry=True, now=100.0,
                        expires_at=deadline)
    payload.update(fields)  # type: ignore[typeddict-item]
    return payload


EXPIRY_POLICY = RetryDelays(base_delay=15.0, max_delay=3600.0)


def test_a_job_before_or_at_its_deadline_may_run() -> None:
    assert outcome.expired(_with_deadline(200.0), now=150.0, policy=EXPIRY_POLICY) is None
    assert outcome.expired(_with_deadline(200.0), now=200.0, policy=EXPIRY_POLICY) is None
    no_deadline = wire.build("work", [], {}, queue="default", retry=True, now=100.0)
    assert outcome.expired(no_deadline, now=1e12, policy=EXPIRY_POLICY) is None


def test_a_job_past_its_deadline_goes_to_dead_as_expired_whatever_its_retries() -> None:
    filed = outcome.expired(_with_deadline(200.0), now=200.5, policy=EXPIRY_POLICY)
    assert isinstance(filed, Filing)
    assert (filed.target, filed.terminal, filed.delay) == ("dead", True, 0.0)
    assert filed.entry["error_class"] == "Expired"
    assert filed.entry["error_message"] == "not started by its deadline: 0.500s late"
    assert filed.entry["expires_at"] == 200.0


def test_dead_on_expiry_false_drops_it_and_its_record_says_cancelled() -> None:
    dropped = outcome.expired(_with_deadline(200.0, dead_on_expiry=False, keep_result=60.0),
                              now=300.0, policy=EXPIRY_POLICY)
    assert dropped == Ack(Ended("cancelled", keep=60.0))


def test_a_deadline_that_is_not_a_number_is_no_deadline() -> None:
    """Written by hand or by another client: never a reason to lose the job."""
    odd = _with_deadline(200.0)
    odd["expires_at"] = "soon"  # type: ignore[typeddict-item]
    assert outcome.expired(odd, now=1e12, policy=EXPIRY_POLICY) is None
