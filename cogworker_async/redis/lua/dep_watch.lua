-- dep_watch: a dependent starts watching its parent, in the parent's queue's slot: the
-- parent's watchers set names it, and the parent's record says it is watched
-- (``watchers`` holds "*"), so that the parent's end is noted (_record.lua) and the relay
-- tells each member of the set — or, if the parent has ended already, its end is
-- returned instead.
-- KEYS[1] the parent's status record   KEYS[2] the parent's watchers set
-- ARGV[1] the watcher: "[+]<queue>/<jid>" ("+": it takes the parent's result)
-- Returns {"watching"}, {end, result or ""} (end: succeeded, dead, cancelled) or
-- {"unknown"} (no record: never enqueued, or ended longer ago than it is kept).
-- Safe to run twice: a set names a watcher once. One step: the parent either ends after
-- this (and its note says to tell the set) or ended before (and the end is returned);
-- never neither. Constant cost, however many watch one parent: the record is written
-- only by the first watch (a fan-out of 10,000 once rewrote a record naming them all at
-- each watch: quadratic). Destination first: the set, then the record's mark.
-- A watchers key of another type (a co-tenant's) is left alone: the watcher is then
-- named in the record's own text, as earlier builds did.
-- Model: dep_watch (model/protocol.pml); upholds: dependent_after_parents, waits_end
local fields, origin = read_record(KEYS[1])
if not fields or not fields.state then return {"unknown"} end
local state = fields.state
if state == "succeeded" or state == "dead" or state == "cancelled" then
  return {state, fields.result or ""}
end
local watchers = fields.watchers
local added = redis.pcall("SADD", KEYS[2], ARGV[1])
if type(added) ~= "number" then
  for watcher in string.gmatch(watchers or "", "[^\30]+") do
    if watcher == ARGV[1] then return {"watching"} end
  end
  fields.watchers = watchers and (watchers .. "\30" .. ARGV[1]) or ARGV[1]
  write_record(KEYS[1], fields, nil, origin)
  return {"watching"}
end
if not watchers or not string.find("\30" .. watchers .. "\30", "\30*\30", 1, true) then
  fields.watchers = watchers and (watchers .. "\30*") or "*"
  write_record(KEYS[1], fields, nil, origin)
end
return {"watching"}
