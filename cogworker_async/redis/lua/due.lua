-- due: the members of a zset (schedule or retry) whose time has come, by Redis TIME.
-- KEYS[1] the zset
-- ARGV[1] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[2] the most members to return
-- Returns the due members, earliest first. Reads only; the caller moves them with
-- promote.lua (a member moved meanwhile by another process is then skipped).
-- Model: none — a read
local now = redis_now(ARGV[1])
return redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, tonumber(ARGV[2]))
