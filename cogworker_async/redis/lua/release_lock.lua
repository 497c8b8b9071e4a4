-- release_lock: delete a lock only if its owner still holds it (unique and running locks).
-- KEYS[1] the lock   ARGV[1] the owner (a jid)
-- Returns 1 if released, 0 if it was gone or another owner's (left alone).
-- Model: none — a lock, not a move of a job
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
