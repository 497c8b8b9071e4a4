-- batch_open: open a batch for members to be added (its ``async with`` block), or open
-- again one not yet ended (``jobs.batch(bid=...)``): nothing fires until it is sealed.
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8] the namespace's batch index (zset
-- bid -> created_at)   KEYS[9] its index of batches not ended
-- KEYS[10] its index of batches held by a worker process's block, or on a lease
-- (``batches_held``)
-- KEYS[11] its firing set (only checked: its type)   KEYS[12..18] (optional) the parent
-- batch's keys
-- ARGV[1] bid   ARGV[2] now (epoch s)   ARGV[3] description   ARGV[4] callbacks (JSON,
-- stored as given)   ARGV[5] parent bid ("": none)   ARGV[6] the bound of an open batch's
-- keys (s, renewed by each add)   ARGV[7] the block's holder token   ARGV[8] "reopen"
-- (it must exist) or "new"
-- A token "<nonce>.<n|r>~<ms>" (a block outside a worker) holds the batch on a lease:
-- ``ms`` from now (Redis' clock), renewed by each add (_batch.lua ``batch_leases``).
-- Errors (nothing written): "ENDED batch <bid> has ended" (it cannot take members any
-- more); "NOBATCH ..." reopening one that does not exist (or expired); "NOPARENT ..."
-- for a parent that does not exist or has ended.
-- "LAPSED ..." for a token whose lease lapsed (the relay let go of it).
-- "WRONGTYPE <what> <key> is not a <type> ..." for a key it writes (or the firing set,
-- which the batch's end writes) that holds another type: a co-tenant's key; asked
-- before anything is written, so no batch is half made and none is opened that could
-- never fire.
-- Safe to run twice: a second call reopens what the first opened.
-- Model: batch_open (model/protocol.pml); upholds: batch_sealed_unheld, batch_ends
local k, parent = batch_keys(1), batch_keys(12)
local refused = key_foreigns({
  {"batch hash", k[1], "hash"}, {"batch index", KEYS[8], "zset"},
  {"open batch index", KEYS[9], "zset"}, {"held batch index", KEYS[10], "zset"},
  {"firing set", KEYS[11], "zset"}, {"parent batch hash", parent and parent[1], "hash"},
  {"parent's children set", parent and parent[6], "set"},
  {"parent's kids set", parent and parent[7], "set"}})
if refused then return refused end
local state = redis.call("HGET", k[1], "state")
if state then
  if batch_final(state) then
    return redis.error_reply("ENDED batch " .. ARGV[1] .. " has ended (" .. state .. ")")
  end
  local lapsed = batch_lapsed(k, ARGV[7])
  if lapsed then return lapsed end
  redis.call("HSET", k[1], "sealed", "0")
  batch_holders(k, ARGV[7], nil)
  batch_leases(k, ARGV[7], ARGV[2])
  batch_held(k, KEYS[10], ARGV[1], tonumber(ARGV[2]))
  batch_bound(k, tonumber(ARGV[6]))
  return "reopened"
end
if ARGV[8] == "reopen" then
  return redis.error_reply("NOBATCH batch " .. ARGV[1] .. " does not exist (or expired)")
end
if parent then
  local parent_state = redis.call("HGET", parent[1], "state")
  if not parent_state or batch_final(parent_state) then
    return redis.error_reply("NOPARENT batch " .. ARGV[5] .. " " ..
                             (parent_state and "has ended" or "does not exist"))
  end
end
local now = tonumber(ARGV[2])
redis.call("HSET", k[1], "state", "open", "sealed", "0", "created_at", ARGV[2],
           "description", ARGV[3], "callbacks", ARGV[4], "parent", ARGV[5], "total", 0,
           "holders", ARGV[7])
batch_leases(k, ARGV[7], ARGV[2])
batch_held(k, KEYS[10], ARGV[1], now)
batch_bound(k, tonumber(ARGV[6]))
redis.call("ZADD", KEYS[8], now, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[8], "-inf", now - tonumber(ARGV[6])) -- long gone
redis.call("ZADD", KEYS[9], now, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[9], "-inf", now - tonumber(ARGV[6])) -- abandoned
if parent then -- the parent ends only once this one has: it waits in its children
  redis.call("SADD", parent[6], ARGV[1])
  redis.call("SADD", parent[7], ARGV[1])
  batch_bound(parent, tonumber(ARGV[6])) -- its sets made here are bounded with it
end
return "opened"
