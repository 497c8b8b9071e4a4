-- batch_apply: members' ends, relayed from the notes their settle scripts wrote in their
-- own queue's slot, applied to their batch: each jid leaves pending for the set of its
-- end; then what the batch has come to is decided (_batch.lua batch_decide).
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the bound of a batch not ended (s): renewed here, so a batch whose members
-- run for weeks is kept while they do   ARGV[5..] jid, end pairs (end: "succeeded",
-- "dead" or "cancelled")
-- Returns the batch's state (false: no such batch: its notes are dropped).
-- Error "WRONGTYPE <what> <key> is not a zset ..." (nothing written): the firing set or
-- the open index holds another type (a co-tenant's key): not this batch's fault, so the
-- relay keeps the notes (applied once the key is deleted) and names the key.
-- Safe to run twice, and in any order with the others: a jid that is no longer where
-- its end would take it from is left alone. A member dead and then retried by hand that
-- succeeds moves from dead to succeeded.
-- Model: batch_apply (model/protocol.pml); upholds: batch_ends
local k = batch_keys(1)
if not redis.call("HGET", k[1], "state") then return false end
local refused = key_foreigns({{"firing set", KEYS[8], "zset"},
                                {"open batch index", KEYS[9], "zset"}})
if refused then return refused end
local from = {succeeded = {k[2], k[4]}, dead = {k[2]}, cancelled = {k[2]}}
local to = {succeeded = k[3], dead = k[4], cancelled = k[5]}
for i = 5, #ARGV - 1, 2 do
  local jid, ended = ARGV[i], ARGV[i + 1]
  for _, source in ipairs(from[ended] or {}) do
    if redis.call("SMOVE", source, to[ended], jid) == 1 then break end
  end
end
local state = batch_decide(k, KEYS[8], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), KEYS[9])
if not batch_final(state) then batch_bound(k, tonumber(ARGV[4])) end -- the sets SMOVE made
return state
