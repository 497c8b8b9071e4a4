-- ack: jobs ran (or were filed in dead unparsed); forget them.
-- KEYS[1] in-progress list of this identity
-- KEYS[1 + i] orphan counter of the i-th job's jid (cleared: it got to finish)
-- ARGV[i] the i-th raw job, exactly as fetched
-- Returns how many were removed; 0 for a job no longer there (already settled,
-- not an error). Safe to run twice.
local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call("LREM", KEYS[1], 1, ARGV[i])
  if KEYS[i + 1] then redis.pcall("DEL", KEYS[i + 1]) end
end
return removed
