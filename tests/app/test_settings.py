import pytest

from cogworker_async import App, Settings
from cogworker_async.settings import check_queue_name


def test_defaults_follow_the_public_contract() -> None:
    s = Settings()
    assert (s.namespace, s.concurrency, s.shutdown_timeout) == ("cogworker", 10, 25.0)
    assert (s.heartbeat_interval, s.orphan_threshold, s.recovery_interval) == (5.0, 20.0, 5.0)
    assert s.max_orphanings == 3
    assert s.max_payload_bytes == 512 * 1024


def test_weighted_queues() -> None:
    s = Settings(queues=[("a", 3), ("b", 1)])
    assert s.weighted
    assert s.queue_names == ["a", "b"]
    assert not Settings(queues=["a", "b"]).weighted


@pytest.mark.parametrize(
    "bad",
    [
        {"concurrency": 0},
        {"queues": []},
        {"queues": "default"},
        {"queues": [("a", 0)]},
        {"namespace": ""},
        {"shutdown_timeout": -1},
        {"orphan_threshold": 1.0, "heartbeat_interval": 2.0},
        {"orphan_threshold": 1.5, "heartbeat_interval": 1.0},  # one late beat: dead
        {"fetch": "fast"},
        {"prefetch": -1},
    ],
)
def test_bad_settings_are_refused_clearly(bad: dict[str, object]) -> None:
    with pytest.raises((TypeError, ValueError)):
        Settings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "a b", "{tag}", "a*", "x" * 129, "tab\t"])
def test_queue_names_that_would_break_keys_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        check_queue_name(name)


def test_unknown_setting_names_are_refused_at_app_creation() -> None:
    with pytest.raises(TypeError):
        App("redis://localhost", concurency=5)


def test_the_orphan_threshold_may_span_exactly_two_beats() -> None:
    """The bound is inclusive: 2 beats' worth is the shortest threshold allowed, and the
    refusal says why."""
    assert Settings(orphan_threshold=2.0, heartbeat_interval=1.0).orphan_threshold == 2.0
    with pytest.raises(ValueError, match="one late beat"):
        Settings(orphan_threshold=1.9, heartbeat_interval=1.0)
