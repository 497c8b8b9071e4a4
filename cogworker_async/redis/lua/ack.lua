-- ack: jobs ran (or were filed in dead unparsed); forget them, and write how each ended
-- (and its result, if it keeps one) in its status record, in the same step: a job has
-- a stored result if and only if it was acknowledged.
-- KEYS[1] in-progress list of this identity
-- KEYS[2i] orphan counter of the i-th job's jid (cleared if it was there: it got to finish)
-- KEYS[2i + 1] the i-th job's status record
-- ARGV[1] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[2 + 5(i - 1) ..]: the i-th job as five values: raw job exactly as fetched; its
-- end ("succeeded", "cancelled"); its result as JSON ("": none kept); the record's TTL
-- (s); the channel its result's waiters listen on ("": publish nothing, a job that
-- keeps no result: waiters of those poll)
-- Returns how many were removed; 0 for a job no longer there (already settled,
-- not an error). Safe to run twice.
-- A counter is cleared, and a record written, only by the ack that found its job: a
-- late ack from a process declared dead (fenced after a partition) finds nothing, and
-- must not reset the count of the copy recovered elsewhere (the poison rule would then
-- allow one crash more), nor record a result for a run whose job runs again elsewhere.
-- Model: ack (model/protocol.pml); upholds: no_job_lost, no_rerun, jobs_end, batch_ends
local removed = 0
local now = nil
for i = 1, (#ARGV - 1) / 5 do
  local at = 2 + 5 * (i - 1)
  local here = redis.call("LREM", KEYS[1], 1, ARGV[at])
  removed = removed + here
  if here > 0 then
    if KEYS[2 * i] then redis.pcall("DEL", KEYS[2 * i]) end
    local record = KEYS[2 * i + 1]
    if record and ARGV[at + 3] ~= "" then -- "": a job without a jid has no record
      now = now or redis_now(ARGV[1])
      finish_record(record, ARGV[at + 3], ARGV[at + 1], now,
                    ARGV[at + 2] ~= "" and ARGV[at + 2])
      if ARGV[at + 4] ~= "" then wake(ARGV[at + 4], ARGV[at + 1]) end
    end
  end
end
return removed
