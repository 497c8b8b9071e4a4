-- clear_queue: delete every job waiting on a queue (the admin's Clear), of every priority
-- and every group, in one step: a push meanwhile lands before or after, never in a
-- group's list left out of a deleted ring (_queue.lua).
-- KEYS[1] the queue's list   KEYS[2..] the keys of its slot that are found through the
-- registry of names (its sets, its processes...: admin_queues.py ``_slot_holdings``)
-- Derived (the slot of KEYS[1]): the priorities' lists and set, the groups' ring and lists.
-- Returns {jobs deleted, how many of KEYS[2..] exist}. The lists are UNLINKed: a huge one
-- is freed in the background, never blocking Redis (and the beats) meanwhile. A key of the
-- wrong type among them counts no job and goes too (it held none). Safe to run twice.
-- The slot's ``cleared`` counts the clears: a coalesced key's job last put on its list
-- before one (its record's ``era``, _record.lua) is gone, and its next enqueue pushes a
-- new one (coalesce.lua) instead of merging into it.
-- Model: none — an admin's delete of waiting jobs, not a move of the protocol
local slot = string.sub(KEYS[1], 1, -6)
local doomed = {KEYS[1], slot .. "prios", slot .. "groups"}
for level = -10, 10 do
  if level ~= 0 then table.insert(doomed, slot .. "prio:" .. level) end
end
local ring = redis.pcall("ZRANGE", slot .. "groups", 0, -1)
if type(ring) == "table" and not ring.err then
  for _, group in ipairs(ring) do
    if group ~= "" then table.insert(doomed, slot .. "group:" .. group) end
  end
end
redis.pcall("INCR", slot .. "cleared") -- first: a push after the clear is never undone
local count = 0
for _, key in ipairs(doomed) do
  local length = redis.pcall("LLEN", key)
  if type(length) == "number" then count = count + length end
end
for first = 1, #doomed, 1000 do
  redis.call("UNLINK", unpack(doomed, first, math.min(first + 999, #doomed)))
end
local held = 0
if #KEYS > 1 then held = redis.call("EXISTS", unpack(KEYS, 2)) end
return {count, held}
