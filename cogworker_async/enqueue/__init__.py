"""The caller's side: the client, the enqueue handles, lookups by jid."""
