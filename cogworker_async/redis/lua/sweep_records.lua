-- sweep_records: drop the live records (``lua/_record.lua``) whose bound has passed: a
-- job that vanished without a move (its queue deleted by hand, a key evicted) must not
-- leave its record in the live hash forever. A live record's bound (``until``) is set at
-- its enqueue and renewed at each retry, the live TTL ahead; a job still waiting then is
-- run all the same, and its status says ``unknown`` until it ends (as an earlier build's record that
-- expired did) — but for a job others wait for (``after=``): its record is what notes
-- its end for them, so it is kept, its bound renewed, while any still watch it and the
-- job can still move (a queue paused longer than the bound must not leave its dependents
-- waiting forever): a queued job while its queue has jobs on any of its lists, a
-- scheduled or retrying one while its queue's schedule or retry set has any, a running
-- one while its process's in-progress list (or the jobs waiting to be filed) is there, a
-- waiting one while its dep hash is. Past that (its queue cleared by an admin, a key
-- deleted by hand) it vanished: its record is closed ``cancelled`` (``error`` says why),
-- which notes that end for its watchers in the same step (their ``on_parent_failure``
-- follows), and kept ``keep_status``. Cheap looks (EXISTS), never a scan of a list: a
-- busy queue keeps a vanished parent's record until it is first seen empty.
-- KEYS[1] the queue's live hash
-- ARGV[1] the HSCAN cursor ("0": from the start)   ARGV[2] fields to look at (COUNT)
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] (optional) a live record's bound (s): a waiting job's record is renewed by it
-- ARGV[5] (optional) a finished record's TTL (s, ``keep_status``): a watched job that
-- vanished is closed for so long
-- Returns {next cursor ("0": a whole pass is done), how many were dropped or closed}.
-- One step per call: a record renewed since the HSCAN cannot be dropped in between.
-- A live hash of the wrong type is left alone ({"0", 0}).
-- Model: sweep_records (model/protocol.pml); upholds: waits_end
local scanned = redis.pcall("HSCAN", KEYS[1], ARGV[1], "COUNT", tonumber(ARGV[2]))
if type(scanned) ~= "table" or scanned.err then return {"0", 0} end
local now = redis_now(ARGV[3])
local slot = string.sub(KEYS[1], 1, -5) -- "<ns>:{q}:jobs" -> "<ns>:{q}:"
local live_ttl = tonumber(ARGV[4] or "") or 1209600 -- the live records' bound
local keep = tonumber(ARGV[5] or "") or 600 -- a closed record's TTL (keep_status)
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
-- present: how many of the keys of this slot named (suffixes) exist; one of another
-- type counts (it may hold nothing of ours, but nothing here is dropped for it).
local function present(...)
  local names = {...}
  for n = 1, #names do names[n] = slot .. names[n] end
  local found = redis.pcall("EXISTS", unpack(names))
  return type(found) ~= "number" or found > 0
end
-- may_move: whether something can still move the job whose record this is (see the top;
-- a cancel waiting for a copy of it, or a state not listed: as before, yes).
local function may_move(fields, jid)
  local state = fields.state
  if fields.cancel == "1" then return true end
  if state == "queued" then
    return present("queue", "prios", "groups", "queue:migrating")
  elseif state == "scheduled" or state == "retrying" then
    return present("schedule", "retry")
  elseif state == "running" then
    return present("in_progress:" .. (fields.by or ""), "unsettled", "repeat_orphans")
  elseif state == "waiting" then
    return present("dep:" .. jid)
  end
  return true
end
local entries = scanned[2]
for i = 1, #entries, 2 do
  local jid = entries[i]
  local fields = unpack_record(entries[i + 1])
  local till = fields and tonumber(fields["until"] or "")
  if not fields then
    redis.call("HDEL", KEYS[1], jid)
    dropped = dropped + 1
  elseif till and till < now then
    local waits = fields.state == "waiting" and redis.call("EXISTS", slot .. "dep:" .. jid) == 1
    local watching = not waits and watched(fields, jid)
    if waits or (watching and may_move(fields, jid)) then
      -- a job waiting for its parents has not vanished: its copy is its dep hash, and
      -- its record names its own dependents (``watchers``): kept, bound renewed; so is
      -- a job others still wait for, while it can move
      fields["until"] = tostring(math.ceil(now + live_ttl))
      redis.call("HSET", KEYS[1], jid, record_library().pack(fields))
    elseif watching then -- vanished, watched: its end noted for them (lib_write)
      write_record(slot .. "job:" .. jid, set_fields(
        fields, "state", "cancelled", "finished_at", tostring(now), "error",
        "Vanished: left its queue without a move (deleted by hand?), its dependents told"),
        keep, "live")
      dropped = dropped + 1
    else
      redis.call("HDEL", KEYS[1], jid)
      dropped = dropped + 1
    end
  end
end
return {scanned[1], dropped}
