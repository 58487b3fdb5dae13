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
-- Acknowledged mode (policy field acked_replicas > 0): a vote counts only once every one of
-- the master's replicas acknowledged it (the client's WAIT), so a replica promoted in its
-- place holds every counted vote. Such a master keeps a replicated copy of its marker, the
-- record (<prefix>:policy:acked = {history, since, vote_from}). A promoted replica whose
-- previous history (master_replid2) is the record's takes the record over as its marker and
-- votes when its old master would have, at once in the usual case. Any other new history (a
-- restart empty, a replica that restarted or missed the record) sits out as above. A record
-- marked revoked (admit.lua, on the way out of the mode) is taken over by no one.
-- admission(marker, policy) answers nil when the master may vote, else the reply that
-- refuses the vote: {3, ms_left} quarantined, {4} no policy, or {6, maxmemory_policy}. It
-- sets policy_max_ttl, the longest TTL the master grants, policy_window and policy_acked.
-- All are kept per marker for the rest of the script run, so a batch of lock calls
-- (batch.lua) reads each once. A Cluster primary has a marker and a policy per slot, and its
-- batches mix slots.
-- A new history starts with an empty marker: the ledger below belongs to one history.
local admission_answers = {}
local policy_ttls = {}
local policy_windows = {}
local policy_ackeds = {}
local policy_max_ttl
local policy_window
local policy_acked
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
-- takeover(marker, policy_key, history): in acknowledged mode, a promoted replica's ms left
-- to sit out under the record of the history it was a replica in, which it writes as its
-- own marker; nil when the record is of another history, or missing.
local function takeover(marker, policy_key, history)
  local record = redis.call('HMGET', policy_key .. ':acked', 'history', 'since', 'vote_from',
    'revoked')
  if not record[1] or record[1] ~= info_field(info_reply, 'master_replid2') or record[4] then
    return nil
  end
  local since = tonumber(record[2])
  local vote_from = tonumber(record[3]) or now
  redis.set_repl(redis.REPL_NONE)
  local written = redis.pcall('DEL', marker)
  if not (type(written) == 'table' and written.err) then
    if since then
      written = redis.pcall('HSET', marker, 'history', history, 'since', since, 'vote_from', vote_from)
    else
      written = redis.pcall('HSET', marker, 'history', history, 'vote_from', vote_from)
    end
  end
  redis.set_repl(redis.REPL_ALL)
  if type(written) == 'table' and written.err then
    error(written)
  end
  if since then
    vote_from = math.max(vote_from, since + policy_max_ttl + policy_window)
  end
  return vote_from - now
end
-- keep_record(marker, policy_key, history, met): writes the record of this history once,
-- replicated. A history met in this call copies its new marker. A history met earlier was
-- met outside acknowledged mode: its votes until now may be missing on the replicas, so the
-- record makes a replica promoted from it sit out from now.
local function keep_record(marker, policy_key, history, met)
  local key = policy_key .. ':acked'
  if redis.call('HGET', key, 'history') == history then
    return
  end
  local since, vote_from = now, now
  if met then
    local admitted = redis.call('HMGET', marker, 'since', 'vote_from')
    since, vote_from = admitted[1], admitted[2] or now
  end
  redis.call('DEL', key)
  if since then
    redis.call('HSET', key, 'history', history, 'since', since, 'vote_from', vote_from)
  else
    redis.call('HSET', key, 'history', history, 'vote_from', vote_from)
  end
end
local function admission_of(marker, policy_key)
  policy_max_ttl = nil
  policy_window = 0
  policy_acked = 0
  info_reply = info_reply or redis.call('INFO', 'replication', 'memory', 'cluster')
  local eviction = eviction_policy(info_reply)
  if eviction then
    return {6, eviction}
  end
  local window
  policy_max_ttl, window, policy_acked = read_policy(policy_key)
  if not policy_max_ttl then
    policy_window, policy_acked = 0, 0
    return {4}
  end
  policy_window = window
  local history = info_field(info_reply, 'master_replid')
  if not now then
    local clock = redis.call('TIME')
    now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  end
  local admitted = redis.call('HMGET', marker, 'history', 'vote_from', 'since')
  local left
  local met = admitted[1] ~= history
  if met then
    left = policy_acked > 0 and takeover(marker, policy_key, history)
    if not left then
      left = policy_max_ttl + window
      quarantine_from_now(marker, history, left)
    end
  else
    local vote_from = tonumber(admitted[2])
    local since = tonumber(admitted[3])
    if since then
      vote_from = math.max(vote_from, since + policy_max_ttl + window)
    end
    left = vote_from - now
  end
  if policy_acked > 0 then
    keep_record(marker, policy_key, history, met)
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
    policy_ackeds[marker] = policy_acked
  end
  policy_max_ttl = policy_ttls[marker]
  policy_window = policy_windows[marker]
  policy_acked = policy_ackeds[marker]
  return answer or nil
end
-- The replicas attached and in sync (state=online), and those connected at all.
local function replicas_online()
  local online, at = 0, 1
  while true do
    at = string.find(info_reply, ',state=online,', at, true)
    if not at then
      break
    end
    online, at = online + 1, at + 1
  end
  return online, tonumber(info_field(info_reply, 'connected_slaves')) or 0
end
-- vote_refusal(marker, policy, ttl_ms, acks) is admission's refusal, or {9, replicas} when
-- the call does not wait for exactly the policy's replicas (0 outside acknowledged mode), or
-- in acknowledged mode (`acks`, what
-- its client will WAIT for) or {10, online, replicas, connected} when the master does not
-- have exactly those replicas, each in sync; or {5, max_ttl_ms} when the master votes but
-- ttl_ms is above its policy; or nil when it may grant a lease that long.
local function vote_refusal(marker, policy_key, ttl_ms, acks)
  local refused = admission(marker, policy_key)
  if refused then
    return refused
  end
  if policy_acked > 0 then
    if (tonumber(acks) or 0) ~= policy_acked then
      return {9, policy_acked}
    end
    local online, connected = replicas_online()
    if online ~= policy_acked or connected ~= policy_acked then
      return {10, online, policy_acked, connected}
    end
  elseif (tonumber(acks) or 0) > 0 then
    -- The mode is off: the client learns to stop waiting for replicas.
    return {9, 0}
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
