-- debounce: a job of a key (``options(debounce=S)``) waits S seconds; an enqueue of the
-- same key while it still waits moves it to S seconds from now with the new arguments
-- (keeping its jid) instead of adding a job: a burst runs once, S seconds after its last
-- enqueue, with the last arguments. One step: two enqueuers of one key at once make one
-- job. (A job already promoted onto its queue, running or gone no longer waits: the next
-- enqueue makes a new one.)
-- KEYS[1] the key's state (hash: jid, raw: its waiting job as it stands in the schedule)
-- KEYS[2] the queue's schedule zset   (both in the queue's slot)
-- ARGV[1] the new job's jid   ARGV[2] the new raw job
-- ARGV[3] S (seconds)   ARGV[4] the caller's clock (epoch s, if TIME is refused)
-- ARGV[5] the record prefix ("": no records)   ARGV[6] a live record's bound (s)
-- ARGV[7] the job's name   ARGV[8] seconds the state is kept past the due time
-- ARGV[9] the bytes of ARGV[2] before its own jid (absent: 8, ``{"jid":"`` first): a
--   client middleware may write fields before it, even one holding a "jid" of its own
--   (dedup.placed finds it), so a merge writes the waiting job's jid there, not by
--   pattern
-- Returns {1, jid}: a new job waits; {0, jid}: the waiting job of the key was moved and
-- took the new arguments (jid: its own).
-- The waiting job's member is replaced, never removed first: ZADD before ZREM.
-- Error "WRONGTYPE <what> <key> is not a <type> ..." (nothing written): the key's state
-- or the schedule holds another type (a co-tenant's key; redis/dedup.py: WrongTypeKey).
-- Model: none — dedup (not modelled); the job it schedules is enqueue's
local jid_at = tonumber(ARGV[9] or "8")
if string.sub(ARGV[2], jid_at + 1, jid_at + #ARGV[1]) ~= ARGV[1] then
  return redis.error_reply("ERR debounce: the new job's jid is not at byte " .. jid_at)
end
local refused = key_foreigns({{"debounce key", KEYS[1], "hash"},
                              {"schedule", KEYS[2], "zset"}})
if refused then return refused end
local now = redis_now(ARGV[4])
local delay = tonumber(ARGV[3])
local due = now + delay
local prefix = ARGV[5]
local held = redis.call("HMGET", KEYS[1], "jid", "raw")
local jid, old = held[1], held[2]
if jid and old and redis.call("ZSCORE", KEYS[2], old)
    and not (prefix ~= "" and cancel_pending(prefix .. jid)) then
  local raw = string.sub(ARGV[2], 1, jid_at) .. jid ..
              string.sub(ARGV[2], jid_at + #ARGV[1] + 1)
  if raw ~= old then
    redis.call("ZADD", KEYS[2], due, raw)
    redis.call("ZREM", KEYS[2], old)
  else
    redis.call("ZADD", KEYS[2], due, raw)
  end
  redis.call("HSET", KEYS[1], "raw", raw)
  redis.call("EXPIRE", KEYS[1], math.ceil(delay + tonumber(ARGV[8])))
  if prefix ~= "" then
    mark_record(prefix .. jid, tonumber(ARGV[6]) + delay, "state", "scheduled")
  end
  return {0, jid}
end
redis.call("ZADD", KEYS[2], due, ARGV[2])
if prefix ~= "" then
  new_record(prefix .. ARGV[1], tonumber(ARGV[6]) + delay, "state", "scheduled",
             "name", ARGV[7], "enqueued_at", ARGV[4])
end
redis.call("HSET", KEYS[1], "jid", ARGV[1], "raw", ARGV[2])
redis.call("EXPIRE", KEYS[1], math.ceil(delay + tonumber(ARGV[8])))
return {1, ARGV[1]}
