-- Where a waiting job of a queue is: on the queue's list ``<slot>queue`` if its priority is
-- 0 (the only list most queues ever have), else on the list of its priority
-- ``<slot>prio:<p>`` (p from -10 to 10, never 0), whose level is then a member of the
-- queue's set ``<slot>prios``. Each list is first in, first out, like the queue's; the
-- fetch chooses among their heads (fetch.lua). A job names its priority in its payload
-- (``"priority":p``, written right after its jid by wire.build, absent for 0), so every
-- script that puts a job back on its queue (give-back, recovery, promotion of a retry or a
-- scheduled job, a retry from dead, a dependent's release) puts it back at its level:
-- a job keeps its priority through every move.
-- A job of a fair group (``"group":"<g>"``, after the jid and any priority) waits on its
-- group's list ``<slot>group:<g>`` instead, whatever its priority (first in, first out
-- within a group), and its group is a member of the queue's ring ``<slot>groups`` (a
-- zset: group -> its turn, lowest first) while it has jobs waiting: the fetch serves the
-- ring in turn, a group that got a job going to the back; the queue's jobs without a
-- group take a turn together as the member "" (no group is named so) while the ring
-- exists. A push puts a group that is not in the ring at its back.
-- Prepended by scripts.py to the scripts that call them; every key here is derived from
-- the queue list's key, in its slot.
-- Model: none — a library; its push is h_push inside the steps that call it (priorities and the groups' ring only order the queue, which the model takes lowest id first; a group's limit, counted here from the in-progress lists within fetch's step, is fetch's in the model: group_limit)

