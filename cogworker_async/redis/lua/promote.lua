-- promote: due members of a queue's zset (schedule or retry) onto that queue.
-- KEYS[1] the zset                   KEYS[2] the queue's list (the same slot)
-- ARGV[1] wake channel (pub/sub, not a key)   ARGV[2] the queue's name
-- ARGV[3] the record prefix (``<prefix><jid>``: the jobs' status records; "": none)
-- ARGV[4] the caller's clock (epoch s)   ARGV[5] a cancelled job's record TTL (s)
-- ARGV[6] a live record's TTL (s): a job retried by hand from dead, whose record had
-- expired, gets one again (its name, enqueue time and batch read from the member)
-- ARGV[7] "1": the zset is the dead set (a retry by hand): a member whose record says
-- its jid is alive again (enqueued anew with that jid since it died, or already retried)
-- stays in the dead set, not counted: two live copies of one jid would make cancel(jid)
-- stop one and leave the other to run.
-- ARGV[2i + 6], ARGV[2i + 7]: the i-th member as it stands in the zset, and the job to
-- push (the same job with enqueued_at renewed).
-- Returns how many were moved. A member no longer in the zset (moved by another
-- process, deleted by an admin) is skipped, so two pollers never both move one job.
-- A member whose record has a cancel waiting is removed instead, unrun (not counted).
-- Written before removed: a job is always in at least one place. A queue key that cannot
-- be written (wrong type, or Redis out of memory) leaves the jobs in the zset, not
-- counted: they are looked at again on the next poll.
-- Model: promote (model/protocol.pml); upholds: no_job_lost, cancelled_never_starts, jobs_end
local moved = 0
local prefix = ARGV[3]
local from_dead = ARGV[7] == "1"
for i = 8, #ARGV - 1, 2 do
  local member, job = ARGV[i], ARGV[i + 1]
  if redis.call("ZSCORE", KEYS[1], member) then
    local jid = prefix ~= "" and jid_in(job)
    local record = jid and prefix .. jid
    if record and cancel_pending(record) then
      redis.call("ZREM", KEYS[1], member)
      drop_cancelled(record, redis_now(ARGV[4]), ARGV[5])
    elseif from_dead and record and record_library().live_states[record_state(record) or ""] then
      -- left in the dead set: the jid lives on elsewhere in this queue
    elseif type(queue_library().push(KEYS[2], job, false, redis.pcall)) == "number" then -- _queue.lua
      redis.call("ZREM", KEYS[1], member)
      if record and read_record(record) then
        mark_record(record, ARGV[6], "state", "queued")
      elseif record then
        -- a member retried by hand after its record went: its name, enqueue time and
        -- batch from the member (the job as it stood in the set, as its record had them)
        local name, since, bid = payload_identity(member)
        mark_record(record, ARGV[6], "state", "queued", "name", name, "enqueued_at", since,
                    "batch", bid)
      end
      moved = moved + 1
    end
  end
end
if moved > 0 then wake(ARGV[1], ARGV[2]) end
return moved
