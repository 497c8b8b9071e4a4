-- batch_abandon: the block that opened a batch raised: its members were cancelled by the
-- caller; the batch ends abandoned — no callback fires — and leaves its parent's open
-- children (which may end the parent). A batch another block still holds open is only
-- let go (that block seals it).
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended   KEYS[10] its index of held batches
-- KEYS[11..17] (optional) the parent's keys
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the token of the block that raised   ARGV[5] the parent's bid ("": none)
-- Returns the batch's state (false: no such batch). Safe to run twice.
-- Model: none — a block that raised; no modelled block raises (its end, abandoned, is one batch_ends accepts)
local k, parent = batch_keys(1), batch_keys(11)
local state = redis.call("HGET", k[1], "state")
if not state then
  redis.call("ZREM", KEYS[10], ARGV[1])
  return false
end
if batch_final(state) then return state end
local held = batch_holders(k, nil, ARGV[4])
batch_leases(k, nil, ARGV[2])
batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
if held then return state end
batch_end_abandoned(k, parent, KEYS[8], KEYS[9], ARGV[1], ARGV[5], tonumber(ARGV[2]),
                    tonumber(ARGV[3]))
return "abandoned"
