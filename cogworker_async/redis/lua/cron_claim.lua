-- cron_claim: enqueue a periodic job's tick once, however many processes tick.
-- KEYS[1] hash periodic name -> last claimed tick (epoch s), in the queue's slot
-- KEYS[2] the queue list             KEYS[3] the job's status record
-- ARGV[1] periodic name   ARGV[2] tick (epoch s)   ARGV[3] queue name
-- ARGV[4] wake channel    ARGV[5] raw job
-- ARGV[6] the record's TTL (s)       ARGV[7] the job's name   ARGV[8] enqueued_at
-- Returns {1, the tick claimed before it or ""} if this call claimed the tick and pushed
-- the job (the caller tells the log which ticks in between nobody claimed), 0 if the tick
-- (or a later one) was already claimed. Claim and push in one step: a claimed tick always
-- has its job.
-- Model: none — one enqueue per periodic tick (dedup not modelled)
local before = redis.call("HGET", KEYS[1], ARGV[1]) or ""
local last = tonumber(before)
if last and last >= tonumber(ARGV[2]) then
  return 0
end
if not queue_library().writable(KEYS[2], ARGV[5]) then -- before the tick is claimed
  return redis.error_reply("WRONGTYPE a list of queue " .. ARGV[3] .. " holds another type")
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
queue_library().push(KEYS[2], ARGV[5], false, redis.call) -- at its priority (_queue.lua)
if KEYS[3] then
  mark_record(KEYS[3], ARGV[6], "state", "queued", "name", ARGV[7],
              "enqueued_at", ARGV[8])
end
wake(ARGV[4], ARGV[3])
return {1, before}
