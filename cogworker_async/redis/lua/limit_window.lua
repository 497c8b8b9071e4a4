-- limit_window: count one acquisition in a fixed-window limiter if the window has room.
-- KEYS[1] the limiter's window: a hash {window = index of the current window, count =
-- acquisitions in it}, with a TTL to the window's end (plus a second)
-- ARGV[1] capacity N (acquisitions per window)   ARGV[2] the window's length (s)
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] how many acquisitions are asked for (default 1: the acquisitions of one
-- process that asked at about the same time, in one call)
-- Returns {how many were admitted (the first ones asked; 1 or 0 for one), the window's
-- count after, ms until the next window, now}.
-- Windows are fixed by Redis TIME: window i covers [i * seconds, (i + 1) * seconds), the
-- same for every process (no clock of a host counts). A hash left from an earlier window
-- counts as empty; so does one whose fields are not numbers (bad data, reset). Another
-- type is refused with an error naming the key.
-- Model: none — a rate limiter (job limiters not modelled; a group's limit is fetch's, modelled)
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "hash" and kind ~= "none" then
  return redis.error_reply("WRONGTYPE limiter window " .. KEYS[1] .. " is a " .. kind ..
                           ", not a hash (not written by cogworker: delete it)")
end
local now = redis_now(ARGV[3])
local capacity, seconds = tonumber(ARGV[1]), tonumber(ARGV[2])
local wanted = math.max(1, math.floor(tonumber(ARGV[4] or "1") or 1))
local index = math.floor(now / seconds)
local label = string.format("%.0f", index)
local stored = redis.call("HMGET", KEYS[1], "window", "count")
local count = 0
if stored[1] == label then count = tonumber(stored[2]) or 0 end
local left_ms = math.max(1, math.ceil(((index + 1) * seconds - now) * 1000))
if count >= capacity then
  return {0, count, left_ms, string.format("%.6f", now)}
end
local admitted = math.min(wanted, capacity - count)
count = count + admitted
redis.call("HSET", KEYS[1], "window", label, "count", count)
redis.call("PEXPIRE", KEYS[1], left_ms + 1000)
return {admitted, count, left_ms, string.format("%.6f", now)}
