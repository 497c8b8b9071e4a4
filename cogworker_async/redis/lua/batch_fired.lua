-- batch_fired: the relay has enqueued the callbacks it found decided (each with a jid
-- of its own made from the batch's id, so an enqueue repeated after a crash is refused):
-- they are no longer due; a batch with nothing left to fire leaves the firing set, and
-- one that has ended leaves its parent's open children — which may end
-- the parent in turn (its callbacks fire after this one's).
-- KEYS[1..7] the batch's keys   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended   KEYS[10..16] (optional) the parent's keys
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the kinds enqueued, space-separated   ARGV[5] the parent's bid ("": none)
-- Returns the batch's state (false: no such batch: it leaves the firing set).
-- Safe to run twice: a kind already fired is not due again.
-- Model: batch_fired (model/protocol.pml); upholds: callback_once, batch_ends
local k, parent = batch_keys(1), batch_keys(10)
local got = redis.call("HMGET", k[1], "state", "fire", "fired")
if not got[1] then
  redis.call("ZREM", KEYS[8], ARGV[1])
  return false
end
local done = " " .. ARGV[4] .. " "
local left, fired = {}, got[3] or ""
for kind in string.gmatch(got[2] or "", "%S+") do
  if string.find(done, " " .. kind .. " ", 1, true) then
    if not string.find(" " .. fired .. " ", " " .. kind .. " ", 1, true) then
      fired = fired == "" and kind or (fired .. " " .. kind)
    end
  else
    left[#left + 1] = kind
  end
end
redis.call("HSET", k[1], "fire", table.concat(left, " "), "fired", fired)
if #left == 0 then -- due again if a later end decides more (batch_decide)
  redis.call("ZREM", KEYS[8], ARGV[1])
end
if #left == 0 and batch_final(got[1]) then
  if parent and redis.call("SREM", parent[6], ARGV[1]) == 1 then
    batch_decide(parent, KEYS[8], ARGV[5], tonumber(ARGV[2]), tonumber(ARGV[3]), KEYS[9])
  end
end
return got[1]
