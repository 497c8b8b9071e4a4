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

-- job_priority: the priority a raw job names (an int from -10 to 10), 0 if none or if it
-- is not one. A plain job pays one anchored match that fails at its second field and one
-- plain find; a job that names one where job.build writes it, the match; anything else
-- (a field moved by some other writer, an argument that holds the text) is decoded.
local function job_priority(raw)
  local found = string.match(raw, '^{"jid":"[^"\\]*","priority":(%-?%d+)[,}]')
  if not found then
    if not string.find(raw, '"priority":', 1, true) then return 0 end
    local ok, payload = pcall(cjson.decode, raw)
    if not ok or type(payload) ~= "table" or type(payload.priority) ~= "number" then
      return 0
    end
    found = payload.priority
  end
  local priority = tonumber(found)
  if priority ~= math.floor(priority) or priority < -10 or priority > 10 then return 0 end
  return priority
end

-- level_key: the list of priority ``priority`` of the queue whose list is ``queue``
-- ("<ns>:{q}:queue" -> "<ns>:{q}:prio:<p>"); the queue's list itself for 0.
local function level_key(queue, priority)
  if priority == 0 then return queue end
  return string.sub(queue, 1, -6) .. "prio:" .. priority
end

-- levels_key: the set of the priorities (other than 0) whose lists may hold jobs.
local function levels_key(queue)
  return string.sub(queue, 1, -6) .. "prios"
end

-- push_job: put ``raw`` on the queue whose list is ``queue``, at its priority's list: at
-- the back (the last to be fetched, LPUSH) or, ``front``, where the next fetch takes it
-- (RPUSH: a job given back or recovered goes ahead of the jobs of its priority). ``call``
-- is redis.call (an error raises) or redis.pcall (returned: the caller decides).
-- Returns the push's reply (the list's length).
local function push_job(queue, raw, front, call)
  local priority = job_priority(raw)
  local key = queue
  if priority ~= 0 then
    key = level_key(queue, priority)
    local added = call("SADD", levels_key(queue), priority)
    if type(added) == "table" and added.err then return added end
  end
  return call(front and "RPUSH" or "LPUSH", key, raw)
end
