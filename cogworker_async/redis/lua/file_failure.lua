-- file_failure: a job failed (or cannot run): file it in retry or dead, then take it
-- off the in-progress list.
-- KEYS[1] in-progress list           KEYS[2] destination zset (retry or dead)
-- ARGV[1] raw job as fetched         ARGV[2] entry to file (the updated payload)
-- ARGV[3] delay in seconds: score = Redis TIME + delay
-- ARGV[4] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[5] dead_max_jobs, ARGV[6] dead_max_age (s): when the destination is the dead set,
-- it is trimmed to them after the filing ("0": another destination, no trim)
-- Returns 1 if filed, 0 if the job was not in progress (already settled: a no-op).
-- Written before removed: an error halfway leaves a duplicate, never a loss. Safe to
-- run twice (the LPOS guard).
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local now = redis_now(ARGV[4])
redis.call("ZADD", KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
redis.call("LREM", KEYS[1], 1, ARGV[1])
trim_dead(KEYS[2], now, ARGV[5], ARGV[6])
return 1
