-- forget: a process that is gone (stopped cleanly, or dead and its jobs recovered) leaves
-- the registries — but only once its in-progress list is empty and it is not alive.
-- KEYS[1] its in-progress list       KEYS[2] in_progress_identities set
-- KEYS[3] last_beat hash             KEYS[4] beats hash
-- KEYS[5] its workers hash           KEYS[6] its process key (alive marker)
-- KEYS[7] declared_dead set
-- ARGV[1] identity   ARGV[2] "1" to keep it in declared_dead (recovery: so that a
-- paused process, if it ever beats again, learns it was declared dead), else "0"
-- Returns 1 if forgotten, 0 if it still has jobs in progress or is alive.
-- beats and declared_dead are best effort, as in beat.lua: one of the wrong type must not
-- fail the call halfway (the registry already left), or every clean stop and every
-- recovery of a forgotten identity would report a failure
-- (tests/chaos/redisfaults/test_wrong_types.py).
if redis.call("LLEN", KEYS[1]) > 0 or redis.call("EXISTS", KEYS[6]) == 1 then
  return 0
end
redis.call("SREM", KEYS[2], ARGV[1])
redis.call("HDEL", KEYS[3], ARGV[1])
redis.pcall("HDEL", KEYS[4], ARGV[1])
redis.call("DEL", KEYS[5])
if ARGV[2] ~= "1" then redis.pcall("SREM", KEYS[7], ARGV[1]) end
return 1
