-- Batches: the shared steps of the batch scripts. Prepended by scripts.py to scripts
-- that call them.
--
-- A batch is seven keys in the namespace's slot (``Keys.batch_keys``), passed as KEYS
-- in this order: its hash (description, created_at, sealed, state, parent, callbacks,
-- finished_at, total, fire, fired), then the sets of its members' jids by where they
-- are — pending, succeeded, dead, cancelled — then its open child batches (children)
-- and all of them (kids). A member's end moves its jid between the sets (SMOVE): never a
-- counter, so a member that ends twice (run again after a lost ack reply, a recovery)
-- counts once.
--
-- States: open (its ``async with`` block has not exited: nothing can fire), running
-- (sealed, members pending), then for good: success (every member succeeded), complete
-- (every member ended, some cancelled, none dead) or dead (some member dead); or
-- abandoned (its block raised: its members cancelled, no callback fires). A batch is
-- sealed once no block holds it open (``holders``: one token per ``async with``).
-- Model: none — a library of the batch scripts; batch_decide is h_decide inside the steps that call it

-- batch_keys: KEYS[first .. first + 6] as a table (nil if KEYS[first] is absent).
local function batch_keys(first)
  if not KEYS[first] then return nil end
  local k = {}
  for i = 0, 6 do k[i + 1] = KEYS[first + i] end
  return k
end

-- batch_final: whether ``state`` is one a batch ends in.
local function batch_final(state)
  return state == "success" or state == "complete" or state == "dead" or state == "abandoned"
end

