-- take_lock: a short lock held by one process (orphan recovery runs one at a time).
-- KEYS[1] the lock key
-- ARGV[1] owner (identity)   ARGV[2] TTL in ms
-- Returns 1 if taken (or already ours, TTL renewed), 0 if another owner holds it.
-- Model: none — recovery one at a time; requeue judges the owner inside its own step, so the lock is not what makes it safe
local holder = redis.call("GET", KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", tonumber(ARGV[2]))
return 1
