"""Hypothesis settings for the property tests: bounded and reproducible.

The ``ci`` profile (the default) keeps the whole directory well under a minute on a
shared 2-core machine and draws the same examples on every run (``derandomize``), so a
failure in CI is a failure on a laptop too. ``HYPOTHESIS_PROFILE=thorough`` draws ten
times as many random examples for a hunt by hand. No example database: nothing is
written into the checkout.
"""

from __future__ import annotations

import os
from typing import Final

from hypothesis import HealthCheck, settings

PROFILE_ENV: Final = "HYPOTHESIS_PROFILE"

# Fixtures (the App, its namespace, the HTTP client) are built once per test and shared
# by its examples on purpose: each example clears what it wrote. Example data can be
# large (deep nesting, long byte strings) by design.
_SHARED: Final = {
    "deadline": None,
    "database": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                              HealthCheck.data_too_large, HealthCheck.large_base_example],
}

settings.register_profile("ci", max_examples=100, derandomize=True, **_SHARED)
settings.register_profile("thorough", max_examples=1000, **_SHARED)
settings.load_profile(os.environ.get(PROFILE_ENV, "ci"))
