-- give_back: a job that never started goes back to the front of its queue.
-- KEYS[1] in-progress list           KEYS[2] the queue it was fetched from
-- ARGV[1] raw job as fetched
-- Returns 1 if given back, 0 if it was not in progress (a no-op).
-- Written before removed; safe to run twice.
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("RPUSH", KEYS[2], ARGV[1])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
