-- move_member: move one entry from a zset to another (a bad scheduled entry to dead,
-- later the dashboard's "kill" and "retry").
-- KEYS[1] source zset                KEYS[2] destination zset
-- ARGV[1] member as it stands        ARGV[2] entry to write in the destination
-- ARGV[3] delay: score = Redis TIME + delay   ARGV[4] the caller's clock, if TIME is refused
-- ARGV[5] dead_max_jobs, ARGV[6] dead_max_age (s): trim the destination if it is the dead
-- set ("0": no trim)
-- KEYS[3] the job's status record (optional)   ARGV[7] its state there ("dead",
-- "retrying", "scheduled")   ARGV[8] its TTL (s, after the delay)
-- Returns 1 if moved, 0 if the member was gone. Written before removed; safe to run twice.
-- The same entry moved within one zset only gets its new score (never removed).
-- Model: none — the dashboard's kill and retry by hand
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
local now = redis_now(ARGV[4])
redis.call("ZADD", KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
if KEYS[1] ~= KEYS[2] or ARGV[1] ~= ARGV[2] then
  redis.call("ZREM", KEYS[1], ARGV[1])
end
trim_dead(KEYS[2], now, ARGV[5], ARGV[6])
if KEYS[3] then
  -- A member retried by hand after its record went (keep_status): the record made
  -- afresh names its batch, so that its end is still noted.
  local bid = ARGV[7] ~= "dead" and not read_record(KEYS[3]) and payload_bid(ARGV[2])
  if bid then
    mark_record(KEYS[3], tonumber(ARGV[8]) + tonumber(ARGV[3]), "state", ARGV[7], "batch", bid)
  elseif ARGV[7] == "dead" then
    mark_record(KEYS[3], tonumber(ARGV[8]) + tonumber(ARGV[3]), "cancel", false, "by", false,
                "state", ARGV[7])
  else
    mark_record(KEYS[3], tonumber(ARGV[8]) + tonumber(ARGV[3]), "state", ARGV[7])
  end
end
return 1
