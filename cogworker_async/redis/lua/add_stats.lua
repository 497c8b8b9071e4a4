-- add_stats: one process's stats flush — the totals, today's counts and the run metrics —
-- applied at most once per (process, flush number), so that a flush whose reply was lost
-- (a timeout, a cancelled flush at shutdown) can be sent again without counting twice.
-- Everything here lives in the namespace's slot.
-- KEYS[1] the last applied flush number of this run of the process (string, expires)
-- KEYS[2] processed total   KEYS[3] processed today   KEYS[4] failed total
-- KEYS[5] failed today      KEYS[6..] one run-metrics hash per minute (observe/run_metrics.py)
-- ARGV[1] this flush's number (increasing per process)   ARGV[2] processed   ARGV[3] failed
-- ARGV[4] seconds today's counts are kept   ARGV[5] seconds a minute's hash is kept
-- ARGV[6] seconds the flush number is kept
-- ARGV[7..] for each minute hash, in KEYS order: its field count n, then n field/increment
-- pairs
-- Returns 1 if applied, 0 if this flush (or a later one) was applied already.
-- A flush number of the wrong type counts as none (SET replaces it): a damaged key must
-- not stop every flush of this process.
-- Model: none — counters only
local seq = tonumber(ARGV[1])
local got = redis.pcall("GET", KEYS[1])
local last = (type(got) == "string" and tonumber(got)) or 0
if seq <= last then
  return 0
end
redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[6])
local counts = {{2, 3, tonumber(ARGV[2])}, {4, 5, tonumber(ARGV[3])}}
for _, count in ipairs(counts) do
  if count[3] > 0 then
    -- pcall: the number is set already, so a damaged key (a wrong type) must not end the
    -- script halfway; it is skipped, and everything else of this flush is applied.
    redis.pcall("INCRBY", KEYS[count[1]], count[3])
    redis.pcall("INCRBY", KEYS[count[2]], count[3])
    redis.pcall("EXPIRE", KEYS[count[2]], ARGV[4])
  end
end
local at = 7
for index = 6, #KEYS do
  local fields = tonumber(ARGV[at])
  for pair = 1, fields do
    local field_at = at + pair * 2 - 1
    redis.pcall("HINCRBY", KEYS[index], ARGV[field_at], ARGV[field_at + 1])
  end
  redis.pcall("EXPIRE", KEYS[index], ARGV[5])
  at = at + 1 + fields * 2
end
return 1
