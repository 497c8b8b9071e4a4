-- redis_now: Redis' clock (TIME, epoch seconds with microseconds), or the caller's
-- ``fallback`` if TIME is refused. Prepended by scripts.py to every script that calls it.
-- Model: none — Redis' clock; the model has no time, only the orders it decides (a beat past the threshold is a missing alive marker)
local function redis_now(fallback)
  local ok, time = pcall(redis.call, "TIME")
  if ok then return tonumber(time[1]) + tonumber(time[2]) / 1000000 end
  return tonumber(fallback)
end
