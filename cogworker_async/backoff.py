"""Retry policy, pure: how many retries a job has, and how long to wait before each."""

from __future__ import annotations

import random
from typing import Final

from cogworker_async.settings import DEFAULT_RETRIES

JITTER: Final = 0.25
"""Each delay is drawn within +/- this fraction, so failed batches don't retry in lockstep."""


def max_retries(retry: object) -> int:
    """What a payload's ``retry`` field allows: True = 25, False = 0, an int = itself.

    A missing field means the default; anything unreadable means no retries (bad data
    is not retried blindly).
    """
    if retry is None or retry is True:
        return DEFAULT_RETRIES
    if retry is False:
        return 0
    if isinstance(retry, int) and retry >= 0:
        return retry
    return 0


def delay(count: int, *, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``count`` (0-based): ``base * 2**count``, capped, jittered."""
    raw = min(cap, base * 2.0 ** min(count, 64))
    spread = (rng or random).uniform(-JITTER, JITTER)
    return max(0.0, min(cap, raw * (1.0 + spread)))
