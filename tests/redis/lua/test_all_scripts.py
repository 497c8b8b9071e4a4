"""Every script file loads (a syntax error fails here, not in a worker)."""

import pytest

from cogworker_async.redis.scripts import PRELUDES, SCRIPT_NAMES, file_text, source
from cogworker_async.redis.store import Store


@pytest.mark.parametrize("name", SCRIPT_NAMES)
async def test_script_loads_and_documents_its_contract(store: Store, name: str) -> None:
    sha = await store.client.script_load(source(name))
    assert len(sha) == 40
    header = file_text(name).splitlines()[0]
    assert header.startswith(f"-- {name}:"), "each script opens with its contract"


@pytest.mark.parametrize("file", sorted(set(PRELUDES.values())))
async def test_a_shared_helper_is_in_each_script_that_calls_it_and_only_there(
    store: Store, file: str
) -> None:
    functions = [function for function, home in PRELUDES.items() if home == file]
    for name in SCRIPT_NAMES:
        calls = any(f"{function}(" in file_text(name) for function in functions)
        assert (file_text(file) in source(name)) == calls, name
        assert source(name).count(file_text(file)) == int(calls), "a helper file goes in once"
