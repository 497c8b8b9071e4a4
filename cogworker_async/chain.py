"""Chains: jobs that run one after another — ``jobs.chain(a.s(1), b.s(), c.s())``.

    jids = await jobs.chain(fetch.s(url), parse.s(), store.s(), pass_result=True).enqueue()

Each job after the first runs after the one before it succeeded (``options(after=)``,
``dependents.py``): a failure stops the chain there (the jobs after it are cancelled, as
``on_parent_failure="cancel"`` does). With ``pass_result`` each job takes the return
value of the one before as its first argument, so every job but the last keeps its
result (``CHAIN_KEEP_RESULT``, unless its signature says how long).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from cogworker_async.signature import Signature, check

CHAIN_KEEP_RESULT: Final = 86400.0
"""Seconds a chained job's result is kept for the next one (with ``pass_result``), when
its signature keeps none: the relay reads it within a poll interval of the job's end;
a day covers a fleet that was down meanwhile."""


class Chain:
    """Signatures to enqueue as a chain (``App.chain``)."""

    def __init__(self, signatures: Sequence[Signature], *, pass_result: bool = False) -> None:
        if not signatures:
            raise ValueError("a chain needs at least one signature")
        if not isinstance(pass_result, bool):
            raise TypeError(f"pass_result must be True or False, not {pass_result!r}")
        for index, sig in enumerate(signatures):
            # With pass_result every step but the first takes the result before it as its
            # first argument: its signature must fit with it (checked here, at the call).
            check(sig, f"chain step {index + 1}", takes_result=pass_result and index > 0)
        self.signatures = list(signatures)
        self.pass_result = pass_result

    async def enqueue(self) -> list[str]:
        """Enqueue every step, each after the one before; their jids, in order. A step
        refused (its chosen jid alive, a unique duplicate) is a ValueError: the steps
        before it are enqueued and run, and nothing after it was."""
        jids: list[str] = []
        last = len(self.signatures) - 1
        for index, sig in enumerate(self.signatures):
            enqueuer = sig.enqueuer
            if self.pass_result and index < last and enqueuer.job_options.keep_result is None:
                enqueuer = enqueuer.options(keep_result=CHAIN_KEEP_RESULT)
            if jids:  # after the step before, and after what its own options name
                enqueuer = enqueuer.options(after=[*enqueuer.job_options.after, jids[-1]],
                                            pass_result=self.pass_result)
            jid = await enqueuer.enqueue(*sig.args, **sig.kwargs)
            if jid is None:
                raise ValueError(f"chain step {index + 1} ({sig!r}) was refused (its jid "
                                 f"is alive, or a unique duplicate); enqueued: {jids!r}")
            jids.append(jid)
        return jids

    def __repr__(self) -> str:
        return " | ".join(repr(sig) for sig in self.signatures)
