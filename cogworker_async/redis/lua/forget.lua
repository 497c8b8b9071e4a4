-- forget: a process that is gone (stopped cleanly, or dead and its jobs recovered) leaves
-- one slot's registries — but only once its in-progress list there is empty and it is not
-- alive. Run in each queue slot it beat to, then in the namespace's slot.
-- KEYS[1] its in-progress list (in the namespace's slot: a name nothing writes)
-- KEYS[2] the slot's registry of identities   KEYS[3] last_beat hash
-- KEYS[4] its alive marker                     KEYS[5] declared_dead set
-- KEYS[6] beats hash, KEYS[7] its workers hash: optional (the namespace's slot only)
-- ARGV[1] identity   ARGV[2] "1" to keep it in declared_dead (recovery: so that a
-- paused process, if it ever beats again, learns it was declared dead), else "0"
-- Returns 1 if forgotten, 0 if it still has jobs in progress or is alive.
-- beats and declared_dead are best effort, as in beat.lua: one of the wrong type must not
-- fail the call halfway (the registry already left), or every clean stop and every
-- recovery of a forgotten identity would report a failure
-- (tests/worker/chaos/redisfaults/test_wrong_types.py).
-- Model: forget (model/protocol.pml); upholds: batch_ends
-- Alive: a marker with a TTL, as every beat writes it (requeue.lua: one without is none).
if redis.call("LLEN", KEYS[1]) > 0 or redis.call("PTTL", KEYS[4]) > 0 then
  return 0
end
redis.call("SREM", KEYS[2], ARGV[1])
redis.call("HDEL", KEYS[3], ARGV[1])
if KEYS[6] then redis.pcall("HDEL", KEYS[6], ARGV[1]) end
if KEYS[7] then redis.call("DEL", KEYS[7]) end
if ARGV[2] ~= "1" then redis.pcall("SREM", KEYS[5], ARGV[1]) end
return 1
