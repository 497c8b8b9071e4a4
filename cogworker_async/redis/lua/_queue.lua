-- Where a waiting job of a queue is: on the queue's list ``<slot>queue`` if its priority is
-- 0 (the only list most queues ever have), else on the list of its priority
-- ``<slot>prio:<p>`` (p from -10 to 10, never 0), whose level is then a member of the
-- queue's set ``<slot>prios``. Each list is first in, first out, like the queue's; the
-- fetch chooses among their heads (fetch.lua). A job names its priority in its payload
-- (``"priority":p``, written right after its jid by job.build, absent for 0), so every
-- script that puts a job back on its queue (give-back, recovery, promotion of a retry or a
-- scheduled job, a retry from dead, a dependent's release) puts it back at its level:
-- a job keeps its priority through every move. Prepended by scripts.py to the scripts
-- that call them; every key here is derived from the queue list's key, in its slot.

-- queue_library: the functions, made on first use: a function defined at the top of a
-- script costs a closure at each of its calls, and the moves every job makes (enqueue,
-- fetch) need none of them on a queue that has no priorities (record_library's reason).
-- ``queue`` is always the key of a queue's list ("<ns>:{q}:queue").
local queue_library_made = nil
local function queue_library()
  if queue_library_made then return queue_library_made end

  -- priority: the priority a raw job names (an int from -10 to 10), 0 if none or if it
  -- is not one. A job that names one where job.build writes it pays an anchored match;
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

  -- push: put ``raw`` on its priority's list of ``queue``: at the back (the last to be
  -- fetched, LPUSH) or, ``front``, where the next fetch takes it (RPUSH: a job given back
  -- or recovered goes ahead of the jobs of its priority). ``call`` is redis.call (an error
  -- raises) or redis.pcall (returned: the caller decides). Returns the push's reply.
  local function push(queue, raw, front, call)
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
    if type(members) ~= "table" or members.err or #members == 0 then return nil end
    local list = {0}
    for _, member in ipairs(members) do
      local level = tonumber(member)
      if level and level ~= 0 then table.insert(list, level) end
    end
    return {list = list, scores = {}}
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
        if not score and level ~= 0 then redis.pcall("SREM", levels_key(queue), level) end
      end
      if score and (not best or score < best_score
                    or (score == best_score and level > best_level)) then
        best, best_score, best_level = key, score, level
      end
    end
    return best
  end

  queue_library_made = {priority = priority, level_key = level_key, levels_key = levels_key,
                        push = push, levels = levels, next_list = next_list}
  return queue_library_made
end
