-- fetch: move up to ARGV[1] jobs from queues, tried in order, onto this process's
-- in-progress list for each queue (reliable fetch).
-- KEYS[2i - 1] the i-th queue's list   KEYS[2i] this process's in-progress list for it
-- (a pair shares its queue's slot; on a cluster the caller sends one pair per call)
-- ARGV[1] the most jobs to move
-- Returns {{i, raw, i, raw, ...}, {bad...}}: each job with the index (1-based, among
-- the pairs) of the queue it came from, and the indexes of queue keys that could not
-- be read (wrong type): those are skipped, never a reason to stop fetching the rest.
-- Each job is moved by LMOVE, so it is always on exactly one of the two lists.
-- An in-progress key of the wrong type is an error (nothing moved): reported as what it
-- is, rather than as every queue being unreadable. So is Redis refusing the move itself
-- (OOM, READONLY, NOPERM): no fault of the queue, it is raised as what Redis said —
-- unless jobs were already moved, which are then returned (they are on the list).
for i = 2, #KEYS, 2 do
  local kind = redis.call("TYPE", KEYS[i]).ok
  if kind ~= "list" and kind ~= "none" then
    return redis.error_reply("WRONGTYPE in-progress list " .. KEYS[i] .. " is a " .. kind)
  end
end
local want = tonumber(ARGV[1])
local jobs, bad = {}, {}
local got = 0
for i = 1, #KEYS - 1, 2 do
  local index = (i + 1) / 2
  while got < want do
    local job = redis.pcall("LMOVE", KEYS[i], KEYS[i + 1], "RIGHT", "LEFT")
    if type(job) == "table" and job.err then
      if string.sub(job.err, 1, 9) ~= "WRONGTYPE" then
        if got > 0 then return {jobs, bad} end
        return redis.error_reply(job.err)
      end
      table.insert(bad, index)
      break
    end
    if not job then break end
    table.insert(jobs, index)
    table.insert(jobs, job)
    got = got + 1
  end
  if got >= want then break end
end
return {jobs, bad}
