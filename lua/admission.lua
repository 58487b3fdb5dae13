-- Prologue of the scripts that vote (acquire, extend), after info.lua. A master votes only
-- under its lock policy, and only once its current replication history has been known for
-- the policy's quarantine.
-- The policy (<prefix>:policy = {max_ttl_ms, write_window_ms}) is replicated data: the
-- server owns it, whatever each client's configuration says. A master without one lost its
-- data and cannot tell how long to sit out: it answers unadmitted until it adopts the policy
-- of a majority of groups (adopt.lua) or an operator admits it (admit.lua).
-- A promoted replica or a master restarted empty starts a new history (a new master_replid)
-- and sits out max_ttl_ms + write_window_ms: every lease it may have missed has expired by
-- then, including those an isolated old master granted until it stopped taking writes. The
-- marker (<prefix>:admission = {history, since, vote_from}) is written without replication,
-- so a replica never inherits its master's admission. The quarantine runs from `since`
-- under the policy in force now: a policy raised during it (or lost in a failover and raised
-- again) lengthens it, since the old master may have granted leases that long.
-- A master that may evict keys (maxmemory set, with a policy other than noeviction) could
-- drop a live lock or a fence with no change of history, so it does not vote at all.
-- admission(marker, policy) answers nil when the master may vote, else the reply that
-- refuses the vote: {3, ms_left} quarantined, {4} no policy, or {6, maxmemory_policy}. It
-- sets policy_max_ttl, the longest TTL the master grants, and policy_window. All are kept
-- per marker for the rest of the script run, so a batch of lock calls (batch.lua) reads
-- each once. A Cluster primary has a marker and a policy per slot, and its batches mix slots.
-- A new history starts with an empty marker: the ledger below belongs to one history.
local admission_answers = {}
local policy_ttls = {}
local policy_windows = {}
local policy_max_ttl
local policy_window
local info_reply
local now
-- quarantine_from_now(marker, history, left) rewrites the marker, empty but for `history`,
-- so it votes `left` ms from now; written without replication.
local function quarantine_from_now(marker, history, left)
  redis.set_repl(redis.REPL_NONE)
  local written = redis.pcall('DEL', marker)
  if not (type(written) == 'table' and written.err) then
    written = redis.pcall('HSET', marker, 'history', history, 'since', now, 'vote_from', now + left)
  end
  -- Replication back on before any error goes up: the calls batched after this one must
  -- replicate their writes.
  redis.set_repl(redis.REPL_ALL)
  if type(written) == 'table' and written.err then
    error(written)
  end
end
local function admission_of(marker, policy_key)
  policy_max_ttl = nil
  policy_window = 0
  info_reply = info_reply or redis.call('INFO', 'replication', 'memory', 'cluster')
  local eviction = eviction_policy(info_reply)
  if eviction then
    return {6, eviction}
  end
  local policy = redis.call('HMGET', policy_key, 'max_ttl_ms', 'write_window_ms')
  policy_max_ttl = tonumber(policy[1])
  if not policy_max_ttl then
    return {4}
  end
  local window = tonumber(policy[2]) or 0
  policy_window = window
  local history = info_field(info_reply, 'master_replid')
  if not now then
    local clock = redis.call('TIME')
    now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  end
  local admitted = redis.call('HMGET', marker, 'history', 'vote_from', 'since')
  local left
  if admitted[1] ~= history then
    left = policy_max_ttl + window
    quarantine_from_now(marker, history, left)
  else
    local vote_from = tonumber(admitted[2])
    local since = tonumber(admitted[3])
    if since then
      vote_from = math.max(vote_from, since + policy_max_ttl + window)
    end
    left = vote_from - now
  end
  if left > 0 then
    return {3, left}
  end
  return nil
end
local function admission(marker, policy_key)
  local answer = admission_answers[marker]
  if answer == nil then
    answer = admission_of(marker, policy_key) or false
    admission_answers[marker] = answer
    policy_ttls[marker] = policy_max_ttl
    policy_windows[marker] = policy_window
  end
  policy_max_ttl = policy_ttls[marker]
  policy_window = policy_windows[marker]
  return answer or nil
