-- file_unsettled: file a record handed over by a stopping process in retry or dead.
-- KEYS[1] unsettled list             KEYS[2] the record's destination zset
-- ARGV[1] the record (must be the list's head)   ARGV[2] the entry to file
-- ARGV[3] delay: score = Redis TIME + delay      ARGV[4] the caller's clock, if TIME is refused
-- ARGV[5] dead_max_jobs, ARGV[6] dead_max_age (s): trim the destination if it is the dead
-- set ("0": no trim)
-- ARGV[7] the record prefix (the job's status record: ``<prefix><jid>``; optional)
-- ARGV[8] its state ("retrying", "dead")   ARGV[9] its TTL (s, after the delay)
-- A delay that is not a finite number counts as 0: a corrupt record must not block the
-- list (NaN is refused by ZADD) nor be filed where it never comes due (inf).
-- Returns 1 if filed, 0 if the head is another record (filed by someone else first).
-- Written before removed.
-- Model: none — the filing of a handed-over failure (park_unsettled; not modelled)
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  return 0
end
local now = redis_now(ARGV[4])
local delay = tonumber(ARGV[3])
if not delay or delay ~= delay or delay == math.huge or delay == -math.huge then delay = 0 end
redis.call("ZADD", KEYS[2], now + delay, ARGV[2])
redis.call("LPOP", KEYS[1])
trim_dead(KEYS[2], now, ARGV[5], ARGV[6])
local jid = ARGV[7] and jid_in(ARGV[2])
if jid then -- it said running until now (its process had stopped): say where it is
  mark_record(ARGV[7] .. jid, tonumber(ARGV[9]) + delay, "by", false, "cancel", false,
              "state", ARGV[8])
end
return 1
