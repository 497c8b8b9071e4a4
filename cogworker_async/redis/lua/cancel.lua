-- cancel: cancel one job by its status record, whatever state it is in, in one step.
-- KEYS[1] the job's status record (in its queue's slot)
-- ARGV[1] the prefix of the cancel sets (``<prefix><identity>``: the jids a process is
-- asked to stop, in the same slot)   ARGV[2] the caller's clock (epoch s)
-- ARGV[3] a cancel set's TTL (s)      ARGV[4] the channel the job's waiters listen on
-- ARGV[5] the jid
-- Returns what it did:
--   "unknown"   no record (never enqueued, or its record expired): nothing done;
--   "finished"  it had ended already (succeeded, dead, cancelled): nothing done (a
--               repeated cancel, while the cancelled job's copy is still somewhere,
--               answers as the first did: "cancelled" or "stopping");
--   "cancelled" it was queued, scheduled or retrying: it will never run. Its copy is
--               not looked for (that would be a scan): the record's ``cancel`` makes
--               the next script that moves it (fetch, promote, requeue, give_back)
--               drop it unrun;
--   "stopping"  it is running: its process finds the jid in its cancel set (it polls
--               it) and stops the job; should the process die first, recovery drops the
--               job instead of requeueing it (the record's ``cancel`` again).
local state = redis.pcall("HGET", KEYS[1], "state")
if type(state) ~= "string" then return "unknown" end -- none, or not a record (wrong type)
if redis.call("HGET", KEYS[1], "cancel") == "1" then
  if state == "running" then return "stopping" end
  return "cancelled"
end
if state == "succeeded" or state == "dead" or state == "cancelled" then
  return "finished"
end
local now = redis_now(ARGV[2])
if state == "running" then
  local by = redis.call("HGET", KEYS[1], "by")
  redis.call("HSET", KEYS[1], "cancel", "1", "cancel_at", now)
  if by then
    local set = ARGV[1] .. by
    redis.call("SADD", set, ARGV[5])
    redis.call("EXPIRE", set, tonumber(ARGV[3]))
  end
  return "stopping"
end
redis.call("HSET", KEYS[1], "cancel", "1", "state", "cancelled", "finished_at", now)
wake(ARGV[4], "cancelled")
return "cancelled"
