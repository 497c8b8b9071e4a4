-- beat: this process is alive, as seen by one slot. Written from the heartbeat thread,
-- on its own connection: once in the namespace's slot (the registry the dashboard and
-- recovery read) and once in the slot of each queue the process serves (where recovery
-- decides, atomically with the requeue, whether its list there is an orphan's).
-- KEYS[1] process:<identity> (alive marker, with a TTL)   KEYS[2] last_beat hash
-- KEYS[3] the slot's registry of identities (a set)
-- KEYS[4] declared_dead set (identities whose jobs recovery took from this slot)
-- KEYS[5] beats hash (identity -> the last beat's info, no TTL: forensics), optional
-- ARGV[1] identity   ARGV[2] info (JSON), the alive marker's value
-- ARGV[3] TTL of the alive marker (ms)
-- ARGV[4] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[5] "1" if this process has beaten here before, else "0"
-- Returns {status, now}: status 1 = alive, as expected; 2 = this process had been
-- declared dead while it was paused (recovery took its jobs and left the mark in
-- declared_dead): a zombie; 3 = its keys are gone but no recovery declared it dead (Redis
-- restarted without persistence, or lost them in a failover): re-registered by this very
-- beat, it keeps its running jobs and lists them again. Only the mark is evidence that
-- the jobs run elsewhere: a missing key alone must never cancel them.
-- A first beat is never a zombie, and clears a declared_dead entry left by an earlier
-- process with the same identity. A later beat leaves the mark: it reports a zombie on
-- every beat until the process has fenced itself and cleared it (Store.clear_declared_dead),
-- so a lost reply never means a lost fencing.
-- The stamp comes from Redis TIME: recovery compares it with the same clock.
-- declared_dead and beats are best effort: one of the wrong type must not stop the beat
-- (the process would look dead and its running jobs be recovered and run twice).
-- Model: beat (model/protocol.pml); upholds: no_rerun
local now = redis_now(ARGV[4])
local status = 1
local declared = false
if ARGV[5] == "1" then
  declared = redis.pcall("SISMEMBER", KEYS[4], ARGV[1]) == 1
  local forgotten = redis.call("EXISTS", KEYS[1]) == 0 and redis.call("HEXISTS", KEYS[2], ARGV[1]) == 0
  if declared then status = 2 elseif forgotten then status = 3 end
else
  -- On a first beat the mark can only be a predecessor's (a configured identity reused
  -- after that process died); this process fetched nothing yet.
  redis.pcall("SREM", KEYS[4], ARGV[1])
end
redis.call("SET", KEYS[1], ARGV[2], "PX", tonumber(ARGV[3]))
redis.call("HSET", KEYS[2], ARGV[1], string.format("%.6f", now))
if KEYS[5] then redis.pcall("HSET", KEYS[5], ARGV[1], ARGV[2]) end
redis.call("SADD", KEYS[3], ARGV[1])
return {status, string.format("%.6f", now)}
