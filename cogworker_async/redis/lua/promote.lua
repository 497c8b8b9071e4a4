-- promote: due members of a queue's zset (schedule or retry) onto that queue.
-- KEYS[1] the zset                   KEYS[2] the queue's list (the same slot)
-- ARGV[1] wake channel (pub/sub, not a key)   ARGV[2] the queue's name
-- ARGV[2i + 1], ARGV[2i + 2]: the i-th member as it stands in the zset, and the job to
-- push (the same job with enqueued_at renewed).
-- Returns how many were moved. A member no longer in the zset (moved by another
-- process, deleted by an admin) is skipped, so two pollers never both move one job.
-- Written before removed: a job is always in at least one place. A queue key that cannot
-- be written (wrong type, or Redis out of memory) leaves the jobs in the zset, not
-- counted: they are looked at again on the next poll.
local moved = 0
for i = 3, #ARGV - 1, 2 do
  local member, job = ARGV[i], ARGV[i + 1]
  if redis.call("ZSCORE", KEYS[1], member) then
    if type(redis.pcall("LPUSH", KEYS[2], job)) == "number" then
      redis.call("ZREM", KEYS[1], member)
      moved = moved + 1
    end
  end
end
if moved > 0 then wake(ARGV[1], ARGV[2]) end
return moved
