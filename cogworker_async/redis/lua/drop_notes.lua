-- drop_notes: batch notes the relay has applied to their batches (batch_apply) leave
-- their queue's notes list: applied first, dropped second, so a relay that dies between the
-- two applies them again, which changes nothing.
-- KEYS[1] the queue's batch notes list (``Keys.batch_notes``)
-- ARGV[1..] the notes, each as read
-- Returns how many were dropped. Safe to run twice (a note gone is not dropped again;
-- two copies of one note are one end, and each LREM takes one).
-- Model: drop_notes (model/protocol.pml); upholds: batch_ends, waits_end
local dropped = 0
for i = 1, #ARGV do
  dropped = dropped + redis.call("LREM", KEYS[1], 1, ARGV[i])
end
return dropped
