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
-- sets policy_max_ttl, the longest TTL the master grants. Both are kept per marker for the
-- rest of the script run, so a batch of lock calls (batch.lua) reads each once. A Cluster
-- primary has a marker and a policy per slot, and its batches mix slots.
local admission_answers = {}
local policy_ttls = {}
local policy_max_ttl
local info_reply
local now
local function admission_of(marker, policy_key)
  policy_max_ttl = nil
  info_reply = info_reply or redis.call('INFO', 'replication', 'memory')
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
  local history = info_field(info_reply, 'master_replid')
  if not now then
    local clock = redis.call('TIME')
    now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  end
  local admitted = redis.call('HMGET', marker, 'history', 'vote_from', 'since')
  local left
  if admitted[1] ~= history then
    left = policy_max_ttl + window
    redis.set_repl(redis.REPL_NONE)
    local written = redis.pcall('HSET', marker, 'history', history, 'since', now, 'vote_from', now + left)
    -- Replication back on before any error goes up: the calls batched after this one
    -- must replicate their writes.
    redis.set_repl(redis.REPL_ALL)
    if type(written) == 'table' and written.err then
      error(written)
    end
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
  end
  policy_max_ttl = policy_ttls[marker]
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
