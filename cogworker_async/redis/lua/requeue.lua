-- requeue: jobs left on an in-progress list back onto their queue. Used for a dead
-- process's list (orphan recovery) and for this process's own list on shutdown.
-- KEYS[1] in-progress list (one queue's)   KEYS[2] the owner's alive marker in this slot
-- KEYS[3] last_beat hash of this slot      KEYS[4] repeat_orphans list
-- KEYS[5] the queue's list                 KEYS[6] declared_dead set of this slot
-- (recovery marks the owner there once it took any of its jobs)
-- ARGV[1] JSON options:
--   identity                      the list's owner (its field in last_beat)
--   threshold                     seconds without a beat that make the owner dead, or
--                                 -1: requeue unconditionally (this process's own list)
--   now                           the caller's clock (epoch s), used only if TIME is refused
--   orphan_prefix, orphan_ttl, max_orphanings   per-jid orphan counters (recovery only)
--   limit                         the most entries to look at in this call
--   wake_channel, queue           pub/sub channel to wake idle workers on, and the
--                                 queue's name as the message (optional)
--   max_declared                  bound on the declared_dead set (optional, 10000)
--   record_prefix, finished_ttl  the jobs' status records (``<prefix><jid>``): a job
--                                 requeued is marked queued; one whose record has a
--                                 cancel waiting is dropped instead, never run again
--                                 (its record then kept finished_ttl seconds);
--                                 a job dropped as ran (ARGV[3 ..]) is marked succeeded
-- ARGV[2] n, the number of jobs to drop: ARGV[3 .. n + 2] (they ran; only their ack
-- failed, so dropping them is their ack). ARGV[n + 3 ..] jobs to keep on the list.
-- Every key, the orphan counters included (orphan_prefix), is in the queue's slot: the
-- liveness check and the move are one step, as on a single Redis.
-- Returns {-1, 0, 0} if the owner is alive after all (nothing done), else
-- {moved, looked_at, parked, cancelled}: looked_at < limit means the whole list was seen.
-- Entries are taken from the head (newest) and pushed on the fetch end of the queue,
-- so the oldest lands in front and the order is kept. Each job is written where it
-- goes before it is taken off; one that cannot be written (the queue key of the wrong
-- type) or that is to be kept goes to the tail and is looked at again on a later call.
-- Model: requeue (model/protocol.pml); upholds: no_job_lost, no_rerun, jobs_end
local opts = cjson.decode(ARGV[1])
local threshold = tonumber(opts.threshold)
local recovering = threshold >= 0

if recovering then
  -- Alive: its marker, which every beat writes with a TTL. A key there without one is
  -- no beat's (a co-tenant's, a hand's): it counts as no marker, or the dead owner's
  -- jobs would wait for it forever (PTTL: -1 no TTL, -2 no key; any type).
  if redis.call("PTTL", KEYS[2]) > 0 then
    return {-1, 0, 0}
  end
  -- A stamp that is not a finite number counts as no stamp: the presence key alone
  -- decides ("inf" would keep a dead owner alive forever; NaN fails the test too). Nor
  -- does one more than a threshold ahead of this server's clock, which wrote every
  -- beat's stamp: a huge one would keep the owner alive as long.
  local last = tonumber(redis.call("HGET", KEYS[3], opts.identity) or "")
  if last and last > -math.huge and last < math.huge then
    local now = redis_now(opts.now)
    if now - last <= threshold and last - now <= threshold then
      return {-1, 0, 0}
    end
  end
end

local drop, keep = {}, {}
local ndrop = tonumber(ARGV[2])
for i = 3, #ARGV do
  if i <= ndrop + 2 then drop[ARGV[i]] = true else keep[ARGV[i]] = true end
end

local function decoded(job)
  local ok, payload = pcall(cjson.decode, job)
  if ok and type(payload) == "table" then return payload end
  return nil
end

local moved, parked, looked, cancelled = 0, 0, 0, 0
local function record_of(payload)
  if opts.record_prefix and payload and type(payload.jid) == "string" then
    return opts.record_prefix .. payload.jid
  end
  return nil
end
local limit = math.min(tonumber(opts.limit), redis.call("LLEN", KEYS[1]))
for _ = 1, limit do
  local job = redis.call("LINDEX", KEYS[1], 0)
  if not job then break end
  looked = looked + 1
  local payload = decoded(job)
  if drop[job] then
    redis.call("LPOP", KEYS[1])
    if payload and type(payload.jid) == "string" then
      redis.pcall("DEL", opts.orphan_prefix .. payload.jid)
    end
    local record = record_of(payload)
    if record then
      mark_record(record, opts.finished_ttl, "cancel", false, "state", "succeeded",
                  "finished_at", redis_now(opts.now))
    end
  elseif keep[job] then
    redis.call("LMOVE", KEYS[1], KEYS[1], "LEFT", "RIGHT")
  elseif record_of(payload) and cancel_pending(record_of(payload)) then
    -- Cancelled while it ran (or before it started): a cancel outlives its process.
    redis.call("LPOP", KEYS[1])
    drop_cancelled(record_of(payload), redis_now(opts.now), opts.finished_ttl)
    redis.pcall("DEL", opts.orphan_prefix .. payload.jid)
    cancelled = cancelled + 1
  else
    -- Recovery only: count how often this jid was orphaned, and park it for dead past
    -- the limit: a job that kills its own process (OOM, SIGKILL) would otherwise come
    -- back after every crash, forever. The counter is bumped once the job is written.
    local counter, written, park = nil, false, false
    if recovering and payload and type(payload.jid) == "string" then
      counter = opts.orphan_prefix .. payload.jid
      local current = redis.pcall("GET", counter)
      local count = type(current) == "string" and tonumber(current) or nil
      if count == nil and current then redis.pcall("DEL", counter) end
      park = (count or 0) + 1 > tonumber(opts.max_orphanings)
    end
    if park then
      written = type(redis.pcall("RPUSH", KEYS[4], job)) == "number"
    else
      written = type(queue_library().push(KEYS[5], job, true, redis.pcall)) == "number" -- _queue.lua
    end
    if written then
      redis.call("LPOP", KEYS[1])
      if counter then
        redis.pcall("INCR", counter)
        redis.pcall("EXPIRE", counter, tonumber(opts.orphan_ttl))
      end
      local record = record_of(payload)
      if record and not park then
        mark_record(record, nil, "by", false, "started_at", false, "state", "queued")
      end
      if park then parked = parked + 1 else moved = moved + 1 end
    else
      redis.call("LMOVE", KEYS[1], KEYS[1], "LEFT", "RIGHT")
    end
  end
end
if recovering and moved + parked + cancelled > 0 then
  -- best effort: the jobs are already moved. Bounded: an identity is never reused, so the
  -- marks of processes that never beat again would pile up; past the bound, random old
  -- ones go (a process paused that long, among that many deaths, is not fenced).
  -- Room is made first, so the mark just written is never the one dropped.
  local marks = redis.pcall("SCARD", KEYS[6])
  local max_declared = tonumber(opts.max_declared) or 10000
  if type(marks) == "number" and marks >= max_declared then
    redis.pcall("SPOP", KEYS[6], marks - max_declared + 1)
  end
  redis.pcall("SADD", KEYS[6], opts.identity)
end
if moved > 0 and opts.wake_channel then
  wake(opts.wake_channel, opts.queue or "requeued") -- idle workers fetch them now
end
return {moved, looked, parked, cancelled}