end
-- vote_refusal(marker, policy, ttl_ms) is admission's refusal, or {5, max_ttl_ms} when the
-- master votes but ttl_ms is above its policy, or nil when it may grant a lease that long.
local function vote_refusal(marker, policy_key, ttl_ms)
  local refused = admission(marker, policy_key)
  if refused then
    return refused
  end
  if tonumber(ttl_ms) > policy_max_ttl then
    return {5, policy_max_ttl}
  end
  return nil
end
-- The ledger of a Cluster slot. A slot can lose some keys and keep others: a reshard moves
-- keys one MIGRATE batch at a time, and a slot closed back on its source (`SETSLOT STABLE`,
-- `redis-cli --cluster fix`) after some left, or after the target died with them, keeps no
-- trace of the loss. The marker is one key, so it stays or leaves whole, and it remembers
-- what this node granted in its slot, written without replication like the rest of it:
--   l:<lock>  = the lock's expiry (PEXPIRETIME) as of its last grant or renewal here
--   f:<fence> = <guard>:<fence>, the fence last granted, watched until guard
--               (the grant's time + max_ttl_ms + write_window_ms)
-- A lock missing before its expiry, or a fence below the one granted before its guard, was
-- lost: the slot sits out the policy's quarantine from now, as a promoted master does, and
-- the rest of the script run (a batch) sees it quarantined. Only Cluster nodes keep it: a
-- Sentinel master loses keys only with its whole data, which a new history already covers.
local ledger_on
local function ledger_kept()
  if ledger_on == nil then
    ledger_on = info_field(info_reply, 'cluster_enabled') == '1'
  end
  return ledger_on
end
-- Writes `...` (HSET or HDEL arguments) to the marker without replication, then errors.
local function ledger_write(...)
  redis.set_repl(redis.REPL_NONE)
  local written = redis.pcall(...)
  redis.set_repl(redis.REPL_ALL)
  if type(written) == 'table' and written.err then
    error(written)
  end
end
-- slot_lost(marker) starts the slot's quarantine now, with an empty ledger, and answers it.
local function slot_lost(marker)
  local left = policy_max_ttl + policy_window
  quarantine_from_now(marker, info_field(info_reply, 'master_replid'), left)
  admission_answers[marker] = {3, left}
  return {3, left}
end
-- ledger_lost(marker, lock, holder, fence, stored): whether the slot lost `lock` (read as
-- held by `holder`, nil when missing) or `fence` (read as `stored`; nil: not read).
local function ledger_lost(marker, lock, holder, fence, stored)
  if not ledger_kept() then
    return false
  end
  if not fence then
    return not holder and (tonumber(redis.call('HGET', marker, 'l:' .. lock)) or 0) > now
  end
  local entries = redis.call('HMGET', marker, 'l:' .. lock, 'f:' .. fence)
  if not holder and (tonumber(entries[1]) or 0) > now then
    return true
  end
  if entries[2] then
    local guard, value = string.match(entries[2], '^(%d+):(%d+)$')
    if guard and tonumber(guard) > now and stored < tonumber(value) then
      return true
    end
  end
  return false
end
-- ledger_note(marker, lock, fence, value) records a grant or renewal of `lock` (and of
-- `fence` at `value`, unless nil), and sweeps up to three entries that expired.
local function ledger_note(marker, lock, fence, value)
  if not ledger_kept() then
    return
  end
  local expiry = redis.call('PEXPIRETIME', lock)
  local sample = redis.call('HRANDFIELD', marker, 3, 'WITHVALUES')
  local write = {'HSET', marker, 'l:' .. lock, expiry}
  if fence then
    write[#write + 1] = 'f:' .. fence
    write[#write + 1] = (now + policy_max_ttl + policy_window) .. ':' .. value
  end
  ledger_write(unpack(write))
  local expired = {'HDEL', marker}
  for at = 1, #sample, 2 do
    local field, entry = sample[at], sample[at + 1]
    local kind = string.sub(field, 1, 2)
    local until_ms = tonumber(string.match(entry, '^(%d+)'))
    if (kind == 'l:' or kind == 'f:') and until_ms and until_ms <= now
        and field ~= write[3] and field ~= write[5] then
      expired[#expired + 1] = field
    end
  end
  if #expired > 2 then
    ledger_write(unpack(expired))
  end
end
