-- promote: due members of a zset (schedule or retry) onto their queues.
-- KEYS[1] the zset                   KEYS[2] set of queue names
-- KEYS[2 + i] the queue list of the i-th job
-- ARGV[1] wake channel (pub/sub, not a key)
-- ARGV[3i - 1], ARGV[3i], ARGV[3i + 1]: the i-th member as it stands in the zset, the
-- job to push (the same job with enqueued_at renewed), and its queue's name.
-- Returns how many were moved. A member no longer in the zset (moved by another
-- process, deleted by an admin) is skipped, so two pollers never both move one job.
-- Written before removed: a job is always in at least one place. A job whose queue
-- key cannot be written (wrong type) stays in the zset and is not counted; the others
-- are still moved (one bad queue must not stop every due job behind it). The set of
-- queue names is best effort: an error there after the push would leave the job in the
-- zset too, to be pushed (and run) again on every poll.
local moved = 0
for i = 1, #KEYS - 2 do
  local member, job, name = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  if redis.call("ZSCORE", KEYS[1], member) then
    if type(redis.pcall("LPUSH", KEYS[2 + i], job)) == "number" then
      redis.pcall("SADD", KEYS[2], name)
      redis.call("ZREM", KEYS[1], member)
      moved = moved + 1
    end
  end
end
if moved > 0 then wake(ARGV[1], "due") end
return moved
