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
-- Model: none — the record of a job removed by hand
local fields, origin = read_record(KEYS[1])
if not fields or fields.state == "succeeded" or fields.state == "dead"
    or fields.state == "cancelled" then
  return 0
end
write_record(KEYS[1], set_fields(fields, "cancel", false, "by", false, "state", "cancelled",
                                 "finished_at", redis_now(ARGV[1])), ARGV[2], origin)
return 1
