-- wake: publish a wake-up to idle workers, never raising. The move before it is done;
-- a refused PUBLISH (an ACL user without channel permission) must not turn it into an
-- error, or a caller that tries again would push the job twice. Returns nil, or the
-- error text for the caller to report. Prepended by scripts.py to scripts that call it.
-- Model: none — a PUBLISH; a wake-up missed is made up by the next poll
local function wake(channel, message)
  local reply = redis.pcall("PUBLISH", channel, message)
  if type(reply) == "table" and reply.err then return reply.err end
  return nil
end
