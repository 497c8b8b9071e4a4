-- give_back: a job that never started goes back to the front of its queue (or, if a
-- cancel is waiting for it, is dropped: it will never run).
-- KEYS[1] in-progress list           KEYS[2] the queue it was fetched from (its list: a
-- job with a priority goes to its priority's list, _queue.lua)
-- KEYS[3] the job's status record (optional)
-- ARGV[1] raw job as fetched
-- ARGV[2] the caller's clock (epoch s)   ARGV[3] a cancelled job's record TTL (s)
-- Returns 1 if given back (or dropped), 0 if it was not in progress (a no-op).
-- Written before removed; safe to run twice.
-- Model: give_back (model/protocol.pml); upholds: no_job_lost, cancelled_never_starts
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
if KEYS[3] and cancel_pending(KEYS[3]) then
  redis.call("LREM", KEYS[1], 1, ARGV[1])
  drop_cancelled(KEYS[3], redis_now(ARGV[2]), ARGV[3])
  return 1
end
queue_library().push(KEYS[2], ARGV[1], true, redis.call) -- at its priority (_queue.lua)
redis.call("LREM", KEYS[1], 1, ARGV[1])
if KEYS[3] then
  mark_record(KEYS[3], nil, "by", false, "started_at", false, "state", "queued")
end
return 1
