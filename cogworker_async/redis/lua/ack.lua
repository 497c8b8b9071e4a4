-- ack: jobs ran (or were filed in dead unparsed); forget them.
-- KEYS[1] in-progress list of this identity
-- KEYS[1 + i] orphan counter of the i-th job's jid (cleared if it was there: it got to finish)
-- ARGV[i] the i-th raw job, exactly as fetched
-- Returns how many were removed; 0 for a job no longer there (already settled,
-- not an error). Safe to run twice.
-- A counter is cleared only by the ack that found its job: a late ack from a process
-- declared dead (fenced after a partition) finds nothing, and must not reset the count
-- of the copy recovered elsewhere (the poison rule would then allow one crash more).
local removed = 0
for i = 1, #ARGV do
  local here = redis.call("LREM", KEYS[1], 1, ARGV[i])
  removed = removed + here
  if here > 0 and KEYS[i + 1] then redis.pcall("DEL", KEYS[i + 1]) end
end
return removed
