from cogworker_async.jobs.status import SUCCEEDED
from cogworker_async.worker import handover
from cogworker_async.worker.outcome import Ack, Filing


def test_acks_are_dropped_and_failures_handed_over() -> None:
    filed = Filing("dead", {"jid": "b"}, 0.0, terminal=True)
    result = handover.plan({b"a": Ack(), b"b": filed})
    assert result.drop == [(b"a", SUCCEEDED)]
    assert result.hand_over == [(b"b", filed)]


def test_nothing_pending_means_nothing_to_hand_over() -> None:
    result = handover.plan({})
    assert (result.drop, result.hand_over) == ([], [])
