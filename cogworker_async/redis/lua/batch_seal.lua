-- batch_seal: the batch's ``async with`` block has exited: from now on its callbacks can
-- fire, and those already due are decided here (a batch whose members all ended before
-- the block exited).
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended   KEYS[10] its index of held batches
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the token of the block that exits (it lets go: sealed once no block holds it)
-- Returns the batch's state (false: no such batch). Error (nothing written): "LAPSED ..."
-- for a block whose lease lapsed: the relay let go of it, sealed or abandoned the batch
-- already (that block must hear it). Safe to run twice. A batch the relay let go of a
-- dead block of (``orphans``: batch_release.lua) stays in the held index until repaired,
-- and its mark is bumped here: a relay that read the batch free before this block
-- pushed its member and sealed must not count that member never pushed
-- (batch_repair.lua refuses a mark that changed).
-- Model: batch_seal (model/protocol.pml); upholds: batch_sealed_unheld, batch_ends
local k = batch_keys(1)
if not redis.call("HGET", k[1], "state") then
  redis.call("ZREM", KEYS[10], ARGV[1])
  return false
end
local lapsed = batch_lapsed(k, ARGV[4])
if lapsed then return lapsed end
local held = batch_holders(k, nil, ARGV[4])
if redis.call("HEXISTS", k[1], "orphans") == 1 then redis.call("HINCRBY", k[1], "orphans", 1) end
batch_leases(k, nil, ARGV[2])
batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
if held then -- another block holds it open: nothing fires yet
  return redis.call("HGET", k[1], "state")
end
redis.call("HSET", k[1], "sealed", "1")
return batch_decide(k, KEYS[8], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), KEYS[9])
