-- enqueue_unique: take a unique job's lock and push (or schedule) the job, in one step.
-- KEYS[1] the lock (unique:<digest>)   KEYS[2] the queue list, or the schedule zset
-- KEYS[3] the job's status record (absent: no records, ``track_jobs=False``)
-- (all in the queue's slot; the caller registers the queue's name)
-- ARGV[1] jid (the lock's owner)       ARGV[2] lock TTL (ms)
-- ARGV[3] "now" (push on the queue), "at" (ARGV[4] is an epoch time) or "in" (ARGV[4]
-- is a delay from Redis TIME)
-- ARGV[5] queue name   ARGV[6] wake channel   ARGV[7] caller clock   ARGV[8] raw job
-- ARGV[9] the record's TTL (s, from the due time)   ARGV[10] the job's name
-- ARGV[11] "1": the caller chose the jid: refused while it is alive (as enqueue.lua)
-- ARGV[12] the batch the job joins ("" or absent: none; as enqueue.lua)
-- ARGV[13] "throttle": KEYS[1] is a throttle's window (``options(throttle=S)``), not a
-- unique lock: it lasts its TTL whatever becomes of the job, so the record does not name
-- it (a cancel of the job leaves the window as it is)
-- Returns 1 if pushed, 0 if another jid holds the lock or the chosen jid is alive (a
-- duplicate: nothing written); {1, error} if pushed but the wake-up could not be published.
-- The record names the lock (``lock``): a cancel of the job, which never runs to release
-- it, releases it (cancel.lua).
-- One step: a crash can never leave a lock without its job, nor a job without its lock.
-- Model: none — a unique lock around enqueue's push (dedup not modelled)
local member_of = (ARGV[12] and ARGV[12] ~= "") and ARGV[12] or false
local lock = ARGV[13] ~= "throttle" and KEYS[1] or false
if ARGV[11] == "1" and KEYS[3] then
  if record_alive(KEYS[3]) then return 0 end
end
-- The destination checked before the lock is taken: a lock (or a throttle's window)
-- taken for a push that then fails would refuse the caller's retry, and the job be lost.
if ARGV[3] == "now" then
  if not queue_library().writable(KEYS[2], ARGV[8]) then
    return redis.error_reply("WRONGTYPE a list of queue " .. ARGV[5] .. " holds another type")
  end
else
  local card = redis.pcall("ZSCORE", KEYS[2], ARGV[8]) -- a read of its type (ACL: +zscore)
  if type(card) == "table" and card.err then
    return redis.error_reply("WRONGTYPE the schedule of queue " .. ARGV[5] .. " is not a zset")
  end
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", tonumber(ARGV[2])) then
  return 0
end
if ARGV[11] == "1" and KEYS[3] then drop_record(KEYS[3]) end
local now = redis_now(ARGV[7])
if ARGV[3] == "now" then
  queue_library().push(KEYS[2], ARGV[8], false, redis.call) -- at its priority (_queue.lua)
  if KEYS[3] then
    new_record(KEYS[3], ARGV[9], "state", "queued", "name", ARGV[10], "enqueued_at", ARGV[7],
                "lock", lock, "batch", member_of)
  end
  local refused = wake(ARGV[6], ARGV[5])
  if refused then return {1, refused} end
  return 1
end
local score = tonumber(ARGV[4])
if ARGV[3] == "in" then
  score = now + score
end
redis.call("ZADD", KEYS[2], score, ARGV[8])
if KEYS[3] then
  new_record(KEYS[3], tonumber(ARGV[9]) + math.max(0, score - now), "state", "scheduled",
             "name", ARGV[10], "enqueued_at", ARGV[7], "lock", lock, "batch", member_of)
end
return 1
