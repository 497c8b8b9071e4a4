-- dep_apply: parents' ends reach a waiting job, in its queue's slot; when the last one
-- has, in the same step, the job is pushed on its queue — or cancelled, or filed in dead,
-- as its ``on_parent_failure`` says, when a parent did not succeed.
-- KEYS[1] its dep hash   KEYS[2] its pending set   KEYS[3] its status record
-- KEYS[4] the queue's waiting zset   KEYS[5] the queue's arming zset
-- KEYS[6] the queue list   KEYS[7] the queue's dead zset
-- ARGV[1] jid   ARGV[2] now (epoch s)   ARGV[3] wake channel   ARGV[4] queue name
-- ARGV[5] a live record's bound (s)   ARGV[6] a finished record's (keep_status, s)
-- ARGV[7] dead_max_jobs   ARGV[8] dead_max_age (s)
-- ARGV[9] "1": every parent is watched now (it leaves ``arming``)
-- ARGV[10] the largest job a worker reads (max_payload_bytes; "0": no check)
-- ARGV[11..] parent ("<queue>/<jid>"), end, result triples (result: the parent's as JSON,
-- "" when it kept none; end: succeeded, dead, cancelled)
-- Returns what became of it: "waiting", "released", "cancelled", "dead", or "gone" (no
-- such job waits: released or ended before, or never; nothing done).
-- A job that takes its parent's result (``pass``) is filed dead, never run with None in
-- its place, when the parent succeeded keeping none (or it expired before this step:
-- ``ParentResultMissing``), or when the result makes it larger than a worker reads
-- (``ParentResultTooLarge``); its dead entry holds null there, readable, and names that
-- parent (``missing_result_of``), as when a parent it waits for failed (policy "dead").
-- Safe to run twice and in any order: a parent counts once (SREM), and the copy, the
-- dep hash, is deleted in the step that releases or ends the job, so a repeated call
-- finds it gone. Destination first: pushed or filed, then the copy deleted.
-- Model: dep_apply (model/protocol.pml); upholds: dependent_after_parents, cancelled_never_starts, waits_end
local jid, now = ARGV[1], tonumber(ARGV[2])
local function forget()
  redis.call("DEL", KEYS[1], KEYS[2])
  redis.call("ZREM", KEYS[4], jid)
  redis.call("ZREM", KEYS[5], jid)
end
local dep = redis.call("HMGET", KEYS[1], "raw", "tail", "policy", "pass", "result")
local raw, tail, policy, pass, result = dep[1], dep[2] or "", dep[3] or "cancel", dep[4] or "", dep[5]
if not raw then
  forget()
  return "gone"
end
local fields, origin = read_record(KEYS[3])
if fields and (fields.cancel == "1" or fields.state == "cancelled") then
  -- cancelled while it waited (cancel.lua): this copy goes, unrun
  forget()
  if fields.cancel == "1" then
    write_record(KEYS[3], set_fields(fields, "cancel", false, "state", "cancelled",
                                     "finished_at", now), tonumber(ARGV[6]), origin)
  end
  return "cancelled"
end
if ARGV[9] == "1" then redis.call("ZREM", KEYS[5], jid) end
local failed, failed_end = nil, nil
local missing = nil -- the parent whose result it takes, succeeded without one
for i = 11, #ARGV - 2, 3 do
  local parent, ended = ARGV[i], ARGV[i + 1]
  if redis.call("SREM", KEYS[2], parent) == 1 then
    if ended ~= "succeeded" and not failed then failed, failed_end = parent, ended end
    if ended == "succeeded" and parent == pass then
      result = ARGV[i + 2] ~= "" and ARGV[i + 2] or "null"
      if ARGV[i + 2] == "" then missing = parent end
      redis.call("HSET", KEYS[1], "result", result)
    end
  end
end
fields = fields or {name = string.match(raw, '"class":"([^"\\]*)"')}
local function jid_of(member) return (string.gsub(member, "^[^/]*/", "")) end
-- end: the job ends unrun, ``state`` (dead: filed, with null for a result it takes, and
-- ``missing_result_of`` naming that parent: a worker refuses to run the entry retried)
local function finish(state, class, why)
  if state == "dead" then
    local whole = tail ~= "" and table.concat({raw, "null", tail}) or raw
    local marker = tail ~= "" and ',"missing_result_of":' .. cjson.encode(jid_of(pass)) or ""
    local entry = string.sub(whole, 1, -2) .. marker .. ',"error_class":"' .. class ..
            '","error_message":' .. cjson.encode(why) .. ',"failed_at":' ..
            string.format("%.6f", now) .. "}"
    redis.call("ZADD", KEYS[7], now, entry)
    trim_dead(KEYS[7], now, ARGV[7], ARGV[8])
  end
  forget()
  write_record(KEYS[3], set_fields(fields, "state", state, "finished_at", now, "error",
                                   class .. ": " .. why), tonumber(ARGV[6]), origin)
  return state
end
if failed and policy ~= "run" then
  return finish(policy == "dead" and "dead" or "cancelled", "ParentFailed",
                "parent " .. jid_of(failed) .. " " .. failed_end)
end
if redis.call("SCARD", KEYS[2]) > 0 then return "waiting" end
if missing then
  return finish("dead", "ParentResultMissing", "job " .. jid .. " takes the result of " ..
                "parent " .. jid_of(missing) .. ", which succeeded keeping none (its " ..
                "keep_result), or kept it too short to reach this job")
end
if tail ~= "" then
  local max = tonumber(ARGV[10]) or 0
  local size = #raw + #(result or "null") + #tail
  if max > 0 and size > max then
    return finish("dead", "ParentResultTooLarge", "job " .. jid .. " with the result of " ..
                  "parent " .. jid_of(pass) .. " would be " .. size .. " bytes, over " ..
                  "max_payload_bytes (" .. max .. ")")
  end
  raw = raw .. (result or "null") .. tail
end
queue_library().push(KEYS[6], raw, false, redis.call) -- at its priority (_queue.lua)
forget()
write_record(KEYS[3], set_fields(fields, "state", "queued"), tonumber(ARGV[5]), origin)
wake(ARGV[3], ARGV[4])
return "released"
