-- schedule: add jobs to a zset (schedule) to be enqueued at a time.
-- KEYS[1] the zset
-- ARGV[1] "at" (ARGV[2] is an epoch time) or "in" (ARGV[2] is a delay from Redis TIME)
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] dead_max_jobs, ARGV[5] dead_max_age (s): trim the zset to them after adding
-- (when it is the dead set; "0": no trim)
-- ARGV[6] record prefix: new jobs get a status record ("scheduled"); "": none (an entry
-- filed by a basic-fetch worker, whose jobs are not followed past their enqueue)
-- ARGV[7] the records' TTL (s), counted from the due time
-- ARGV[8] "1": the caller chose the jid: refused while it is alive (as enqueue.lua)
-- ARGV[9] queue name   ARGV[10] the jobs' name   ARGV[11] enqueued_at (caller's clock)
-- ARGV[12] the batch the jobs join ("": none; as enqueue.lua)
-- ARGV[13..] jid, raw job pairs
-- Returns how many were added; -1 if a chosen jid was refused (nothing written).
-- Delays count from Redis' clock: the poller compares due times with the same clock.
-- Model: none — a push onto the schedule zset; promote's move of due members is modelled (with the retry zset)
local score = tonumber(ARGV[2])
local now = redis_now(ARGV[3])
if ARGV[1] == "in" then
  score = now + score
end
local prefix = ARGV[6]
if prefix ~= "" and ARGV[8] == "1" then
  for i = 13, #ARGV, 2 do
    if record_alive(prefix .. ARGV[i]) then return -1 end
  end
end
local added = 0
for i = 13, #ARGV, 2 do
  added = added + redis.call("ZADD", KEYS[1], score, ARGV[i + 1])
  if prefix ~= "" and ARGV[i] ~= "" then
    local record = prefix .. ARGV[i]
    if ARGV[8] == "1" then drop_record(record) end
    new_record(record, tonumber(ARGV[7]) + math.max(0, score - now), "state", "scheduled",
                "name", ARGV[10], "enqueued_at", ARGV[11], "batch", ARGV[12] ~= "" and ARGV[12])
  end
end
trim_dead(KEYS[1], now, ARGV[4], ARGV[5])
return added
