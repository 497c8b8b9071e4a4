-- limit_bucket: take a token from a token-bucket limiter if it has one.
-- KEYS[1] the limiter's bucket: a hash {tokens, stamp = when they were counted (Redis
-- TIME)}, with a TTL to when it is full again (plus a second): an absent bucket is full
-- ARGV[1] capacity N (tokens when full)   ARGV[2] seconds to refill N tokens
-- ARGV[3] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[4] how many tokens are asked for (default 1: the acquisitions of one process
-- that asked at about the same time, in one call)
-- Returns {how many were admitted (the first ones asked; 1 or 0 for one), whole tokens
-- left, ms until the next token (0: one is
-- there), now}.
-- Tokens refill continuously (N per ARGV[2] seconds), up to N. A clock that went back
-- (a failover to a host whose clock is behind) refills nothing, never a negative amount.
-- Fields that are not numbers (bad data) count as a full bucket; another type is refused
-- with an error naming the key.
-- Model: none — a rate limiter (job limiters not modelled; a group's limit is fetch's, modelled)
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "hash" and kind ~= "none" then
  return redis.error_reply("WRONGTYPE limiter bucket " .. KEYS[1] .. " is a " .. kind ..
                           ", not a hash (not written by cogworker: delete it)")
end
local now = redis_now(ARGV[3])
local capacity, seconds = tonumber(ARGV[1]), tonumber(ARGV[2])
local rate = capacity / seconds
local wanted = math.max(1, math.floor(tonumber(ARGV[4] or "1") or 1))
local stored = redis.call("HMGET", KEYS[1], "tokens", "stamp")
local tokens, stamp = tonumber(stored[1]), tonumber(stored[2])
if tokens == nil or stamp == nil or tokens ~= tokens then
  tokens, stamp = capacity, now
end
tokens = math.min(capacity, math.max(0, tokens + math.max(0, now - stamp) * rate))
local admitted = math.max(0, math.min(wanted, math.floor(tokens)))
tokens = tokens - admitted
local next_ms = 0
if tokens < 1 then next_ms = math.max(1, math.ceil((1 - tokens) / rate * 1000)) end
redis.call("HSET", KEYS[1], "tokens", string.format("%.17g", tokens),
           "stamp", string.format("%.6f", now))
redis.call("PEXPIRE", KEYS[1], math.ceil((capacity - tokens) / rate * 1000) + 1000)
return {admitted, math.floor(tokens), next_ms, string.format("%.6f", now)}
