"""Every script file loads (a syntax error fails here, not in a worker)."""

import pytest

from cogworker_async.redis.scripts import SCRIPT_NAMES, source
from cogworker_async.redis.store import Store


@pytest.mark.parametrize("name", SCRIPT_NAMES)
async def test_script_loads_and_documents_its_contract(store: Store, name: str) -> None:
    sha = await store.client.script_load(source(name))
    assert len(sha) == 40
    header = source(name).splitlines()[0]
    assert header.startswith(f"-- {name}:"), "each script opens with its contract"
