-- batch_add: members join an open batch, before they are enqueued (destination first:
-- a member that ends at once finds its jid pending); or leave it, never pushed (an
-- enqueue refused as a duplicate).
-- KEYS[1..7] the batch's keys (_batch.lua)   KEYS[8..] (optional) the hashes of the
-- batches of the blocks enclosing the adding one (its parents' blocks in its task)
-- ARGV[1] the bound of an open batch's keys (s)   ARGV[2] "join" or "leave"
-- ARGV[3] the adding block's holder token ("-": none), then, space-separated, the
-- enclosing blocks' tokens, one for each of KEYS[8..]   ARGV[4] now (epoch s, used only
-- if TIME is refused)   ARGV[5..] the members' jids
-- A block on a lease (token "<nonce>.<n|r>~<ms>") is held ``ms`` from now again, in the
-- same step (_batch.lua ``batch_leases``); so is each enclosing block on a lease: busy
-- in its child's block, it is alive (a batch of theirs that is gone, or a co-tenant's
-- key there, renews nothing and fails nothing).
-- Returns the jids that joined (not those already members: a duplicate enqueue of one
-- must not take the first one out when it leaves), or how many left. Errors (nothing written): "NOBATCH ..." for a
-- batch that does not exist; "SEALED ..." for one not open (reopen it first); "LAPSED ..."
-- for a block whose lease lapsed (the relay let go of it: it must not add silently).
-- Safe to run twice: a jid already pending is one member; one gone leaves once.
-- Model: batch_add (model/protocol.pml); upholds: batch_sealed_unheld, batch_ends
local k, tokens = batch_keys(1), {}
for token in string.gmatch(ARGV[3], "%S+") do tokens[#tokens + 1] = token end
local got = redis.call("HMGET", k[1], "state", "sealed")
if not got[1] then return redis.error_reply("NOBATCH batch does not exist: " .. k[1]) end
local lapsed = batch_lapsed(k, tokens[1])
if lapsed then return lapsed end
if got[2] == "1" or batch_final(got[1]) then
  return redis.error_reply("SEALED batch is not open (" .. got[1] .. "): " .. k[1])
end
local changed, joined = 0, {}
for i = 5, #ARGV do
  if ARGV[2] == "leave" then
    changed = changed - redis.call("SREM", k[2], ARGV[i])
  elseif redis.call("SISMEMBER", k[3], ARGV[i]) == 0 and redis.call("SISMEMBER", k[4], ARGV[i]) == 0
      and redis.call("SISMEMBER", k[5], ARGV[i]) == 0 and redis.call("SADD", k[2], ARGV[i]) == 1 then
    changed = changed + 1
    joined[#joined + 1] = ARGV[i]
  end
end
redis.call("HINCRBY", k[1], "total", changed)
batch_leases(k, tokens[1], ARGV[4])
for i = 2, #tokens do
  if KEYS[6 + i] then pcall(batch_leases, {KEYS[6 + i]}, tokens[i], ARGV[4]) end
end
batch_bound(k, tonumber(ARGV[1]))
if ARGV[2] == "leave" then return -changed end
return joined
