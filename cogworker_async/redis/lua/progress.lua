-- progress: a running job's progress, in its status record.
-- KEYS[1] the job's status record
-- ARGV[1] the process running it (the record's ``by``)   ARGV[2] the fraction (0..1)
-- ARGV[3] its info as JSON ("": none)
-- Returns 1 if written, 0 if the record is not this process's running job any more (it
-- ended, was recovered elsewhere, or expired): a late write never overwrites the state
-- of a later run, nor makes a record without a TTL.
-- Model: none — a record's progress field
local fields, origin = read_record(KEYS[1])
if not fields or fields.state ~= "running" or fields.by ~= ARGV[1] then
  return 0
end
write_record(KEYS[1], set_fields(fields, "progress", ARGV[2], "info", ARGV[3] ~= "" and ARGV[3]),
             nil, origin)
return 1
