-- enqueue: push jobs on one queue, wake idle workers.
-- KEYS[1] queue list (the queue's name is registered by the caller: another slot)
-- ARGV[1] queue name                ARGV[2] wake channel (pub/sub, not a key)
-- ARGV[3..] raw jobs, oldest first
-- Returns {length after the push}, or {length, error} if the wake-up could not be
-- published (the jobs are pushed all the same).
-- Not idempotent (a second call pushes the jobs twice): callers never retry it blindly.
-- An error (a key of the wrong type) means nothing was pushed: the queue's type is
-- checked (LLEN) before the first push.
local length = redis.call("LLEN", KEYS[1])
local last = #ARGV
-- unpack() has a stack limit: push in chunks.
for first = 3, last, 1000 do
  length = redis.call("LPUSH", KEYS[1], unpack(ARGV, first, math.min(first + 999, last)))
end
local refused = wake(ARGV[2], ARGV[1])
if refused then return {length, refused} end
return {length}
