"""Review of issue 42's option values (``jobs/keywords.py``, ``unique.py``, ``groups.py``,
``app.py``): a value and its flat spelling write the same payload, and a registration
that is refused declares nothing on the App."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from cogworker_async import App, ConfigurationError, Group, Unique


async def _recorded(app: App, enqueuer: Any) -> dict[str, Any]:
    """The payload one enqueue writes (the fake keeps it as pushed), without the fields
    each enqueue makes new."""
    with app.testing.fake() as testing:
        await enqueuer.enqueue("t-1")
        [job] = testing.enqueued()
    return {name: value for name, value in job.payload.items()
            if name not in ("jid", "created_at", "enqueued_at")}


@pytest.mark.parametrize("where", ["decorator", "options"])
async def test_unique_value_and_flat_spelling_write_the_same_payload(
    make_app: Callable[..., App], where: str,
) -> None:
    """``dedup=Unique(ttl=60)`` wrote ``"unique_ttl":60.0`` where ``unique_ttl=60``
    writes ``60`` (unique.Unique.fields made the ttl a float): the wire format is the
    same whichever spelling (issue 42: "Wire format unchanged")."""
    raws = []
    for spelling in ({"dedup": Unique("until_started", ttl=60)},
                     {"unique": "until_started", "unique_ttl": 60}):
        app = make_app()

        @app.job(name="report", **(spelling if where == "decorator" else {}))
        async def report(tenant: str) -> None: ...

        enqueuer = report.options(**spelling) if where == "options" else report
        raws.append(json.dumps(await _recorded(app, enqueuer)))
    assert raws[0] == raws[1]
    assert '"unique_ttl": 60,' in raws[0] or raws[0].endswith('"unique_ttl": 60}')


async def test_a_refused_registration_declares_no_group_limit(
    make_app: Callable[..., App],
) -> None:
    """``Group(limit=)`` on a decorator whose registration is refused (the name is
    another function's) left the limit in the App's settings: every group of the queue
    was then limited, by a job that does not exist."""
    app = make_app()

    @app.job(name="report")
    async def report(tenant: str) -> None: ...

    async def other(tenant: str) -> None: ...

    with pytest.raises(ConfigurationError, match="two jobs are registered"):
        app.job(name="report", group=Group(lambda tenant: tenant, limit=1))(other)
    assert dict(app.settings.group_limits) == {}
    assert app.registry["report"].func is report.definition.func


async def test_a_group_limit_is_declared_by_a_registration_that_holds(
    make_app: Callable[..., App],
) -> None:
    """The other side: a registration that holds declares its limit, on the App and on
    the client its calls check against."""
    app = make_app()

    @app.job(name="report", group=Group(lambda tenant: tenant, limit=2))
    async def report(tenant: str) -> None: ...

    assert dict(app.settings.group_limits) == {"default": 2}
    assert report.options(group=Group("t", limit=2)).job_options.group == "t"
