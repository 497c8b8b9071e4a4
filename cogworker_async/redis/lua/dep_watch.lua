-- dep_watch: a dependent starts watching its parent, in the parent's queue's slot: the
-- parent's record names it (``watchers``), so that the parent's end is noted for it
-- (_record.lua) — or, if the parent has ended already, its end is returned instead.
-- KEYS[1] the parent's status record
-- ARGV[1] the watcher: "[+]<queue>/<jid>" ("+": it takes the parent's result)
-- Returns {"watching"}, {end, result or ""} (end: succeeded, dead, cancelled) or
-- {"unknown"} (no record: never enqueued, or ended longer ago than it is kept).
-- Safe to run twice: a watcher already named is not added again. One step: the parent
-- either ends after this (and the note names the watcher) or ended before (and the end
-- is returned); never neither.
local fields, origin = read_record(KEYS[1])
if not fields or not fields.state then return {"unknown"} end
local state = fields.state
if state == "succeeded" or state == "dead" or state == "cancelled" then
  return {state, fields.result or ""}
end
local watchers = fields.watchers or ""
for watcher in string.gmatch(watchers, "[^\30]+") do
  if watcher == ARGV[1] then return {"watching"} end
end
fields.watchers = watchers == "" and ARGV[1] or (watchers .. "\30" .. ARGV[1])
write_record(KEYS[1], fields, nil, origin)
return {"watching"}
