-- cancel: cancel one job by its status record, whatever state it is in, in one step.
-- KEYS[1] the job's status record (in its queue's slot)
-- KEYS[2] (optional) the unique lock the record names (its ``lock`` field), same slot
-- ARGV[1] the prefix of the cancel sets (``<prefix><identity>``: the jids a process is
-- asked to stop, in the same slot)   ARGV[2] the caller's clock (epoch s)
-- ARGV[3] a cancel set's TTL (s)      ARGV[4] the channel the job's waiters listen on
-- ARGV[5] the jid   ARGV[6] a finished record's TTL (keep_status, s)
-- Returns what it did:
--   "unknown"   no record (never enqueued, or its record expired): nothing done;
--   "finished"  it had ended already (succeeded, dead, cancelled): nothing done (a
--               repeated cancel, while the cancelled job's copy is still somewhere,
--               answers as the first did: "cancelled" or "stopping");
--   "cancelled" it was queued, scheduled, retrying or waiting: it will never run. Its copy is
--               not looked for (that would be a scan): the record's ``cancel`` makes
--               the next script that moves it (fetch, promote, requeue, give_back)
--               drop it unrun;
--   "stopping"  it is running: its process finds the jid in its cancel set (it polls
--               it) and stops the job; should the process die first, recovery drops the
--               job instead of requeueing it (the record's ``cancel`` again).
-- Errors (nothing written): "WRONGTYPE <what> <key> is not a <type> ..." when
-- a key it would write holds another type (a co-tenant's): the running job's process's
-- cancel set, a waiting job's waiting or arming set, a unique job's lock. Each is looked
-- at before anything is written (a script's writes before an error are kept).
-- (Asked with a read of the wanted type, not TYPE, which the enqueuer's documented ACL
-- does not grant: a WRONGTYPE reply means another type, whichever it is.)
-- Model: cancel (model/protocol.pml); upholds: cancelled_never_starts, waits_end, batch_ends
local function foreign(what, key, want)
  local reply
  if want == "zset" then reply = redis.pcall("ZSCORE", key, "-")
  elseif want == "set" then reply = redis.pcall("SCARD", key)
  else reply = redis.pcall("GET", key) end
  if type(reply) == "table" and reply.err then
    return redis.error_reply("WRONGTYPE " .. what .. " " .. key .. " is not a " .. want ..
                             " (not written by cogworker: delete it)")
  end
  return nil
end
local fields, origin = read_record(KEYS[1])
if not fields or not fields.state then return "unknown" end -- none, or not a record
local state = fields.state
if fields.cancel == "1" then
  if state == "running" then return "stopping" end
  return "cancelled"
end
if state == "succeeded" or state == "dead" or state == "cancelled" then
  return "finished"
end
local now = redis_now(ARGV[2])
if state == "running" then
  -- Destination first: the process's cancel set, then the record. A cancel set of
  -- another type (not ours: a co-tenant's key) is refused before anything is written,
  -- so the record never says "cancel asked" of a job its process was never told about.
  local by = fields.by
  if by then
    local set = ARGV[1] .. by
    local refused = foreign("cancel set", set, "set")
    if refused then return refused end
    redis.call("SADD", set, ARGV[5])
    redis.call("EXPIRE", set, tonumber(ARGV[3]))
  end
  write_record(KEYS[1], set_fields(fields, "cancel", "1", "cancel_at", now), nil, origin)
  return "stopping"
end
-- A job waiting for its parents (dep_wait.lua): its copy is its dep hash, in this slot;
-- deleted now, with its entries in the queue's waiting and arming sets, so that neither
-- the count nor the copy outlives the cancel (a parent that never ends would hold them).
-- Its record ends cancelled, kept ARGV[6] seconds (keep_status); its end is noted for
-- its own dependents and its batch (_record.lua).
if state == "waiting" then
  local slot = string.sub(KEYS[1], 1, -(#ARGV[5] + 5)) -- "<ns>:{q}:job:<jid>" -> "<ns>:{q}:"
  local refused = foreign("waiting set", slot .. "waiting", "zset")
    or foreign("arming set", slot .. "arming", "zset")
  if refused then return refused end
  redis.call("DEL", slot .. "dep:" .. ARGV[5], slot .. "dep_pending:" .. ARGV[5])
  redis.call("ZREM", slot .. "waiting", ARGV[5])
  redis.call("ZREM", slot .. "arming", ARGV[5])
  write_record(KEYS[1], set_fields(fields, "state", "cancelled", "finished_at", now),
               tonumber(ARGV[6] or "") or 600, origin)
  wake(ARGV[4], "cancelled")
  return "cancelled"
end
-- A unique job's lock goes with it (it will never run to release it): KEYS[2], the lock
-- its record names (``lock``, written by enqueue_unique), deleted only while this jid
-- holds it, so a later copy's lock is never taken from it.
if KEYS[2] and fields.lock == KEYS[2] then
  local refused = foreign("unique lock", KEYS[2], "string")
  if refused then return refused end
end
if KEYS[2] and fields.lock == KEYS[2] and redis.call("GET", KEYS[2]) == ARGV[5] then
  redis.call("DEL", KEYS[2])
end
write_record(KEYS[1], set_fields(fields, "cancel", "1", "state", "cancelled",
                                 "finished_at", now), nil, origin)
wake(ARGV[4], "cancelled")
return "cancelled"
