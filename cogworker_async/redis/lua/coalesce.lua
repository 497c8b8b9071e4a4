-- coalesce: at most one job of a key waits while another runs (``options(coalesce=True)``).
-- The key's state names its latest job L; an enqueue, by what L's record says:
-- * queued (on its list, not started; again after a retry, a recovery, a give-back or a
--   retry from dead: its record keeps ``merged_by``): L takes the new arguments at its
--   fetch. The state keeps them (``raw``) and, for L's fetch, ``merge:<L>``; the fetch
--   hands them over in its own step (_record.lua), with L's history
--   (its retry count...). L keeps its jid and its place, and nothing scans the list: the
--   cost is the same behind any backlog (an element found by LPOS cost 30-60 ms behind
--   600,000 jobs, and one changed by a retry was not found at all). New arguments that
--   put the job on another list (another group or priority) make a follow-up instead
--   (below): a list never holds a job of another's; a merge L already took stays for its
--   fetch (``merge:<L>`` is its own). The queue cleared since L was last put on its list
--   (the record's ``era``, the queue's ``cleared`` count then, written by _record.lua
--   whenever the record of a coalesced job becomes queued: a push, a release, a retry
--   due, a give-back...; ``cleared`` counted by clear_queue.lua): L is gone, a new job is
--   pushed;
-- * waiting (a follow-up, for the job before it): its copy takes the new arguments;
-- * running, retrying: a follow-up N is made that runs after L, whatever L's end
--   (a dependent of L, ``on_parent_failure="run"``: dep_wait.lua and dep_watch.lua in one
--   step, both in this slot), and becomes the latest;
-- * anything else (none, ended, a cancel waiting, a job pushed by an earlier build,
--   whose record has no ``merged_by``): a new job N is pushed and is the latest.
-- Each job of the key is recorded with ``merged_by=<digest>``, which the fetch reads.
-- One step: concurrent enqueuers of one key never make two follow-ups.
-- KEYS[1] the key's state (hash: jid, raw: L as it runs or its copy holds it,
--   merge:<jid>: the arguments merged into that job, waiting for its fetch)
-- KEYS[2] the queue's list   (the rest is derived in its slot: its other lists, records,
-- dep copies, the waiting zset, ``cleared``)
-- ARGV[1] the new job's jid   ARGV[2] the new raw job
-- ARGV[3] the caller's clock (epoch s)   ARGV[4] the record prefix (records are needed)
-- ARGV[5] a live record's bound (s)   ARGV[6] the job's name   ARGV[7] the queue's name
-- ARGV[8] wake channel   ARGV[9] seconds the state is kept
-- ARGV[10] the bytes of ARGV[2] before its own jid (absent: 8; as debounce.lua's): a
--   merge writes the latest job's jid there
-- Returns {how, jid}: how is "merged" (jid: L), "following" or "new" (jid: N).
-- Error "WRONGTYPE <what> <key> is not a <type> ..." (nothing written): the key's state,
-- the queue's list, its ``cleared`` count, or a key a follow-up or a merge into a
-- waiting copy writes, holds another type (a co-tenant's key; redis/dedup.py:
-- WrongTypeKey).
-- Model: none — dedup (not modelled); the job it pushes is enqueue's
local jid_at = tonumber(ARGV[10] or "8")
if string.sub(ARGV[2], jid_at + 1, jid_at + #ARGV[1]) ~= ARGV[1] then
  return redis.error_reply("ERR coalesce: the new job's jid is not at byte " .. jid_at)
end
local prefix, queue = ARGV[4], ARGV[7]
local slot = string.sub(KEYS[2], 1, -6)
local digest = string.sub(KEYS[1], #slot + #"coalesce:" + 1)
local refused = key_foreigns({{"coalesce key", KEYS[1], "hash"}, {"queue", KEYS[2], "list"},
                              {"clear count", slot .. "cleared", "string"}})
if refused then return refused end
local era = redis.call("GET", slot .. "cleared") or "0"
local held = redis.call("HMGET", KEYS[1], "jid", "raw")
local latest, old = held[1], held[2]

-- remember: ``jid`` is the key's latest job, ``raw`` as it runs. A merge an earlier job
-- took (``merge:<jid>``) stays until that job's fetch.
local function remember(jid, raw)
  redis.call("HSET", KEYS[1], "jid", jid, "raw", raw)
  redis.call("EXPIRE", KEYS[1], tonumber(ARGV[9]))
end

-- follow: the new job waits for ``parent`` (its record ``fields``, found at ``origin``)
-- and runs after it, whatever its end; it is the latest.
local function follow(parent_jid, fields, origin)
  local follower, parent = ARGV[1], queue .. "/" .. parent_jid
  local refused = key_foreigns({{"waiting copy", slot .. "dep:" .. follower, "hash"},
                                {"waiting's parents", slot .. "dep_pending:" .. follower, "set"},
                                {"waiting set", slot .. "waiting", "zset"}})
  if refused then return refused end
  local now = redis_now(ARGV[3])
  redis.call("HSET", slot .. "dep:" .. follower, "raw", ARGV[2], "tail", "", "policy",
             "run", "pass", "", "parents", parent, "created_at", ARGV[3])
  redis.call("SADD", slot .. "dep_pending:" .. follower, parent)
  redis.call("ZADD", slot .. "waiting", now, follower)
  new_record(prefix .. follower, ARGV[5], "state", "waiting", "name", ARGV[6],
             "enqueued_at", ARGV[3], "merged_by", digest)
  local watchers = fields.watchers or ""
  local watcher = queue .. "/" .. follower
  fields.watchers = watchers == "" and watcher or (watchers .. "\30" .. watcher)
  write_record(prefix .. parent_jid, fields, nil, origin)
  remember(follower, ARGV[2])
  return {"following", follower}
end

if latest and old then
  local fields, origin = read_record(prefix .. latest)
  local state = fields and not fields.cancel and fields.merged_by == digest and fields.state
  local raw = string.sub(ARGV[2], 1, jid_at) .. latest ..
              string.sub(ARGV[2], jid_at + #ARGV[1] + 1)
  if state == "queued" and fields.era == era then
    local lists = queue_library().list_of
    if lists(KEYS[2], raw) ~= lists(KEYS[2], old) then return follow(latest, fields, origin) end
    redis.call("HSET", KEYS[1], "raw", raw, "merge:" .. latest, raw)
    redis.call("EXPIRE", KEYS[1], tonumber(ARGV[9]))
    return {"merged", latest}
  elseif state == "waiting" then
    local copy = slot .. "dep:" .. latest
    local refused = key_foreign("waiting copy", copy, "hash")
    if refused then return refused end
    if redis.call("HGET", copy, "raw") == old then
      redis.call("HSET", copy, "raw", raw)
      remember(latest, raw)
      return {"merged", latest}
    end
  elseif state == "running" or state == "retrying" then
    return follow(latest, fields, origin)
  end
  -- L ran, ended or is gone (cleared, cancelled): a merge it never took goes
  redis.call("HDEL", KEYS[1], "merge:" .. latest)
end
queue_library().push(KEYS[2], ARGV[2], false, redis.call)
new_record(prefix .. ARGV[1], ARGV[5], "state", "queued", "name", ARGV[6],
           "enqueued_at", ARGV[3], "merged_by", digest)
remember(ARGV[1], ARGV[2])
wake(ARGV[8], queue)
return {"new", ARGV[1]}
