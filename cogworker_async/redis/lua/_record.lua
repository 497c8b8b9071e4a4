-- Status records: every script that moves a job writes the job's new state in the same
-- step, so what ``status`` reads is never half-way between two moves. Prepended by
-- scripts.py to scripts that call them.
--
-- A record is named by its key, ``<ns>:{<queue>}:job:<jid>`` (``Keys.record``), and lives
-- in one of two places, both in the queue's slot:
-- * a job that may still run (queued, scheduled, running, retrying) is one field of the
--   queue's live hash ``<ns>:{<queue>}:jobs`` (``Keys.live_records``): jid -> its fields
--   packed in one string. No key is made and no TTL set per job: a hash field costs about
--   a third of a key with its own hash and TTL, in memory and in time;
-- * a finished job (succeeded, dead, cancelled) is the string at its key, packed the
--   same way, with the TTL it is kept for (``keep_status``, or its ``keep_result``): one
--   SET ... EX — but for a cancelled job whose
--   copy is still in a queue or set (``cancel`` "1"): that one stays live until the next
--   move drops the copy, so the cancel is never forgotten before.
-- A record written by an earlier build is a hash at its key whatever its state: it is read
-- there, and moves at its job's next move (an upgrade loses nothing).
-- The two moves every job makes, fetch and ack, take a fast path (``fetch_record``,
-- ``finish_record``): the packed text is edited as a string, never unpacked.
-- Fields: state, name, enqueued_at, started_at, finished_at, by (the process running it),
-- attempt, progress, info, result, error, lock (a unique job's lock), cancel ("1": a
-- cancel is requested and a copy of the job may still be somewhere: it is dropped,
-- unrun, by the next script that moves it), cancel_at, batch (the batch it is a member
-- of), watchers (the jobs waiting for it, ``after=``: "[+]<queue>/<jid>" joined by
-- "\30", "+" where the dependent takes its result), noted (the end last noted for
-- those), merged_by (the digest of a coalesced key: its merges wait for the job's
-- fetch, coalesce.lua); and, live only, until (epoch s: after it, ``sweep_records`` drops a record
-- whose job vanished without a move).
-- States: queued, scheduled, running, retrying, waiting (for its parents: dep_wait.lua),
-- and for good succeeded, dead, cancelled.
-- Packed: "<state>\t<name>\t<enqueued_at>\t<until>" then "\t<field>=<value>" for each
-- other field; a tab inside a value is written as a space (``status.unpack`` reads it).
-- Model: none — a library; the note it writes with a final state is h_endrec, inside each settling step


