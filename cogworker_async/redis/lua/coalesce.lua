-- coalesce: at most one job of a key waits while another runs (``options(coalesce=True)``).
-- The key's state names its latest job L; an enqueue, by what L's record says:
-- * queued (on its list, not started): L takes the new arguments in place (LSET), keeping
--   its jid and its place;
-- * waiting (a follow-up, for the job before it): its copy takes the new arguments;
-- * running, retrying: a follow-up N is made that runs after L, whatever L's end
--   (a dependent of L, ``on_parent_failure="run"``: dep_wait.lua and dep_watch.lua in one
--   step, both in this slot), and becomes the latest;
-- * anything else (none, ended, a cancel waiting): a new job N is pushed and is the latest.
-- One step: concurrent enqueuers of one key never make two follow-ups.
-- KEYS[1] the key's state (hash: jid, raw: L as it stands in its list or copy)
-- KEYS[2] the queue's list   (the rest is derived in its slot: its other lists, records,
-- dep copies, the waiting zset)
-- ARGV[1] the new job's jid   ARGV[2] the new raw job
-- ARGV[3] the caller's clock (epoch s)   ARGV[4] the record prefix (records are needed)
-- ARGV[5] a live record's bound (s)   ARGV[6] the job's name   ARGV[7] the queue's name
-- ARGV[8] wake channel   ARGV[9] seconds the state is kept
-- ARGV[10] the bytes of ARGV[2] before its own jid (absent: 8; as debounce.lua's): a
--   merge writes the latest job's jid there
-- Returns {how, jid}: how is "merged" (jid: L), "following" or "new" (jid: N).
local jid_at = tonumber(ARGV[10] or "8")
if string.sub(ARGV[2], jid_at + 1, jid_at + #ARGV[1]) ~= ARGV[1] then
  return redis.error_reply("ERR coalesce: the new job's jid is not at byte " .. jid_at)
end
local prefix, queue = ARGV[4], ARGV[7]
local slot = string.sub(KEYS[2], 1, -6)
local held = redis.call("HMGET", KEYS[1], "jid", "raw")
local latest, old = held[1], held[2]

local function remember(jid, raw)
  redis.call("HSET", KEYS[1], "jid", jid, "raw", raw)
  redis.call("EXPIRE", KEYS[1], tonumber(ARGV[9]))
end

if latest and old then
  local record = prefix .. latest
  local fields, origin = read_record(record)
  local state = fields and not fields.cancel and fields.state
  local raw = string.sub(ARGV[2], 1, jid_at) .. latest ..
              string.sub(ARGV[2], jid_at + #ARGV[1] + 1)
  if state == "queued" then
    local list = queue_library().list_of(KEYS[2], old)
    local at = redis.pcall("LPOS", list, old)
    if type(at) == "number" then
      if queue_library().list_of(KEYS[2], raw) == list then
        redis.call("LSET", list, at, raw) -- in place: its turn kept
      else -- another group or priority now: on that list (written, then removed here)
        queue_library().push(KEYS[2], raw, false, redis.call)
        redis.call("LREM", list, 1, old)
      end
      remember(latest, raw)
      return {"merged", latest}
    end
  elseif state == "waiting" then
    local copy = slot .. "dep:" .. latest
    if redis.call("HGET", copy, "raw") == old then
      redis.call("HSET", copy, "raw", raw)
      remember(latest, raw)
      return {"merged", latest}
    end
  elseif state == "running" or state == "retrying" then
    local follow, parent = ARGV[1], queue .. "/" .. latest
    local now = redis_now(ARGV[3])
    redis.call("HSET", slot .. "dep:" .. follow, "raw", ARGV[2], "tail", "", "policy", "run",
               "pass", "", "parents", parent, "created_at", ARGV[3])
    redis.call("SADD", slot .. "dep_pending:" .. follow, parent)
    redis.call("ZADD", slot .. "waiting", now, follow)
    new_record(prefix .. follow, ARGV[5], "state", "waiting", "name", ARGV[6],
               "enqueued_at", ARGV[3])
    local watchers = fields.watchers or ""
    local watcher = queue .. "/" .. follow
    fields.watchers = watchers == "" and watcher or (watchers .. "\30" .. watcher)
    write_record(record, fields, nil, origin)
    remember(follow, ARGV[2])
    return {"following", follow}
  end
end
queue_library().push(KEYS[2], ARGV[2], false, redis.call)
new_record(prefix .. ARGV[1], ARGV[5], "state", "queued", "name", ARGV[6],
           "enqueued_at", ARGV[3])
remember(ARGV[1], ARGV[2])
wake(ARGV[8], queue)
return {"new", ARGV[1]}
