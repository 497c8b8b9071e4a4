"""What ``taskiq worker taskiq_app:broker`` imports: the broker of ``taskiq_peer.py``
(``ListQueueBroker`` or ``RedisStreamBroker`` by ``BENCH_MODE``, the tasks ``noop``,
``sleep`` and ``probe`` registered on it). ``taskiq worker`` runs uvloop itself when it
is installed.
"""

from __future__ import annotations

import common
from taskiq_peer import TaskiqPeer

broker = TaskiqPeer(common.app_args()).broker
