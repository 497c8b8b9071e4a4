import random
from collections import Counter

from cogworker_async.worker.fetch import weighted_order


def test_every_queue_appears_once() -> None:
    order = weighted_order([("a", 3), ("b", 1), ("c", 1)], random.Random(3))
    assert sorted(order) == ["a", "b", "c"]


def test_weights_decide_how_often_a_queue_comes_first() -> None:
    rng = random.Random(11)
    firsts = Counter(weighted_order([("a", 3), ("b", 1)], rng)[0] for _ in range(4000))
    assert 0.70 < firsts["a"] / 4000 < 0.80
