import random

import pytest

from cogworker_async.jobs import retries


@pytest.mark.parametrize(
    ("retry", "expected"),
    [(True, 25), (None, 25), (False, 0), (0, 0), (5, 5), ("5", 0), (-1, 0), (2.5, 0)],
)
def test_max_retries_reads_the_retry_field(retry: object, expected: int) -> None:
    assert retries.max_retries(retry) == expected


def test_delay_doubles_with_jitter_within_a_quarter() -> None:
    rng = random.Random(1)
    for count in range(8):
        expected = 15.0 * 2**count
        value = retries.delay(count, base=15.0, cap=1e9, rng=rng)
        assert expected * 0.75 <= value <= expected * 1.25


def test_delay_is_capped_and_never_negative() -> None:
    assert retries.delay(200, base=15.0, cap=3600.0) <= 3600.0
    assert retries.delay(0, base=0.0, cap=10.0) == 0.0


def test_jitter_spreads_retries_of_one_batch() -> None:
    rng = random.Random(7)
    values = {round(retries.delay(3, base=15.0, cap=1e9, rng=rng), 3) for _ in range(20)}
    assert len(values) > 10
