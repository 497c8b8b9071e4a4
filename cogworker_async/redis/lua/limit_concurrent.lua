-- limit_concurrent: take a slot of a concurrent limiter if fewer than N hold one, after
-- freeing the slots whose holder is gone.
-- KEYS[1] the limiter's holders: a zset of "<identity>\t<jid>\t<token>" (a worker's job)
-- or "\t<jid>\t<token>\t<lease s>" (a caller outside any worker: no process beats for
-- it), score = when it was taken (Redis TIME)
-- ARGV[1] capacity N   ARGV[2] the member to add   ARGV[3] the prefix of the processes'
-- alive markers ("<ns>:{<ns>}:process:"): the holder's process lives while
-- ARGV[3] .. identity exists. Those keys are derived here; they share KEYS[1]'s slot (the
-- namespace's: keys.py puts a limiter's keys there for this).
-- ARGV[4] the caller's clock (epoch s), used only if TIME is refused
-- ARGV[5] the holders key's idle TTL (s): renewed by every call; it goes only when
-- nobody took or asked for a slot for that long
-- ARGV[6...] more members to add after ARGV[2], in order (the acquisitions of one
-- process that asked at about the same time: one call for all of them)
-- Returns {1 admitted | 0 refused (ARGV[2]'s), holders after the call, slots freed, now,
-- one "1" or "0" per member in order (ARGV[2]'s first)}: a member is refused only when
-- every earlier one was admitted or refused and the limiter is full.
-- A slot dies with its process: the beat's alive marker has a TTL, so a holder whose
-- process was SIGKILLed (or stopped: it deletes its marker) is freed by the next call
-- that finds the limiter full, without a TTL guess on the hold itself. A live process's
-- hold has no time bound. A leased holder is freed once its lease has run out. A member
-- in another format (not ours) is freed. A repeated call (a lost reply) adds nothing
-- twice: the member is unique to the acquisition (its token).
-- Model: none — a concurrency limiter (job limiters not modelled; a group's limit is fetch's, modelled)
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "zset" and kind ~= "none" then
  return redis.error_reply("WRONGTYPE limiter holders " .. KEYS[1] .. " is a " .. kind ..
                           ", not a zset (not written by cogworker: delete it)")
end
local now = redis_now(ARGV[4])
local capacity = tonumber(ARGV[1])
local members = {ARGV[2]}
for i = 6, #ARGV do members[#members + 1] = ARGV[i] end
local count = redis.call("ZCARD", KEYS[1])
local freed, cleaned = 0, false

-- Frees the slots whose holder is gone; once per call, when the first member that is
-- not held already finds the limiter full.
local function free_gone()
  local alive = {}
  local held = redis.call("ZRANGE", KEYS[1], 0, -1, "WITHSCORES")
  for i = 1, #held, 2 do
    local member, taken = held[i], tonumber(held[i + 1])
    local identity, jid, token, lease = string.match(member, "^([^\t]*)\t([^\t]*)\t([^\t]+)\t?([^\t]*)$")
    local gone
    if identity == nil then
      gone = true -- not ours
    elseif identity == "" then
      local seconds = tonumber(lease)
      gone = seconds == nil or taken + seconds < now
    else
      if alive[identity] == nil then
        -- a marker with a TTL, as every beat writes it (requeue.lua: one without is none)
        alive[identity] = redis.call("PTTL", ARGV[3] .. identity) > 0
      end
      gone = not alive[identity]
    end
    if gone then
      freed = freed + redis.call("ZREM", KEYS[1], member)
    end
  end
  count = count - freed
end

local flags = {}
for i, member in ipairs(members) do
  if count >= capacity and not cleaned and redis.call("ZSCORE", KEYS[1], member) == false then
    cleaned = true
    free_gone()
  end
  if count < capacity then
    count = count + redis.call("ZADD", KEYS[1], "NX", now, member)
    flags[i] = "1"
  elseif redis.call("ZSCORE", KEYS[1], member) then
    flags[i] = "1" -- already held (a repeated call)
  else
    flags[i] = "0"
  end
end
if count > 0 then
  redis.call("EXPIRE", KEYS[1], math.max(1, math.ceil(tonumber(ARGV[5]))))
end
return {tonumber(flags[1]), count, freed, string.format("%.6f", now), table.concat(flags)}
