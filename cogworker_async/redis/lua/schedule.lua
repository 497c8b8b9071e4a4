-- schedule: add jobs to a zset (schedule) to be enqueued at a time.
-- KEYS[1] the zset
-- ARGV[1] "at" (ARGV[2] is an epoch time) or "in" (ARGV[2] is a delay from Redis TIME)
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] dead_max_jobs, ARGV[5] dead_max_age (s): trim the zset to them after adding
-- (when it is the dead set; "0": no trim)
-- ARGV[6..] raw jobs
-- Returns how many were added.
-- Delays count from Redis' clock: the poller compares due times with the same clock.
local score = tonumber(ARGV[2])
local now = redis_now(ARGV[3])
if ARGV[1] == "in" then
  score = now + score
end
local added = 0
for i = 6, #ARGV do
  added = added + redis.call("ZADD", KEYS[1], score, ARGV[i])
end
trim_dead(KEYS[1], now, ARGV[4], ARGV[5])
return added
