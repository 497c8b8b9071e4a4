-- trim_dead: after an entry is filed in the dead set, drop the entries older than
-- ``max_age`` seconds and then the oldest beyond ``max_jobs`` (score = time of death), as
-- Sidekiq does: a flood of failures or bad data must not fill Redis (with noeviction,
-- every enqueue would then fail). ``max_jobs`` "0" means the destination is not the dead
-- set: nothing is trimmed. Prepended by scripts.py to every script that files in dead.
-- Model: none — trims the dead set by age and count: a bound on what is kept, no move of a job that may run
local function trim_dead(key, now, max_jobs, max_age)
  local most, age = tonumber(max_jobs), tonumber(max_age)
  if not most or most <= 0 then return end
  if age and age > 0 then
    redis.call("ZREMRANGEBYSCORE", key, "-inf", "(" .. string.format("%.6f", now - age))
  end
  redis.call("ZREMRANGEBYRANK", key, 0, -(most + 1))
end