-- queue_library: the functions, made on first use: a function defined at the top of a
-- script costs a closure at each of its calls, and the moves every job makes (enqueue,
-- fetch) need none of them on a queue that has no priorities (record_library's reason).
-- ``queue`` is always the key of a queue's list ("<ns>:{q}:queue").
local queue_library_made = nil
local function queue_library()
  if queue_library_made then return queue_library_made end

  -- priority: the priority a raw job names (an int from -10 to 10), 0 if none or if it
  -- is not one. A job that names one where wire.build writes it pays an anchored match;
  -- anything else that holds the text (a field moved by some other writer, an argument
  -- named so) is decoded.
  local function priority(raw)
    local found = string.match(raw, '^{"jid":"[^"\\]*","priority":(%-?%d+)[,}]')
    if not found then
      if not string.find(raw, '"priority":', 1, true) then return 0 end
      local ok, payload = pcall(cjson.decode, raw)
      if not ok or type(payload) ~= "table" or type(payload.priority) ~= "number" then
        return 0
      end
      found = payload.priority
    end
    local level = tonumber(found)
    if level ~= math.floor(level) or level < -10 or level > 10 then return 0 end
    return level
  end

  -- level_key: the list of priority ``level`` ("<ns>:{q}:prio:<p>"; the queue's own for 0)
  local function level_key(queue, level)
    if level == 0 then return queue end
    return string.sub(queue, 1, -6) .. "prio:" .. level
  end

  -- levels_key: the set of the priorities (other than 0) whose lists may hold jobs.
  local function levels_key(queue)
    return string.sub(queue, 1, -6) .. "prios"
  end

  -- group: the fair group a raw job names, or nil (as ``priority``: an anchored match
  -- where wire.build writes it, else decoded if the text is there at all).
  local function group(raw)
    local found = string.match(raw, '^{"jid":"[^"\\]*","group":"([^"\\]+)"')
        or string.match(raw, '^{"jid":"[^"\\]*","priority":%-?%d+,"group":"([^"\\]+)"')
    if found then return found end
    if not string.find(raw, '"group":', 1, true) then return nil end
    local ok, payload = pcall(cjson.decode, raw)
    if ok and type(payload) == "table" and type(payload.group) == "string"
        and payload.group ~= "" then
      return payload.group
    end
    return nil
  end

  local function ring_key(queue) return string.sub(queue, 1, -6) .. "groups" end
  local function group_key(queue, name) return string.sub(queue, 1, -6) .. "group:" .. name end

  -- to_back: ``member`` of ``queue``'s ring takes the last turn (``only``: "NX", if it is
  -- not there yet; "XX", if it is). A turn is one more than the ring's last.
  local function to_back(queue, member, only, call)
    local ring = ring_key(queue)
    local last = call("ZRANGE", ring, -1, -1, "WITHSCORES")
    if type(last) == "table" and last.err then return last end
    local turn = (last and last[2] and tonumber(last[2]) or 0) + 1
    return call("ZADD", ring, only, turn, member)
  end

  -- writable: whether ``raw`` can be pushed on ``queue``: its list and the key naming it
  -- (the ring, the levels) are of their type or absent. Asked before a script writes
  -- anything that promises the push (a once marker, a unique lock, a claimed tick), so
  -- that a key of another type refuses the whole step rather than half of it.
  -- (Asked with a read of each type, not TYPE: the enqueuer's documented ACL has these.)
  local function writable(queue, raw)
    local function fits(command, key, ...)
      local reply = redis.pcall(command, key, ...)
      return not (type(reply) == "table" and reply.err)
    end
    local name = group(raw)
    if name then
      return fits("ZSCORE", ring_key(queue), name) and fits("LLEN", group_key(queue, name))
    end
    local level = priority(raw)
    if level ~= 0 then
      return fits("SCARD", levels_key(queue)) and fits("LLEN", level_key(queue, level))
    end
    return fits("LLEN", queue)
  end

  -- list_of: the list of ``queue`` that ``raw`` waits on (or would): its group's, else its
  -- priority's.
  local function list_of(queue, raw)
    local name = group(raw)
    if name then return group_key(queue, name) end
    return level_key(queue, priority(raw))
  end

  -- push: put ``raw`` on its list of ``queue`` — its group's, else its priority's: at the
  -- back (the last to be fetched, LPUSH) or, ``front``, where the next fetch takes it
  -- (RPUSH: a job given back or recovered goes ahead of the jobs of its list). ``call``
  -- is redis.call (an error raises) or redis.pcall (returned: the caller decides).
  -- Returns the push's reply.
  local function push(queue, raw, front, call)
    local name = group(raw)
    if name then
      -- The ring first: a ring that cannot be written (another type) refuses the push
      -- before the job is on a list no fetch would read; a member whose list then
      -- fails to take the job is harmless (the fetch drops a member with nothing).
      local joined = to_back(queue, name, "NX", call) -- already in the ring: kept its turn
      if type(joined) == "table" and joined.err then return joined end
      return call(front and "RPUSH" or "LPUSH", group_key(queue, name), raw)
    end
    local level = priority(raw)
    if level ~= 0 then
      local added = call("SADD", levels_key(queue), level)
      if type(added) == "table" and added.err then return added end
    end
    return call(front and "RPUSH" or "LPUSH", level_key(queue, level), raw)
  end

  -- levels: the fetch's view of ``queue``'s priorities for one call (nil: it has none;
  -- a set of the wrong type counts as none): the levels in use, 0 among them, and a
  -- cache of their heads' scores.
  local function levels(queue)
    local members = redis.pcall("SMEMBERS", levels_key(queue))
    local damaged = type(members) ~= "table" or members.err ~= nil
    if not damaged and #members == 0 then return nil end
    local list = {0}
    for _, member in ipairs(damaged and {} or members) do
      local level = tonumber(member)
      if level and level ~= 0 and level == math.floor(level) and level >= -10
          and level <= 10 then
        table.insert(list, level)
      else
        damaged = true
      end
    end
    if damaged then
      -- The set of another type, or holding what no push writes (a co-tenant's): it
      -- cannot say which levels hold jobs, so every level is looked at (20 LINDEX), or
      -- a job on a level it no longer names would wait forever.
      list = {0}
      for level = 10, -10, -1 do
        if level ~= 0 then table.insert(list, level) end
      end
    end
    return {list = list, scores = {}, damaged = damaged}
  end

  -- head_score: how soon the head of ``key`` (priority ``level``) goes, lower first; nil
  -- for an empty list (or one of the wrong type: it holds no job to take). With
  -- ``aging`` (ms a level is worth): enqueued_at (ms) - level * aging; without: -level.
  local function head_score(key, level, aging)
    local head = redis.pcall("LINDEX", key, -1)
    if type(head) ~= "string" then return nil end
    if not aging then return -level end
    local ok, payload = pcall(cjson.decode, head)
    local at = ok and type(payload) == "table" and tonumber(payload.enqueued_at)
    if not at then return -math.huge end -- unreadable: taken now, the worker files it dead
    return at * 1000 - level * aging
  end

  -- next_list: the list of ``queue`` whose head goes next (a tie to the higher priority),
  -- nil if all are empty. An empty level leaves the set (a push adds it again). A move
  -- from a list must forget its score: ``seen.scores[key] = nil``.
  local function next_list(queue, seen, aging)
    local best, best_score, best_level = nil, nil, nil
    for _, level in ipairs(seen.list) do
      local key = level_key(queue, level)
      local score = seen.scores[key]
      if score == nil then
        score = head_score(key, level, aging) or false
        seen.scores[key] = score
        if not score and level ~= 0 and not seen.damaged then
          redis.pcall("SREM", levels_key(queue), level)
        end
      end
      if score and (not best or score < best_score
                    or (score == best_score and level > best_level)) then
        best, best_score, best_level = key, score, level
      end
    end
    return best
  end

  -- ring: the fetch's view of ``queue``'s groups for one call (nil: it has none; a ring
  -- of the wrong type counts as none): ``limit``, the most jobs of one group running at
  -- once (0: no limit), and what runs of each group, counted on first need from the
  -- in-progress lists of the processes registered in the slot and ``mine`` (bad data
  -- there: every group counts as full, the limit holds).
  local function ring(queue, limit, mine, me)
    if redis.pcall("TYPE", ring_key(queue)).ok ~= "zset" then return nil end
    local seen = {limit = limit, running = nil, mine = mine, me = me, plain = false}
    -- counted: group -> its jobs running, or false if a list could not be read
    local function counted()
      local running, lists = {}, {mine}
      local slot = string.sub(queue, 1, -6)
      local members = redis.pcall("SMEMBERS", slot .. "processes")
      if type(members) ~= "table" or members.err then return false end
      for _, identity in ipairs(members) do
        if identity ~= me then table.insert(lists, slot .. "in_progress:" .. identity) end
      end
      for _, list in ipairs(lists) do
        local entries = redis.pcall("LRANGE", list, 0, -1)
        if type(entries) ~= "table" or entries.err then return false end
        for _, entry in ipairs(entries) do
          local of = group(entry)
          if of then running[of] = (running[of] or 0) + 1 end
        end
      end
      return running
    end
    function seen.count(name)
      if seen.running == nil then seen.running = counted() end
      if seen.running == false then return limit end
      return seen.running[name] or 0
    end
    return seen
  end

  -- plain_waiting: the list of ``queue``'s jobs without a group that goes next, or nil.
  local function plain_waiting(queue, levels_seen, aging)
    if levels_seen then return next_list(queue, levels_seen, aging) end
    local length = redis.pcall("LLEN", queue)
    return type(length) == "number" and length > 0 and queue or nil
  end

  -- next_in_ring: the list whose job goes next and its ring member (a group, or "" for
  -- the jobs without one), nil if none may go: the first member in turn that has a job
  -- waiting and, with a limit, fewer than it running. A member whose list is empty leaves
  -- the ring; a group at its limit keeps its turn. Looks at the first member, then at
  -- members ten at a time:
  -- those passed over are at their limit (as many as the running jobs allow) or gone.
  local function next_in_ring(queue, seen, levels_seen, aging)
    local key = ring_key(queue)
    if not seen.plain and plain_waiting(queue, levels_seen, aging) then
      seen.plain = true -- the jobs without a group take their turn, at the back
      to_back(queue, "", "NX", redis.call)
    end
    local offset, page = 0, 1 -- the first member most often goes: one, then ten at a time
    while true do
      local members = redis.call("ZRANGE", key, offset, offset + page - 1)
      page = 10
      if #members == 0 then return nil end
      local gone = 0
      for _, member in ipairs(members) do
        local from = nil
        if member == "" then
          from = plain_waiting(queue, levels_seen, aging)
        elseif (tonumber(redis.pcall("LLEN", group_key(queue, member))) or 0) > 0 then
          from = group_key(queue, member)
          if seen.limit > 0 and seen.count(member) >= seen.limit then from = false end
        end
        if from then return from, member end
        if from == nil then
          redis.call("ZREM", key, member)
          gone = gone + 1
        end
      end
      offset = offset + #members - gone
    end
  end

  -- turned: ``member`` got a job from ``from``: to the back of the ring while it has
  -- more waiting, else out of it.
  local function turned(queue, seen, member, from, levels_seen, aging)
    local more
    if member == "" then
      more = plain_waiting(queue, levels_seen, aging)
    else
      more = (tonumber(redis.pcall("LLEN", from)) or 0) > 0
      if seen.running then seen.running[member] = (seen.running[member] or 0) + 1 end
    end
    if more then
      to_back(queue, member, "XX", redis.call)
    else
      redis.call("ZREM", ring_key(queue), member)
    end
  end

  queue_library_made = {priority = priority, level_key = level_key, levels_key = levels_key,
                        push = push, levels = levels, next_list = next_list, group = group,
                        group_key = group_key, ring_key = ring_key, ring = ring,
                        list_of = list_of, writable = writable,
                        next_in_ring = next_in_ring, turned = turned}
  return queue_library_made
end
