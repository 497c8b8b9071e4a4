-- batch_release: let go of blocks that hold a batch open and will never exit: those of a
-- worker process that is gone (the relay judged it: worker/batch_reaper.py), or every
-- block (``cancel_batch``: a batch cancelled ends whoever holds it). Once none holds it,
-- the batch is sealed and what it has come to decided, as at a block's exit — but one
-- opened by a block that died inside it ends abandoned, as if that block had raised (its
-- caller cancels the members left pending).
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended   KEYS[10] its index of held batches
-- KEYS[11..17] (optional) the parent's keys
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the parent's bid ("": none)   ARGV[5] "all" (every holder) or "some"
-- ARGV[6..] the tokens to let go of ("some")
-- Returns the batch's state (false: no such batch). Safe to run twice: a token gone is
-- not let go of again, and a batch ended stays as it ended.
local k, parent = batch_keys(1), batch_keys(11)
local state = redis.call("HGET", k[1], "state")
if not state or batch_final(state) then
  redis.call("ZREM", KEYS[10], ARGV[1])
  return state or false
end
local gone = {}
for i = 6, #ARGV do gone[ARGV[i]] = true end
local kept, opener, dropped = {}, false, 0
for token in string.gmatch(redis.call("HGET", k[1], "holders") or "", "%S+") do
  if ARGV[5] == "all" or gone[token] then
    dropped = dropped + 1
    if string.find(token, ".n@", 1, true) then opener = true end
  else
    kept[#kept + 1] = token
  end
end
redis.call("HSET", k[1], "holders", table.concat(kept, " "))
batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
if #kept > 0 or (dropped == 0 and ARGV[5] ~= "all") then return state end
local now, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
if opener and ARGV[5] ~= "all" then
  batch_end_abandoned(k, parent, KEYS[8], KEYS[9], ARGV[1], ARGV[4], now, ttl)
  return "abandoned"
end
redis.call("HSET", k[1], "sealed", "1")
return batch_decide(k, KEYS[8], ARGV[1], now, ttl, KEYS[9])
