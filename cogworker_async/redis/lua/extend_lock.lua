-- extend_lock: make an owned lock live at least ARGV[2] ms more (a unique lock over a
-- retry delay). KEYS[1] the lock   ARGV[1] the owner (a jid)   ARGV[2] ms
-- Returns 1 if extended (never shortened), 0 if the lock is gone or not the owner's.
-- Model: none — a unique job's lock, not a move of a job
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call("PTTL", KEYS[1]) < tonumber(ARGV[2]) then
  redis.call("PEXPIRE", KEYS[1], tonumber(ARGV[2]))
end
return 1
