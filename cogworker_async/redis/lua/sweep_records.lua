-- sweep_records: drop the live records (``lua/_record.lua``) whose bound has passed: a
-- job that vanished without a move (its queue deleted by hand, a key evicted) must not
-- leave its record in the live hash forever. A live record's bound (``until``) is set at
-- its enqueue and renewed at each retry, the live TTL ahead; a job still waiting then is
-- run all the same, and its status says ``unknown`` until it ends (as an earlier build's record that
-- expired did) — but for a job others wait for (``after=``): its record is what notes
-- its end for them, so it is kept, its bound renewed, while any still watch it (a queue
-- paused longer than the bound must not leave its dependents waiting forever).
-- KEYS[1] the queue's live hash
-- ARGV[1] the HSCAN cursor ("0": from the start)   ARGV[2] fields to look at (COUNT)
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] (optional) a live record's bound (s): a waiting job's record is renewed by it
-- Returns {next cursor ("0": a whole pass is done), how many were dropped}.
-- One step per call: a record renewed since the HSCAN cannot be dropped in between.
-- A live hash of the wrong type is left alone ({"0", 0}).
-- Model: sweep_records (model/protocol.pml); upholds: waits_end
local scanned = redis.pcall("HSCAN", KEYS[1], ARGV[1], "COUNT", tonumber(ARGV[2]))
if type(scanned) ~= "table" or scanned.err then return {"0", 0} end
local now = redis_now(ARGV[3])
local slot = string.sub(KEYS[1], 1, -5) -- "<ns>:{q}:jobs" -> "<ns>:{q}:"
local live_ttl = tonumber(ARGV[4] or "") or 1209600 -- the live records' bound
local dropped = 0
-- watched: whether jobs still wait for this one: named in its record's text (earlier
-- builds, a coalesced follow-up), or in its watchers set (``*``: dep_watch.lua).
local function watched(fields, jid)
  for watcher in string.gmatch(fields.watchers or "", "[^\30]+") do
    if watcher ~= "*" or redis.pcall("SCARD", slot .. "watchers:" .. jid) ~= 0 then
      return true
    end
  end
  return false
end
local entries = scanned[2]
for i = 1, #entries, 2 do
  local fields = unpack_record(entries[i + 1])
  local till = fields and tonumber(fields["until"] or "")
  if fields and till and till < now and ((fields.state == "waiting"
      and redis.call("EXISTS", slot .. "dep:" .. entries[i]) == 1)
      or watched(fields, entries[i])) then
    -- a job waiting for its parents has not vanished: its copy is its dep hash, and
    -- its record names its own dependents (``watchers``): kept, bound renewed; so is
    -- a job others still wait for
    fields["until"] = tostring(math.ceil(now + live_ttl))
    redis.call("HSET", KEYS[1], entries[i], record_library().pack(fields))
  elseif not fields or (till and till < now) then
    redis.call("HDEL", KEYS[1], entries[i])
    dropped = dropped + 1
  end
end
return {scanned[1], dropped}
