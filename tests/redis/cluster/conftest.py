from __future__ import annotations

import pytest

from tests.cluster_harness import ClusterProcess


@pytest.fixture
def cluster_url(redis_cluster: ClusterProcess) -> str:
    """The session's cluster (``redis_cluster`` in tests/conftest.py)."""
    return redis_cluster.url
