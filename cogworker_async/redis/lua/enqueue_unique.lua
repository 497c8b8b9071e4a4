-- enqueue_unique: take a unique job's lock and push (or schedule) the job, in one step.
-- KEYS[1] the lock (unique:<digest>)   KEYS[2] the queue list, or the schedule zset
-- (both in the queue's slot; the caller registers the queue's name)
-- ARGV[1] jid (the lock's owner)       ARGV[2] lock TTL (ms)
-- ARGV[3] "now" (push on the queue), "at" (ARGV[4] is an epoch time) or "in" (ARGV[4]
-- is a delay from Redis TIME)
-- ARGV[5] queue name   ARGV[6] wake channel   ARGV[7] caller clock   ARGV[8] raw job
-- Returns 1 if pushed, 0 if another jid holds the lock (a duplicate: nothing written);
-- {1, error} if pushed but the wake-up could not be published.
-- One step: a crash can never leave a lock without its job, nor a job without its lock.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", tonumber(ARGV[2])) then
  return 0
end
if ARGV[3] == "now" then
  redis.call("LPUSH", KEYS[2], ARGV[8])
  local refused = wake(ARGV[6], ARGV[5])
  if refused then return {1, refused} end
  return 1
end
local score = tonumber(ARGV[4])
if ARGV[3] == "in" then
  local now = redis_now(ARGV[7])
  score = now + score
end
redis.call("ZADD", KEYS[2], score, ARGV[8])
return 1
