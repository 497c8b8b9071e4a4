-- fetch: move up to ARGV[1] jobs from queues, tried in order, onto this process's
-- in-progress list for each queue (reliable fetch), and mark each job's status record
-- running (by this process): one HGET and one HSET of its field in the queue's live hash.
-- KEYS[2i - 1] the i-th queue's list   KEYS[2i] this process's in-progress list for it
-- (a pair shares its queue's slot; on a cluster the caller sends one pair per call)
-- ARGV[1] the most jobs to move      ARGV[2] this process's identity
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] seconds a cancelled job's record is kept   ARGV[5] a live record's TTL (s)
-- ARGV[6] priority aging: milliseconds of waiting worth one priority level ("": none, a
--   higher priority always goes first)
-- ARGV[6 + i] the i-th queue's record prefix ("": no records, ``track_jobs=False``)
-- ARGV[6 + n + i] the i-th queue's slot prefix ("<ns>:{<queue>}:"), n = #KEYS / 2: a
--   queue whose "paused" flag exists is skipped (absent: the pre-pause layout, no check)
-- ARGV[6 + 2n + i] the most jobs of the i-th queue running at once across every
--   process ("0" or absent: no limit): its running jobs are counted from the in-progress
--   lists of the processes registered in its slot ("processes" set) and this one's, so
--   whatever frees a list (an ack, a filing, a give-back, recovery of a dead process)
--   frees its share, and a crash can never leak one
-- ARGV[6 + 3n + i] the most jobs of any one fair group of the i-th queue running at once
--   across every process ("0" or absent: no limit), counted from the same lists
-- Groups (_queue.lua): a queue whose ring ("groups") exists serves its groups in turn,
-- the jobs without a group taking one turn together; a group at its limit is passed
-- over, keeping its turn.
-- Returns {{i, raw, i, raw, ...}, {bad...}, {i, jid, ...}}: each job with the index
-- (1-based, among the pairs) of the queue it came from; the indexes of queue keys that
-- could not be read (wrong type): those are skipped, never a reason to stop fetching the
-- rest; and the jobs dropped unrun because a cancel was waiting for them (their copy is
-- gone, their record says cancelled).
-- Priorities (_queue.lua): a queue whose "prios" set names levels has lists beside its own;
-- the next job is the head (oldest) of one of them: with aging, the one whose
-- enqueued_at (ms) - priority * aging is least, so that a job waiting ``aging`` longer
-- counts one level higher and none waits forever; without, the highest priority's.
-- Within a priority, first in, first out. A level found empty leaves the set.
-- Each job is moved by LMOVE, so it is always on exactly one of the two lists (or, if
-- cancelled, dropped in the same step). A job of a coalesced key into which enqueues
-- merged while it waited (coalesce.lua) is then rewritten there with the merged
-- arguments (LSET of the list's head, where LMOVE put it): what it runs is what recovery
-- finds.
-- An in-progress key of the wrong type is an error (nothing moved): reported as what it
-- is, rather than as every queue being unreadable. So is Redis refusing the move itself
-- (OOM, READONLY, NOPERM): no fault of the queue, it is raised as what Redis said —
-- unless jobs were already moved, which are then returned (they are on the list).
-- Model: fetch (model/protocol.pml); upholds: no_job_lost, cancelled_never_starts, dependent_after_parents, group_limit
for i = 2, #KEYS, 2 do
  local kind = redis.call("TYPE", KEYS[i]).ok
  if kind ~= "list" and kind ~= "none" then
    return redis.error_reply("WRONGTYPE in-progress list " .. KEYS[i] .. " is a " .. kind)
  end
end
local want = tonumber(ARGV[1])
local jobs, bad, dropped = {}, {}, {}
-- Dropped jobs do not count towards ``want``: bounded on their own, so that a queue of
-- a million cancelled jobs never blocks Redis in one call (the caller fetches again).
local drops_left = math.max(100, want * 10)
local got = 0
local now = nil
local n = #KEYS / 2

-- How many more jobs of the queue at pair ``index`` may start now (``want``: no limit).
-- A registry or another process's list of the wrong type (bad data) cannot be counted:
-- the queue is then taken as full (the limit holds; the other queues are fetched).
local function room(index, slot, mine)
  local limit = tonumber(ARGV[6 + 2 * n + index] or "0") or 0
  if limit <= 0 then return want end
  local running = redis.call("LLEN", mine)
  local me = ARGV[2]
  local members = redis.pcall("SMEMBERS", slot .. "processes")
  if type(members) ~= "table" or members.err then return 0 end
  for _, identity in ipairs(members) do
    if identity ~= me then
      local length = redis.pcall("LLEN", slot .. "in_progress:" .. identity)
      if type(length) ~= "number" then return 0 end
      running = running + length
    end
  end
  return limit - running
end

local aging = tonumber(ARGV[6])

for i = 1, #KEYS - 1, 2 do
  local index = (i + 1) / 2
  local prefix = ARGV[6 + index]
  local live = prefix ~= "" and live_records_of(prefix)
  local slot = ARGV[6 + n + index]
  local quota, levels, ring = want, nil, nil
  if slot and slot ~= "" then
    -- One EXISTS for what a plain queue never has: a pause, priority levels, groups.
    local special = redis.call("EXISTS", slot .. "paused", slot .. "prios", slot .. "groups")
    if special > 0 and redis.call("EXISTS", slot .. "paused") == 1 then
      quota = 0
    else
      quota = room(index, slot, KEYS[i + 1])
      if special > 0 then
        local lib = queue_library()
        levels = lib.levels(KEYS[i])
        ring = lib.ring(KEYS[i], tonumber(ARGV[6 + 3 * n + index] or "0") or 0, KEYS[i + 1],
                        ARGV[2])
      end
    end
  end
  local taken = 0
  while got < want and taken < quota and drops_left > 0 do
    local from, member = KEYS[i], nil
    if ring then
      from, member = queue_library().next_in_ring(KEYS[i], ring, levels, aging)
      if not from then break end
    elseif levels then
      from = queue_library().next_list(KEYS[i], levels, aging)
      if not from then break end
    end
    local job = redis.pcall("LMOVE", from, KEYS[i + 1], "RIGHT", "LEFT")
    if levels then levels.scores[from] = nil end
    if ring and type(job) == "string" then
      queue_library().turned(KEYS[i], ring, member, from, levels, aging)
    end
    if type(job) == "table" and job.err then
      if string.sub(job.err, 1, 9) ~= "WRONGTYPE" then
        if got > 0 then return {jobs, bad, dropped} end
        return redis.error_reply(job.err)
      end
      table.insert(bad, index)
      break
    end
    if not job then break end
    now = now or redis_now(ARGV[3])
    local jid = prefix ~= "" and jid_in(job)
    local drop, merged = false, nil
    if jid then
      drop, merged = fetch_record(prefix, live, jid, ARGV[2], now, ARGV[4], ARGV[5], job)
    end
    if drop then
      redis.call("LPOP", KEYS[i + 1])
      table.insert(dropped, index)
      table.insert(dropped, jid)
      drops_left = drops_left - 1
    else
      if merged then -- a coalesced job runs with the arguments merged since its push
        redis.call("LSET", KEYS[i + 1], 0, merged)
        job = merged
      end
      table.insert(jobs, index)
      table.insert(jobs, job)
      got = got + 1
      taken = taken + 1
    end
  end
  if got >= want then break end
end
return {jobs, bad, dropped}
