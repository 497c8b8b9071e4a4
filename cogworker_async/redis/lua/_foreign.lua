-- Keys of another type: the check a script makes before it writes anything. Prepended by
-- scripts.py to the scripts that call it.
--
-- A co-tenant's key (another program's, or one set by hand) may sit where a script
-- writes one of ours. A script's writes before an error are kept, so a raw WRONGTYPE
-- part-way leaves a half-made move (a batch hash with no index entry) and names no key:
-- each key a script writes is asked first, and the script refuses, naming it. The reply
-- "WRONGTYPE <what> <key> is not a <type> (not written by cogworker: delete it)" is
-- what the Python side turns into the project's WrongTypeKey (redis/batches.py,
-- redis/dedup.py). cancel.lua has its own (``foreign``), older, of the same reply.
-- Model: none — a library: a key of another type refused before any write (co-tenant garbage is outside the model: it is the documented exception of batch_ends)

-- key_foreign: the error reply naming ``key`` (``what``: which key it is to us) if it
-- holds another type than ``want`` (zset, set, hash, list or string); nil otherwise (an
-- absent key too). Read with a command of the wanted type, not TYPE, which the
-- enqueuer's documented ACL (docs/deployment.md) does not grant: a WRONGTYPE reply means
-- another type, whichever it is. Any other refusal (NOPERM) is returned as it came.
local function key_foreign(what, key, want)
  local reply
  if want == "zset" then reply = redis.pcall("ZSCORE", key, "-")
  elseif want == "set" then reply = redis.pcall("SCARD", key)
  elseif want == "hash" then reply = redis.pcall("HGET", key, "-")
  elseif want == "list" then reply = redis.pcall("LLEN", key)
  else reply = redis.pcall("GET", key) end
  if type(reply) ~= "table" or not reply.err then return nil end
  if not string.find(reply.err, "WRONGTYPE", 1, true) then return reply end -- NOPERM...
  return redis.error_reply("WRONGTYPE " .. what .. " " .. key .. " is not a " .. want ..
                           " (not written by cogworker: delete it)")
end

-- key_foreigns: the first of ``checks`` ({what, key, want} each; one whose key is nil or
-- false is skipped) that holds another type, as key_foreign's reply; nil if none does.
local function key_foreigns(checks)
  for _, c in ipairs(checks) do
    local refused = c[2] and key_foreign(c[1], c[2], c[3])
    if refused then return refused end
  end
  return nil
end
