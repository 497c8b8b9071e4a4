-- Status records (one hash per job, in its queue's slot: ``<prefix><jid>``): every script
-- that moves a job writes the job's new state in the same step, so what ``status`` reads
-- is never half-way between two moves. Prepended by scripts.py to scripts that call them.
-- Fields (the queue is the key's own: its slot): state, name, enqueued_at, started_at, finished_at, by (the process
-- running it), attempt, progress, info, result, error, cancel ("1": a cancel is
-- requested and a copy of the job may still be somewhere: it is dropped, unrun, by the
-- next script that moves it).

-- jid_in: the jid of a raw job, or nil. Payloads start with it (job.build writes it
-- first), so a pattern finds it without decoding; anything else is decoded.
local function jid_in(job)
  local jid = string.match(job, '^{"jid":"([^"\\]*)"')
  if jid then return jid end
  local ok, payload = pcall(cjson.decode, job)
  if ok and type(payload) == "table" and type(payload.jid) == "string" then
    return payload.jid
  end
  return nil
end

-- mark_record: write fields (name, value, ...) to a record, then its TTL in seconds
-- (nil: keep the one it has, and write nothing where there is no record: a key made
-- here would have no TTL). Best effort: a record of the wrong type must never stop the
-- move it describes (pcall).
local function mark_record(key, ttl, ...)
  if not ttl and redis.pcall("EXISTS", key) ~= 1 then return end
  redis.pcall("HSET", key, ...)
  if ttl then redis.pcall("EXPIRE", key, math.max(1, math.ceil(tonumber(ttl)))) end
end

-- cancel_pending: whether a cancel waits to drop this job (its record's ``cancel``).
local function cancel_pending(key)
  local flag = redis.pcall("HGET", key, "cancel")
  return flag == "1"
end

-- drop_cancelled: the copy of a cancelled job was dropped: the record says so and is
-- kept ``ttl`` seconds more.
local function drop_cancelled(key, now, ttl)
  redis.pcall("HDEL", key, "cancel", "by")
  mark_record(key, ttl, "state", "cancelled", "finished_at", now)
end
