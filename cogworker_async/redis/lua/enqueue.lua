-- enqueue: push jobs on one queue, with their status records; wake idle workers.
-- KEYS[1] queue list (the queue's name is registered by the caller: another slot)
-- ARGV[1] queue name                ARGV[2] wake channel (pub/sub, not a key)
-- ARGV[3] record prefix (``<prefix><jid>``, in the queue's slot; "": no records,
-- ``track_jobs=False``)
-- ARGV[4] the records' TTL (s)      ARGV[5] enqueued_at (the caller's clock)
-- ARGV[6] the jobs' name            ARGV[7] "1": the caller chose the jid (``options(jid=)``):
-- refuse a jid whose record says it is still queued, scheduled, running or retrying, or
-- whose cancelled copy has not been dropped yet; "2": once — refuse a jid that has a
-- record at all, finished too, or that was ever enqueued so (its ``once:<jid>`` marker,
-- kept the records' TTL whatever ``keep_status`` is: a batch's callback, enqueued once
-- by the relay even if it ran and its record went before the relay's next pass,
-- worker/notes_relay.py; an outbox row's, cut to a minute by its relay once the row's
-- delete has committed: moves.keep_once); "0": fresh jids, not looked up
-- ARGV[8] the batch the jobs join (its bid, in their records: their ends are noted for
-- it, _record.lua); "": none
-- ARGV[9] "p": a job of the call may name a priority or a group (each is then looked at,
-- _queue.lua); "": none does (the caller looked: every job goes on the queue's list, unread)
-- ARGV[10..] jid, raw job pairs, oldest first
-- A job that names a group goes on its group's list, one that names a priority other than
-- 0 on its priority's list (_queue.lua).
-- Returns {length of the queue's list after the push}, or {length, error} if the wake-up could not be
-- published (the jobs are pushed all the same); {-1} if a chosen jid was refused
-- (nothing written).
-- Not idempotent (a second call pushes the jobs twice): callers never retry it blindly.
-- An error (a key of the wrong type) means nothing was pushed: the queue's type is
-- checked (LLEN) before the first push.
-- Model: enqueue (model/protocol.pml); upholds: no_job_lost, callback_once
local prefix, ttl = ARGV[3], ARGV[4]
-- Every destination checked before anything is written (a once marker promises the
-- push: a marker left by a push that then failed would refuse the caller's retry, and
-- the job would be lost): the queue's list (LLEN: WRONGTYPE raises here), and each
-- routed job's own list.
local length = redis.call("LLEN", KEYS[1])
if ARGV[9] == "p" then
  for i = 10, #ARGV, 2 do
    if not queue_library().writable(KEYS[1], ARGV[i + 1]) then
      return redis.error_reply("WRONGTYPE a list of queue " .. ARGV[1] .. " (its group's or "
                               .. "priority's) holds another type: nothing pushed")
    end
  end
end
if ARGV[7] == "1" and prefix ~= "" then
  for i = 10, #ARGV, 2 do
    if record_library().alive(prefix .. ARGV[i]) then return {-1} end
  end
elseif ARGV[7] == "2" then -- once: a jid ever enqueued so, whatever its record became
  local slot = string.sub(KEYS[1], 1, -6) -- "<ns>:{q}:queue" -> "<ns>:{q}:"
  for i = 10, #ARGV, 2 do
    local marker = slot .. "once:" .. ARGV[i]
    if (prefix ~= "" and record_library().read(prefix .. ARGV[i]))
        or not redis.call("SET", marker, "1", "NX", "EX", ttl) then
      -- Refused, and still a write (the marker's TTL renewed): a caller that waits for a
      -- replica (``durability``) then waits for everything before it too, the first
      -- push of this jid included, before it takes the refusal as "pushed already".
      redis.call("EXPIRE", marker, ttl)
      return {-1}
    end
  end
end
local last = #ARGV
local raws = {}
local routed = ARGV[9] == "p"
for i = 10, last, 2 do
  local raw = ARGV[i + 1]
  if not routed or (queue_library().priority(raw) == 0 and not queue_library().group(raw)) then
    raws[#raws + 1] = raw
  else -- on its group's or priority's list (_queue.lua); the length returned stays the
    -- queue list's
    queue_library().push(KEYS[1], raw, false, redis.call)
  end
end
-- unpack() has a stack limit: push in chunks.
for first = 1, #raws, 1000 do
  length = redis.call("LPUSH", KEYS[1], unpack(raws, first, math.min(first + 999, #raws)))
end
-- Every job of one call has the same name, enqueue time and bound: the same record text,
-- packed once (each string a script makes is work for Lua's collector).
local live, text = nil, nil
if prefix ~= "" then
  live, text = live_records_of(prefix), queued_text(ARGV[6], ARGV[5], ttl, ARGV[8])
end
for i = 10, last, 2 do
  if ARGV[i] ~= "" and prefix ~= "" then -- a job without a jid (by hand): no record
    if ARGV[7] ~= "0" then record_library().drop(prefix .. ARGV[i]) end -- a finished run's go
    if text then
      redis.pcall("HSET", live, ARGV[i], text)
    else
      queued_record(prefix .. ARGV[i], ttl, ARGV[6], ARGV[5], ARGV[8])
    end
  end
end
local refused = wake(ARGV[2], ARGV[1])
if refused then return {length, refused} end
return {length}
