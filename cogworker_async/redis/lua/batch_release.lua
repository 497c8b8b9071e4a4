-- batch_release: let go of blocks that hold a batch open and will never exit: those of a
-- worker process that is gone (the relay judged it: worker/batch_reaper.py), those on a
-- lease that lapsed (checked here, on Redis' clock: a block that renewed it since the
-- relay read it is kept), or every block (``cancel_batch``: a batch cancelled ends
-- whoever holds it). A lapsed block is written in "lapsed": its next add or seal is
-- refused (LAPSED), never taken silently. Once none holds it,
-- the batch is sealed and what it has come to decided, as at a block's exit — but one
-- opened by a block that died inside it ends abandoned, as if that block had raised.
-- A block let go of ("some") may have joined a member it never pushed, or left members
-- that must not run (abandoned): the batch is marked (``orphans``, a count bumped by each
-- such release and each seal after it) and stays in the held index until the relay has
-- repaired it once no block holds it (batch_repair.lua) — a relay that dies between this
-- step and the repair leaves the mark for the next pass to find.
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended   KEYS[10] its index of held batches
-- KEYS[11..17] (optional) the parent's keys
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the parent's bid ("": none)   ARGV[5] "all" (every holder) or "some"
-- ARGV[6..] the tokens to let go of ("some")
-- Returns the batch's state (false: no such batch). Safe to run twice: a token gone is
-- not let go of again (nor the mark bumped), and a batch ended stays as it ended.
-- Model: batch_release (model/protocol.pml); upholds: batch_ends
local k, parent = batch_keys(1), batch_keys(11)
local state = redis.call("HGET", k[1], "state")
if not state then
  redis.call("ZREM", KEYS[10], ARGV[1])
  return false
end
if batch_final(state) then -- kept while marked: its repair is still to come
  batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
  return state
end
local gone = {}
for i = 6, #ARGV do gone[ARGV[i]] = true end
local leases, clock = batch_leases(k, nil, ARGV[2]), batch_clock(ARGV[2])
local kept, opener, dropped, lapsed = {}, false, 0, {}
for token in string.gmatch(redis.call("HGET", k[1], "holders") or "", "%S+") do
  local leased = ARGV[5] ~= "all" and gone[token] and batch_lease_ms(token)
  if leased and leases[token] and leases[token] > clock then
    kept[#kept + 1] = token -- renewed since the relay read it: alive
  elseif ARGV[5] == "all" or gone[token] then
    dropped = dropped + 1
    if leased then lapsed[#lapsed + 1] = token end
    if string.find(token, ".n@", 1, true) or string.find(token, ".n~", 1, true) then
      opener = true
    end
  else
    kept[#kept + 1] = token
  end
end
redis.call("HSET", k[1], "holders", table.concat(kept, " "))
if dropped > 0 and ARGV[5] ~= "all" then redis.call("HINCRBY", k[1], "orphans", 1) end
batch_leases(k, nil, ARGV[2])
if #lapsed > 0 then
  local before = redis.call("HGET", k[1], "lapsed")
  redis.call("HSET", k[1], "lapsed", (before and before ~= "" and (before .. " ") or "") ..
             table.concat(lapsed, " "))
end
batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
if #kept > 0 or (dropped == 0 and ARGV[5] ~= "all") then return state end
local now, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
if opener and ARGV[5] ~= "all" then
  batch_end_abandoned(k, parent, KEYS[8], KEYS[9], ARGV[1], ARGV[4], now, ttl)
  return "abandoned"
end
redis.call("HSET", k[1], "sealed", "1")
return batch_decide(k, KEYS[8], ARGV[1], now, ttl, KEYS[9])
