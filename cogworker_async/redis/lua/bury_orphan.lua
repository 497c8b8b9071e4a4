-- bury_orphan: a job parked in repeat_orphans (its process died running it more than
-- max_orphanings times) is filed in its queue's dead set.
-- KEYS[1] repeat_orphans list        KEYS[2] dead zset
-- KEYS[3] the job's orphan counter   (all in the queue's slot; the failure is counted in
-- the stats by the caller: another slot)
-- ARGV[1] the parked job (must be the list's head)   ARGV[2] its dead entry
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] dead_max_jobs, ARGV[5] dead_max_age (s): the dead set is trimmed to them
-- KEYS[4] the job's status record (optional)   ARGV[6] its TTL (s)   ARGV[7] the error
-- Returns 1 if buried, 0 if the head is another job (someone else buried it first).
-- Head only: the caller walks the list in order. Written before removed.
-- Model: none — the poison rule (max_orphanings); the model bounds crashes instead
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  return 0
end
local now = redis_now(ARGV[3])
redis.call("ZADD", KEYS[2], now, ARGV[2])
redis.call("LPOP", KEYS[1])
trim_dead(KEYS[2], now, ARGV[4], ARGV[5])
redis.pcall("DEL", KEYS[3])
if KEYS[4] then
  mark_record(KEYS[4], ARGV[6], "cancel", false, "state", "dead", "finished_at", now, "error", ARGV[7])
end
return 1