-- jid_in: the jid of a raw job, or nil. Payloads start with it (wire.build writes it
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

-- live_place: the live hash and the field of the record at ``key``. Neither a namespace
-- nor a queue name may hold a brace, so the first "}" closes the queue's hash tag.
local place_prefix, place_live = nil, nil -- the last queue's: a script moves one queue's jobs
local function live_place(key)
  if place_prefix and string.find(key, place_prefix, 1, true) == 1 and #key > #place_prefix then
    return place_live, string.sub(key, #place_prefix + 1)
  end
  local at = string.find(key, "}:job:", 1, true) -- a plain find: string.match costs more
  if not at or at + 6 > #key then return nil, nil end
  place_prefix, place_live = string.sub(key, 1, at + 5), string.sub(key, 1, at + 1) .. "jobs"
  return place_live, string.sub(key, at + 6)
end

local last_number, last_text = nil, nil -- a script writes one clock reading many times
local function record_text(value)
  if type(value) == "number" then
    if value ~= last_number then
      last_number, last_text = value, string.format("%.17g", value)
    end
    return last_text
  end
  if string.find(value, "\t", 1, true) then return (string.gsub(value, "\t", " ")) end
  return value
end

-- record_library: the general record functions, made on first use: a function defined
-- at the top of a script costs a closure at each of its calls, and the moves every job
-- makes (fetch, ack, enqueue) take the fast paths below, which need them only rarely.
local record_library_made = nil
local function record_library()
  if record_library_made then return record_library_made end
  local LIVE_STATES = {queued = true, scheduled = true, running = true, retrying = true,
                       waiting = true}
  local FINISHED_STATES = {succeeded = true, dead = true, cancelled = true}
  local PACKED_FIRST = {state = true, name = true, enqueued_at = true, ["until"] = true}
  local record_now = nil -- TIME, once per script run (a bulk enqueue writes many records)
  local function lib_clock()
    if record_now == nil then
      local ok, time = pcall(redis.call, "TIME")
      record_now = ok and tonumber(time[1]) or false
    end
    return record_now or nil
  end

  local function lib_pack(fields)
    local parts = {record_text(fields.state or ""), record_text(fields.name or ""),
                   fields.enqueued_at or "", fields["until"] or ""}
    for name, value in pairs(fields) do
      if not PACKED_FIRST[name] then
        parts[#parts + 1] = name .. "=" .. record_text(value)
      end
    end
    return table.concat(parts, "\t")
  end

  local function lib_unpack(text)
    local state, name, enqueued, till, rest = string.match(
      text, "^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)(.*)$")
    if not state then return nil end
    local fields = {state = state}
    if name ~= "" then fields.name = name end
    if enqueued ~= "" then fields.enqueued_at = enqueued end
    if till ~= "" then fields["until"] = till end
    for field, value in string.gmatch(rest, "\t([^\t=]+)=([^\t]*)") do fields[field] = value end
    return fields
  end

  -- lib_read: the fields of the record at ``key`` and where they were found ("live",
  -- "key"), or nil when there is none (or it cannot be read: wrong type, damaged).
  local function lib_read(key)
    local live, jid = live_place(key)
    if live then
      local text = redis.pcall("HGET", live, jid)
      if type(text) == "string" then
        local fields = lib_unpack(text)
        if fields then return fields, "live" end
      end
    end
    local text = redis.pcall("GET", key)
    if type(text) == "string" then
      local fields = lib_unpack(text)
      if fields then return fields, "key" end
      return nil, nil -- damaged: no record
    end
    local flat = redis.pcall("HGETALL", key) -- as earlier builds wrote it
    if type(flat) ~= "table" or flat.err or #flat == 0 then return nil, nil end
    local fields = {}
    for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
    return fields, "key"
  end

  -- lib_write: put ``fields`` where their state says (see the top), ``ttl`` seconds
  -- (nil: the TTL it has). ``origin`` is lib_read's: the place it leaves is cleared.
  -- Best effort: a record of the wrong type must never stop the move it describes (pcall).
  local function lib_write(key, fields, ttl, origin)
    local live, jid = live_place(key)
    if fields.merged_by and live then
      -- A coalesced job (coalesce.lua): ``era`` is its queue's clear count when it was
      -- last put on its list (a push, a release, a retry due, a give-back...): a clear
      -- since, and it is gone. Kept while it stays queued, dropped when it leaves.
      if fields.state ~= "queued" then
        fields.era = nil
      elseif not fields.era then
        local count = redis.pcall("GET", string.sub(live, 1, -5) .. "cleared")
        fields.era = type(count) == "string" and count or "0"
      end
    end
    if (fields.batch or fields.watchers) and FINISHED_STATES[fields.state]
        and fields.noted ~= fields.state and live then
      -- A member of a batch, or a parent other jobs wait for (``after=``), has ended
      -- (or ended otherwise: a dead job retried by hand that then succeeds): a note for
      -- its batch and its waiting dependents, in this slot's notes list, in the same step.
      -- ``noted`` makes a rewrite of the same end write none (worker/notes_relay.py relays the
      -- notes; the batch's sets and a dependent's pending set make a repeated note
      -- count once anyway).
      local notes = string.sub(live, 1, -5) .. "batch_notes"
      local pushed = redis.pcall("RPUSH", notes,
                                 (fields.batch or "") .. "\t" .. jid .. "\t" .. fields.state ..
                                 (fields.watchers and ("\t" .. fields.watchers) or ""))
      if type(pushed) == "number" then -- else: again later
        fields.noted = fields.state
        -- The relays of this queue hear it on the namespace's wake channel ("notes",
        -- the queue: no queue name holds a tab): a hand-off takes a few round trips,
        -- not a poll. Not a move (a message missed is made up by the relay's next
        -- poll), so never raising. Both names from the notes list's: "<ns>:{<queue>}:".
        local ns, queue = string.match(notes, "^(.-):{(.-)}:")
        if ns then redis.pcall("PUBLISH", ns .. ":{" .. ns .. "}:wake", "notes\t" .. queue) end
      end
    end
    if LIVE_STATES[fields.state] then
      -- It may run again (retried by hand from dead, recovered): its next end is noted
      -- anew, for its batch and for whoever watches it now.
      fields.noted = nil
    end
    if live and (LIVE_STATES[fields.state] or fields.cancel == "1") then
      if not ttl and not fields["until"] then -- from the earlier layout: its key's TTL, or 14 days
        local left = origin == "key" and redis.pcall("TTL", key)
        ttl = (type(left) == "number" and left > 0) and left or 1209600
      end
      if ttl then
        local now = lib_clock()
        fields["until"] = now and tostring(math.ceil(now + tonumber(ttl))) or nil
      end
      redis.pcall("HSET", live, jid, lib_pack(fields))
      if origin == "key" then redis.pcall("DEL", key) end
      return
    end
    if not ttl then -- what it had: its live bound, its key's TTL, else the live TTL
      local left = origin == "key" and redis.pcall("TTL", key)
      local now = fields["until"] and lib_clock()
      if type(left) == "number" and left > 0 then ttl = left
      elseif now then ttl = math.max(1, tonumber(fields["until"]) - now)
      else ttl = 1209600 end
    end
    fields["until"] = nil
    redis.pcall("SET", key, lib_pack(fields), "EX", math.max(1, math.ceil(tonumber(ttl))))
    if origin == "live" then redis.pcall("HDEL", live, jid) end
  end

  -- lib_set: ``fields`` with (name, value, ...) written over it; a value of false
  -- removes the field.
  local function lib_set(fields, ...)
    local n = select("#", ...)
    for i = 1, n, 2 do
      local name, value = select(i, ...)
      if value == false then fields[name] = nil else fields[name] = value end
    end
    return fields
  end

  -- lib_mark: write fields (name, value, ...; false removes one) to a record, with its
  -- TTL in seconds (nil: keep the one it has, and write nothing where there is no record:
  -- a record made here would have no bound).
  local function lib_mark(key, ttl, ...)
    local fields, origin = lib_read(key)
    if not fields then
      if not ttl then return end
      fields = {}
    end
    lib_write(key, lib_set(fields, ...), ttl, origin)
  end
  -- alive: whether the record says its job may still run (queued, scheduled, running,
  -- retrying), or a cancel waits for a copy of it: an enqueue that chooses its jid
  -- refuses such a jid.
  local function lib_alive(key)
    local fields = lib_read(key)
    return fields ~= nil and (LIVE_STATES[fields.state or ""] == true or fields.cancel == "1")
  end

  -- drop: forget any record at ``key`` (a chosen jid enqueued again: a finished run's
  -- fields go).
  local function lib_drop(key)
    local live, jid = live_place(key)
    if live then redis.pcall("HDEL", live, jid) end
    redis.pcall("DEL", key)
  end

  -- HISTORY: what a job's earlier tries wrote in its payload (jobs/retries.py,
  -- worker/outcome.py): a merge brings new arguments, never a fresh count of retries (a
  -- failing job merged into at every retry would otherwise retry for ever).
  local HISTORY = {"retry_count", "error_class", "error_message", "error_backtrace",
                   "failed_at", "retried_at", "interrupted_count", "limited_count",
                   "limited_at"}

  -- with_history: ``merged`` (a new enqueue's payload, its jid the job's) with the fields
  -- of HISTORY that ``job`` (the job as it waited) has and ``merged`` has not, appended
  -- (no field moves: the jid, priority and group stay where scripts look for them).
  local function lib_with_history(job, merged)
    if not string.find(job, '_count":', 1, true) then
      return merged -- never tried: nothing to keep (no decoding)
    end
    local ok, was = pcall(cjson.decode, job)
    local ok_new, now = pcall(cjson.decode, merged)
    local body = string.match(merged, "^(.*)}%s*$")
    if not (ok and ok_new and type(was) == "table" and type(now) == "table" and body) then
      return merged
    end
    local parts = {body}
    for _, name in ipairs(HISTORY) do
      local value = was[name]
      if value ~= nil and now[name] == nil then
        local text
        if type(value) == "table" and next(value) == nil then
          text = "[]" -- cjson reads [] as a table it would write as {}
        else
          text = cjson.encode(value)
        end
        parts[#parts + 1] = string.format(",%s:%s", cjson.encode(name), text)
      end
    end
    parts[#parts + 1] = "}"
    return table.concat(parts)
  end

  record_library_made = {pack = lib_pack, unpack = lib_unpack, read = lib_read,
                         write = lib_write, set = lib_set, mark = lib_mark,
                         alive = lib_alive, drop = lib_drop, live_states = LIVE_STATES,
                         with_history = lib_with_history}
  return record_library_made
end

-- The names the scripts call.
local function unpack_record(text) return record_library().unpack(text) end
local function read_record(key) return record_library().read(key) end
local function write_record(key, fields, ttl, origin)
  return record_library().write(key, fields, ttl, origin)
end
local function set_fields(fields, ...) return record_library().set(fields, ...) end
local function mark_record(key, ttl, ...) return record_library().mark(key, ttl, ...) end


-- new_record: the record of a job enqueued with a fresh jid (none can exist): written
-- without a look.
local function new_record(key, ttl, ...)
  local lib = record_library()
  lib.write(key, lib.set({}, ...), ttl, nil)
end

-- live_records_of: the live hash of the queue whose record prefix is ``prefix``
-- ("<slot>job:" -> "<slot>jobs").
local function live_records_of(prefix)
  return string.sub(prefix, 1, -5) .. "jobs"
end

-- queued_text: the packed record of a job just queued, named ``name``, enqueued at
-- ``enqueued_at`` (the caller's clock, as the job says), bounded ``ttl`` seconds past
-- Redis' clock (a caller's clock may be far off: a bound in the past would have the sweep
-- drop a waiting job's record); made once per call. nil if the time is not a number
-- (``queued_record`` then writes what it can).
local function queued_text(name, enqueued_at, ttl, batch)
  local since = tonumber(enqueued_at)
  if not since then return nil end
  local ok, time = pcall(redis.call, "TIME")
  if ok then since = tonumber(time[1]) end
  local text = "queued\t" .. record_text(name) .. "\t" .. enqueued_at .. "\t" ..
               tostring(math.ceil(since + tonumber(ttl)))
  if batch and batch ~= "" then text = text .. "\tbatch=" .. record_text(batch) end
  return text
end

-- queued_record: the record of a job just pushed on its queue with a fresh jid, packed
-- as text at once; ``batch`` ("" or nil: none) the batch it is a member of.
local function queued_record(key, ttl, name, enqueued_at, batch)
  local live, jid = live_place(key)
  local since = tonumber(enqueued_at) -- the caller's clock: near enough for the bound
  if batch == "" then batch = nil end
  if not live or not since then
    local lib = record_library()
    return lib.write(key, lib.set({}, "state", "queued", "name", name,
                                  "enqueued_at", enqueued_at, "batch", batch or false),
                     ttl, nil)
  end
  redis.pcall("HSET", live, jid, "queued\t" .. record_text(name) .. "\t" .. enqueued_at ..
              "\t" .. tostring(math.ceil(since + tonumber(ttl))) ..
              (batch and ("\tbatch=" .. record_text(batch)) or ""))
end

local function drop_record(key) return record_library().drop(key) end

-- record_state: the record's state (nil: none), and whether a cancel waits for its job.
local function record_state(key)
  local fields = read_record(key)
  if not fields then return nil, false end
  return fields.state, fields.cancel == "1"
end

local function record_alive(key) return record_library().alive(key) end

-- cancel_pending: whether a cancel waits to drop this job (its record's ``cancel``).
local function cancel_pending(key)
  local _, pending = record_state(key)
  return pending
end

-- drop_cancelled: the copy of a cancelled job was dropped: the record says so and is
-- kept ``ttl`` seconds more.
local function drop_cancelled(key, now, ttl)
  mark_record(key, ttl, "cancel", false, "by", false, "state", "cancelled",
              "finished_at", now)
end

-- payload_bid: the batch a raw job names (its payload's ``bid``), or nil: for a record
-- made afresh for a member whose record had gone (expired, swept), so that its end is
-- still noted for its batch. Decoded: a rare path, and a pattern could be fooled by an
-- argument holding the same text.
local function payload_bid(raw)
  if not raw or not string.find(raw, '"bid":', 1, true) then return nil end
  local ok, payload = pcall(cjson.decode, raw)
  if ok and type(payload) == "table" and type(payload.bid) == "string" and payload.bid ~= "" then
    return payload.bid
  end
  return nil
end

-- payload_identity: the name (``class``), enqueue time and batch a raw job names, each
-- or false: for the record made afresh when a member of a set is retried by hand after
-- its record went (issue 45: the job showed ``job -``, ``enqueued -`` after the retry).
-- Decoded: a rare path, and a pattern could be fooled by an argument holding the text.
local function payload_identity(raw)
  local ok, payload = pcall(cjson.decode, raw or "")
  if not ok or type(payload) ~= "table" then return false, false, false end
  local name = type(payload.class) == "string" and payload.class or false
  local since = tonumber(payload.enqueued_at)
  local bid = type(payload.bid) == "string" and payload.bid ~= "" and payload.bid or false
  return name, since and string.format("%.17g", since) or false, bid
end

-- fetch_record: the record of job ``jid`` just fetched from the queue whose records are
-- at ``prefix`` (live hash ``live``) says running, by ``by`` since ``now``; or, when a
-- cancel waits for the job, that its copy was dropped (kept ``cancelled_ttl`` seconds):
-- returns true then, and the caller drops it. No record (it expired, or the job predates
-- records): one is made, bounded ``live_ttl`` seconds, with the batch ``raw`` names.
-- The usual record — live, never run, no cancel, no dedup — is edited as text: its state
-- swapped, the fields of the run appended
-- (``running_tail``, the same for every job of one fetch: made once, little garbage for
-- Lua's collector, whose work grows with every string a script makes).
-- A job of a coalesced key (``merged_by=<digest>``, coalesce.lua) into which enqueues
-- merged while it waited (the key's state holds ``merge:<jid>``) runs with the arguments
-- merged: returned second (the caller puts them where the job now is), with the job's
-- own history (``lib_with_history``), the merge spent in the same step.
local running_tail, running_tail_of = nil, nil

local function fetch_record(prefix, live, jid, by, now, cancelled_ttl, live_ttl, raw)
  local text = redis.pcall("HGET", live, jid)
  -- "by=" without its tab: a run's ``by`` and a coalesced job's ``merged_by`` in one look
  -- (no cost to the jobs of no dedup key); a value holding the text only costs the
  -- general path, never a wrong one.
  if type(text) == "string" and not string.find(text, "\tcancel=", 1, true)
      and not string.find(text, "by=", 1, true) then
    local tab = string.find(text, "\t", 1, true)
    if tab then
      if running_tail_of ~= now then
        running_tail_of = now
        running_tail = "\tby=" .. record_text(by) .. "\tstarted_at=" .. record_text(now)
      end
      redis.pcall("HSET", live, jid, "running" .. string.sub(text, tab) .. running_tail)
      return false
    end
  end
  local key = prefix .. jid
  local lib = record_library()
  local fields, origin = lib.read(key)
  local state = fields and fields.merged_by and
                string.sub(prefix, 1, -5) .. "coalesce:" .. fields.merged_by
  if fields and fields.cancel == "1" then
    lib.write(key, lib.set(fields, "cancel", false, "by", false, "state", "cancelled",
                           "finished_at", now), cancelled_ttl, origin)
    if state then redis.pcall("HDEL", state, "merge:" .. jid) end -- never to run
    return true
  end
  lib.write(key, lib.set(fields or {batch = payload_bid(raw)}, "state", "running", "by", by,
                         "started_at", now), (not fields) and live_ttl or nil, origin)
  if not state then return false end
  local merged = redis.pcall("HGET", state, "merge:" .. jid)
  if type(merged) ~= "string" then return false end
  redis.pcall("HDEL", state, "merge:" .. jid)
  if jid_in(merged) ~= jid then return false end -- not this job's (a co-tenant's garbage)
  return false, lib.with_history(raw or "", merged)
end

-- finish_record: the record of a job that ran says how it ended (``state``, at ``now``,
-- its ``result`` as JSON or false), kept ``ttl`` seconds; a cancel it had is spent. The
-- usual record — live, running once, no cancel — is edited as text and SET whole.
local finished_tail, finished_tail_of, expiry_text, expiry_of = nil, nil, nil, nil
local function finish_record(key, ttl, state, now, result)
  local live, jid = live_place(key)
  local text = live and redis.pcall("HGET", live, jid)
  if type(text) == "string" and not string.find(text, "\tcancel=", 1, true)
      and not string.find(text, "\tfinished_at=", 1, true)
      and not string.find(text, "\tresult=", 1, true)
      and not string.find(text, "\tbatch=", 1, true) -- a member: its note (lib_write)
      and not string.find(text, "\twatchers=", 1, true) then -- a parent: the same
    local tab = string.find(text, "\t", 1, true)
    if tab then
      if finished_tail_of ~= now then
        finished_tail_of, finished_tail = now, "\tfinished_at=" .. record_text(now)
      end
      local finished = state .. string.sub(text, tab) .. finished_tail
      if result then finished = finished .. "\tresult=" .. record_text(result) end
      if expiry_of ~= ttl then -- as text, once: a number is formatted at every call
        expiry_of, expiry_text = ttl, tostring(math.max(1, math.ceil(tonumber(ttl))))
      end
      redis.pcall("SET", key, finished, "EX", expiry_text)
      redis.pcall("HDEL", live, jid)
      return
    end
  end
  record_library().mark(key, ttl, "cancel", false, "state", state, "finished_at", now,
                        "result", result)
end
