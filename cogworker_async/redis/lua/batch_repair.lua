-- batch_repair: the relay's repair of a batch it let go of a dead block of (marked
-- ``orphans`` by batch_release.lua), once no block holds it: the jids it found with no
-- job behind them (joined by a dead block that never pushed them; worker/batch_reaper.py
-- read their records, and for an abandoned batch cancelled every other pending member
-- first) count cancelled, what the batch has come to is decided, and only then the mark
-- goes and the batch leaves the held index. Nothing is written if a block holds the batch
-- again, or its mark or state is no longer what the relay read (a block reopened it,
-- pushed its member and sealed meanwhile: that member may be one the relay found with no
-- record): the next pass reads it again.
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's firing set
-- KEYS[9] its index of batches not ended   KEYS[10] its index of held batches
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] the bound of an ended batch's keys (s)
-- ARGV[4] the mark as the relay read it ("": none)   ARGV[5] the state it read
-- ARGV[6..] the jids that count cancelled
-- Returns the batch's state, "retry" (nothing written: read it again), or false (no such
-- batch: it leaves the held index). Safe to run twice: the mark gone, a second run
-- finds it changed and writes nothing.
-- Model: batch_repair (model/protocol.pml); upholds: batch_ends, callback_after_members
local k = batch_keys(1)
local got = redis.call("HMGET", k[1], "state", "holders", "orphans")
local state, holders, mark = got[1], got[2] or "", got[3] or ""
if not state then
  redis.call("ZREM", KEYS[10], ARGV[1])
  return false
end
if string.find(holders, "%S") or mark ~= ARGV[4] or state ~= ARGV[5] then
  return "retry"
end
for i = 6, #ARGV do redis.call("SMOVE", k[2], k[5], ARGV[i]) end
redis.call("HDEL", k[1], "orphans")
state = batch_decide(k, KEYS[8], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), KEYS[9])
batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
return state
