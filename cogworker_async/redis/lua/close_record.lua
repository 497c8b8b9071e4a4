-- close_record: a job that someone removed by hand (deleted from a queue, a schedule or
-- the retry set, from the dashboard or the CLI) will never run: its status record says
-- cancelled, and is kept as a finished job's is.
-- KEYS[1] the job's status record
-- ARGV[1] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[2] the record's TTL (s): ``keep_status``
-- Returns 1 if the record was closed, 0 if there is none or its job had ended already
-- (a dead job deleted from the dead set keeps its record, until it expires).
-- Runs after the removal (another script): a crash between the two leaves the record
-- saying the job waits, until its TTL; the job is gone either way.
local state = redis.pcall("HGET", KEYS[1], "state")
if type(state) ~= "string" or state == "succeeded" or state == "dead"
    or state == "cancelled" then
  return 0
end
redis.pcall("HDEL", KEYS[1], "cancel", "by")
mark_record(KEYS[1], ARGV[2], "state", "cancelled", "finished_at", redis_now(ARGV[1]))
return 1
