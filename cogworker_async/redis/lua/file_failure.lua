-- file_failure: a job failed (or cannot run): file it in retry or dead, then take it
-- off the in-progress list; its status record says so in the same step.
-- KEYS[1] in-progress list           KEYS[2] destination zset (retry or dead)
-- KEYS[3] the job's status record (optional: an unreadable job has none)
-- ARGV[1] raw job as fetched         ARGV[2] entry to file (the updated payload)
-- ARGV[3] delay in seconds: score = Redis TIME + delay
-- ARGV[4] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[5] dead_max_jobs, ARGV[6] dead_max_age (s): when the destination is the dead set,
-- it is trimmed to them after the filing ("0": another destination, no trim)
-- ARGV[7] the record's state ("retrying", "dead")   ARGV[8] its TTL (s, after the delay)
-- ARGV[9] the error ("Class: message")   ARGV[10] the attempt it names (a retry: the
-- next run's number; dead: the last run's)
-- ARGV[11] the channel a result's waiters listen on ("": publish nothing)
-- Returns 1 if filed, 0 if the job was not in progress (already settled: a no-op).
-- Written before removed: an error halfway leaves a duplicate, never a loss. Safe to
-- run twice (the LPOS guard).
-- Model: file_failure (model/protocol.pml); upholds: no_job_lost, jobs_end
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local now = redis_now(ARGV[4])
redis.call("ZADD", KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
redis.call("LREM", KEYS[1], 1, ARGV[1])
trim_dead(KEYS[2], now, ARGV[5], ARGV[6])
if KEYS[3] and ARGV[7] then
  if ARGV[7] == "dead" then
    mark_record(KEYS[3], ARGV[8], "cancel", false, "state", "dead", "finished_at", now, "error", ARGV[9],
                "attempt", ARGV[10])
    if ARGV[11] and ARGV[11] ~= "" then wake(ARGV[11], "dead") end
  else
    mark_record(KEYS[3], tonumber(ARGV[8]) + tonumber(ARGV[3]), "state", "retrying",
                "error", ARGV[9], "attempt", ARGV[10],
                "progress", false, "info", false) -- the next run reports its own
  end
end
return 1
