-- dep_wait: a job that runs after its parents (``options(after=[...])``) waits for them:
-- its copy, the parents it waits for and its record, in its own queue's slot, in one step.
-- KEYS[1] its dep hash (raw, tail, policy, pass, parents, created_at; dependencies.py)
-- KEYS[2] its pending set (the parents not yet ended, as "<queue>/<jid>")
-- KEYS[3] its status record   KEYS[4] the queue's waiting zset (jid -> since)
-- KEYS[5] the queue's arming zset (jid -> since: its parents not all watched yet)
-- ARGV[1] jid   ARGV[2] the raw job (with ``pass``: the text before the argument the
-- parent's result takes)   ARGV[3] "" (with ``pass``: the text after it)
-- ARGV[4] on_parent_failure (cancel, run, dead)   ARGV[5] the parent whose result it takes
-- ("<queue>/<jid>"; "": none)   ARGV[6] now (epoch s)   ARGV[7] unused ("0")
-- ARGV[8] the record's bound (s)   ARGV[9] the job's name   ARGV[10] its batch ("": none)
-- ARGV[11] "1": the caller chose the jid: refuse one whose record says it may still run
-- ARGV[12..] its parents, "<queue>/<jid>"
-- Returns 1 (waiting), 0 (refused: the jid is alive, or already waits: a repeated call).
-- Nothing runs it yet: the parents are watched next (dep_watch.lua, in their slots);
-- until every one is, the job is in ``arming``, where the relay arms it again should the
-- enqueuer die first (worker/notes_relay.py).
-- Model: dep_wait (model/protocol.pml); upholds: no_job_lost, waits_end
if redis.call("EXISTS", KEYS[1]) == 1 then return 0 end
if ARGV[11] == "1" and record_alive(KEYS[3]) then return 0 end
local parents = {}
for i = 12, #ARGV do parents[#parents + 1] = ARGV[i] end
local now = redis_now(ARGV[6]) -- Redis' clock: the relay's re-arm compares with it
redis.call("HSET", KEYS[1], "raw", ARGV[2], "tail", ARGV[3], "policy", ARGV[4],
           "pass", ARGV[5], "parents", table.concat(parents, "\30"), "created_at", ARGV[6])
-- No TTL: the dep hash is the job's only copy, as a queue's entry is (a parent scheduled
-- a month ahead keeps it waiting a month). It goes in the step that releases or ends it;
-- sweep_records spares its record meanwhile.
redis.call("SADD", KEYS[2], unpack(parents))
redis.call("ZADD", KEYS[4], now, ARGV[1])
redis.call("ZADD", KEYS[5], now, ARGV[1])
drop_record(KEYS[3]) -- a chosen jid's finished run
new_record(KEYS[3], ARGV[8], "state", "waiting", "name", ARGV[9], "enqueued_at", ARGV[6],
           "batch", ARGV[10] ~= "" and ARGV[10] or false)
return 1
