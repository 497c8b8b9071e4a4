"""An argument JSON cannot carry is refused at the enqueue with the fix in the message:
the usual ones (a datetime, a Decimal, a UUID) name the conversion a caller writes."""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable

import pytest

from cogworker_async import App


@pytest.mark.parametrize(("value", "hint"), [
    (datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC), ".isoformat()"),
    (datetime.date(2026, 1, 2), ".isoformat()"),
    (decimal.Decimal("9.99"), "str(value)"),
    (uuid.UUID(int=1), "str(value)"),
    (datetime.timedelta(minutes=5), ".total_seconds()"),
])
async def test_a_common_non_json_argument_is_refused_with_its_conversion(
    make_app: Callable[..., App], value: object, hint: str,
) -> None:
    jobs = make_app()

    @jobs.job(name="bill")
    async def bill(value: object) -> None: ...

    with pytest.raises(TypeError) as refused:
        await bill.enqueue(value)
    message = str(refused.value)
    assert type(value).__name__ in message
    assert hint in message
