"""What ``cogworker-async run cogworker_app:app`` imports: the ``App`` of
``cogworker_peer.py`` (same jobs, same settings), built from the driver's environment
(``common.app_args``). The CLI picks uvloop itself when it is installed.
"""

from __future__ import annotations

import common
from cogworker_peer import CogworkerPeer

app = CogworkerPeer(common.app_args()).app
