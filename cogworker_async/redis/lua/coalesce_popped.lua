-- coalesce_popped: a job of a coalesced key (coalesce.lua) taken by a basic-fetch worker
-- (BRPOP, worker/fetch.py: no script wrote its record or handed it a merge). One more
-- call, for such a job only (its payload says ``"coalesce":true``, jobs/dedup.py ``mark``):
-- * the merge waiting for it (the key's state, ``merge:<jid>``) is handed over, with the
--   job's history (its retry count...: _record.lua ``lib_with_history``), and spent;
-- * its record forgets the key (``merged_by``): a basic worker writes no start nor end,
--   so nothing may merge into it (it runs) nor wait for its end (a follow-up would wait
--   for good): the key's next enqueue pushes a new job (which may start while this one
--   still runs: the guide says so).
-- KEYS[1] the job's record   ARGV[1] the job as popped
-- Returns the job to run (the merged arguments, its jid the same) or false: as popped.
-- No record, or one without ``merged_by`` (an earlier build's, or a second call): false,
-- nothing written. A merge that is not a job of this jid is dropped, unrun. Safe to run
-- twice.
-- Model: none — dedup (not modelled), and basic fetch is outside the protocol
local fields, origin = read_record(KEYS[1])
if not fields or not fields.merged_by then return false end
local at = string.find(KEYS[1], "}:job:", 1, true)
if not at then return false end
local state = string.sub(KEYS[1], 1, at + 1) .. "coalesce:" .. fields.merged_by
local field = "merge:" .. string.sub(KEYS[1], at + 6)
local merged = redis.pcall("HGET", state, field)
redis.pcall("HDEL", state, field)
write_record(KEYS[1], set_fields(fields, "merged_by", false, "era", false), nil, origin)
if type(merged) ~= "string" or jid_in(merged) ~= string.sub(KEYS[1], at + 6) then
  return false -- none, or not this job's (a co-tenant's garbage): run as popped
end
return record_library().with_history(ARGV[1], merged)
