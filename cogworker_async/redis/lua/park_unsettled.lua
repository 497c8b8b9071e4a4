-- park_unsettled: at shutdown, a job that ran and failed but whose failure could not be
-- filed is handed over to the unsettled list, for any live process to file — never
-- requeued, which would run it again.
-- KEYS[1] in-progress list           KEYS[2] unsettled list
-- ARGV[1] raw job as fetched         ARGV[2] its record: JSON {set, delay, payload}
-- Returns 1 if handed over, 0 if the job was no longer in progress (a no-op).
-- Written before removed; safe to run twice.
-- Model: none — a shutdown's hand-over of failures (a file_failure in two moves, each destination first; not modelled)
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("RPUSH", KEYS[2], ARGV[2])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
