"""Hypothesis settings for the property tests: bounded and reproducible.

The ``ci`` profile (the default) keeps the whole directory well under a minute on a
shared 2-core machine and draws the same examples on every run (``derandomize``), so a
failure in CI is a failure on a laptop too. ``HYPOTHESIS_PROFILE=thorough`` draws ten
times as many random examples for a hunt by hand; ``HYPOTHESIS_PROFILE=unshrunk`` reports
a failure as drawn, at once, without minimising it; ``quick`` (``make test-fast``, the edit
loop) draws a fifth of ``ci``'s examples, the same ones on every run, and ``share`` gives
a slow table-driven check a fifth of its rows there too. No example
database: a run never replays examples saved by an earlier one, so every machine draws
the same.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final, TypeVar

from hypothesis import HealthCheck, Phase, settings

T = TypeVar("T")

PROFILE_ENV: Final = "HYPOTHESIS_PROFILE"
PROFILE: Final = os.environ.get(PROFILE_ENV, "ci")
THOROUGH_FACTOR: Final = 10
QUICK_DIVISOR: Final = 5

# Fixtures (the App, its namespace, the HTTP client) are built once per test and shared
# by its examples on purpose: each example clears what it wrote. Example data can be
# large (deep nesting, long byte strings) by design.
_SHARED: Final = settings(
    deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.large_base_example])

settings.register_profile("ci", _SHARED, max_examples=100, derandomize=True)
settings.register_profile("thorough", _SHARED, max_examples=100 * THOROUGH_FACTOR)
settings.register_profile("quick", _SHARED, max_examples=100 // QUICK_DIVISOR,
                          derandomize=True)
settings.register_profile("unshrunk", _SHARED, max_examples=100, derandomize=True,
                          phases=[Phase.explicit, Phase.generate])
settings.load_profile(PROFILE)


def share(items: Sequence[T]) -> list[T]:
    """``items`` for a slow table-driven check (a planting per row): all of them, but
    every fifth under ``quick`` (``make test-fast``), as the property tests draw a fifth."""
    return list(items[::QUICK_DIVISOR] if PROFILE == "quick" else items)


def examples(count: int) -> int:
    """``count`` examples for a slow property (one that starts a worker or renders
    pages), scaled with the ``thorough`` and ``quick`` profiles like every other property."""
    if PROFILE == "thorough":
        return count * THOROUGH_FACTOR
    if PROFILE == "quick":
        return max(1, count // QUICK_DIVISOR)
    return count