-- batch_holders: the tokens of the blocks that hold batch ``k`` open (each ``async with``
-- has its own), without ``drop`` and with ``add``; written back, and whether any is left.
-- A set of tokens, not a count: an open or a seal sent twice holds or lets go once.
local function batch_holders(k, add, drop)
  local kept = {}
  for token in string.gmatch(redis.call("HGET", k[1], "holders") or "", "%S+") do
    if token ~= drop and token ~= add then kept[#kept + 1] = token end
  end
  if add then kept[#kept + 1] = add end
  redis.call("HSET", k[1], "holders", table.concat(kept, " "))
  return #kept > 0
end

-- batch_held: batch ``bid`` (keys ``k``) is in ``held_index`` while a block of a worker
-- process holds it (a token "<nonce>.<n|r>@<identity>": workflows/batch.py), or a block outside a
-- worker on a lease ("<nonce>.<n|r>~<ms>"), so that the relay can let go of a block
-- whose process died inside it, or whose lease lapsed (worker/batch_reaper.py); it
-- leaves once none does — and, if the relay let go of a dead block (``orphans``: that
-- block may have joined a member it never pushed), once the relay repaired it
-- (batch_repair.lua).
local function batch_held(k, held_index, bid, now)
  local holders = redis.call("HGET", k[1], "holders") or ""
  if string.find(holders, "@", 1, true) or string.find(holders, "~", 1, true)
      or redis.call("HEXISTS", k[1], "orphans") == 1 then
    redis.call("ZADD", held_index, "NX", now, bid)
  else
    redis.call("ZREM", held_index, bid)
  end
end

-- batch_lease_ms: the lease (ms) a holder token carries: "<nonce>.<n|r>~<ms>", a block
-- in a process that is not a worker (workflows/batch.py); nil for any other token.
local function batch_lease_ms(token)
  local ms = token and string.match(token, "^%x+%.[nr]~(%d+)$")
  return ms and tonumber(ms)
end

-- batch_clock: Redis' clock (TIME), or the caller's ``fallback`` if TIME is refused:
-- the same as _clock.lua's, which a helper of this file cannot call (the helper files
-- are put before a script in name order: _batch before _clock; and naming that
-- function here would put it, uncalled, in every script that takes this one).
local function batch_clock(fallback)
  local ok, time = pcall(redis.call, "TIME")
  if ok then return tonumber(time[1]) + tonumber(time[2]) / 1000000 end
  return tonumber(fallback)
end

-- batch_leases: the lease deadlines of batch ``k``'s holders ("leases": "<token>=<epoch
-- s>" each, Redis' clock), written back with only the holders' kept, and the block of
-- ``renew`` (if it holds the batch on a lease) holding it its lease from now: its open
-- and each add renew it in the same step. Returns token -> deadline.
local function batch_leases(k, renew, fallback)
  local holders = " " .. (redis.call("HGET", k[1], "holders") or "") .. " "
  local raw = redis.call("HGET", k[1], "leases") or ""
  local found, parts = {}, {}
  for token, deadline in string.gmatch(raw, "(%S+)=(%S+)") do
    if token ~= renew and string.find(holders, " " .. token .. " ", 1, true) then
      found[token] = tonumber(deadline)
      parts[#parts + 1] = token .. "=" .. deadline
    end
  end
  local ms = batch_lease_ms(renew)
  if ms and string.find(holders, " " .. renew .. " ", 1, true) then
    found[renew] = batch_clock(fallback) + ms / 1000
    parts[#parts + 1] = renew .. "=" .. string.format("%.3f", found[renew])
  end
  if #parts > 0 or raw ~= "" then redis.call("HSET", k[1], "leases", table.concat(parts, " ")) end
  return found
end

-- batch_lapsed: an error reply if the block of ``token`` was let go of because its lease
-- lapsed (batch_release wrote it in "lapsed"): that block is alive after all, and must
-- hear it — its members would otherwise join a batch that ended, or that another block
-- seals. nil otherwise.
local function batch_lapsed(k, token)
  if not batch_lease_ms(token) then return nil end
  local lapsed = " " .. (redis.call("HGET", k[1], "lapsed") or "") .. " "
  if not string.find(lapsed, " " .. token .. " ", 1, true) then return nil end
  return redis.error_reply("LAPSED this block's hold on batch " .. k[1] .. " lapsed (" ..
    (batch_lease_ms(token) / 1000) .. " s without an open or an add): the batch was let " ..
    "go of (now " .. (redis.call("HGET", k[1], "state") or "gone") .. ")")
end

-- batch_bound: every key of batch ``k`` expires ``ttl`` seconds from now.
local function batch_bound(k, ttl)
  for i = 1, 7 do redis.call("EXPIRE", k[i], ttl) end
end

-- batch_decide: what batch ``k`` (id ``bid``) has come to, written in the same step:
-- its state, and the callbacks due (``fire``: kinds decided, waiting for the relay to
-- enqueue them; ``fired``: kinds enqueued). Idempotent: a kind is decided once, ever;
-- calling it again decides nothing new. Nothing is decided before the batch is sealed.
-- The batch joins the ``firing`` set (KEYS: the namespace's) when it has something for
-- the relay: a callback to enqueue, or its end to tell its parent; it leaves the
-- ``open_index`` of batches not ended when it ends. Returns its state.
local function batch_decide(k, firing, bid, now, done_ttl, open_index)
  local got = redis.call("HMGET", k[1], "sealed", "state", "fire", "fired")
  local sealed, state, fire, fired = got[1], got[2], got[3] or "", got[4] or ""
  if not state or sealed ~= "1" or state == "abandoned" then return state or false end
  local decided = " " .. fire .. " " .. fired .. " "
  local new = {}
  local function decide(kind)
    if not string.find(decided, " " .. kind .. " ", 1, true) then
      new[#new + 1] = kind
      decided = decided .. kind .. " "
    end
  end
  local dead = redis.call("SCARD", k[4])
  if dead > 0 then decide("death") end
  if redis.call("SCARD", k[2]) == 0 and redis.call("SCARD", k[6]) == 0 then
    local final = "success"
    if dead > 0 then final = "dead" elseif redis.call("SCARD", k[5]) > 0 then final = "complete" end
    if final ~= state then
      redis.call("HSET", k[1], "state", final)
      if not batch_final(state) then redis.call("HSET", k[1], "finished_at", now) end
      state = final
    end
    redis.call("ZREM", open_index, bid)
    decide("complete")
    if final == "success" then decide("success") end -- also after a dead member retried
    batch_bound(k, done_ttl)
  elseif state == "open" then
    state = "running"
    redis.call("HSET", k[1], "state", state)
  end
  if #new > 0 then
    local joined = table.concat(new, " ")
    redis.call("HSET", k[1], "fire", fire == "" and joined or (fire .. " " .. joined))
    redis.call("ZADD", firing, now, bid)
  end
  return state
end

-- batch_end_abandoned: batch ``k`` (id ``bid``) ends abandoned — no callback fires — and
-- leaves the open children of its parent (keys ``parent``, id ``parent_bid``; nil: none),
-- which may end the parent in turn.
local function batch_end_abandoned(k, parent, firing, open_index, bid, parent_bid, now, ttl)
  redis.call("HSET", k[1], "state", "abandoned", "sealed", "1", "finished_at", now)
  redis.call("ZREM", open_index, bid)
  batch_bound(k, ttl)
  if parent and redis.call("SREM", parent[6], bid) == 1 then
    batch_decide(parent, firing, parent_bid, now, ttl, open_index)
  end
end
