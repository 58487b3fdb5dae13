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
-- refuses the vote: {3, ms_left} quarantined, {4} no policy, or {6, maxmemory_policy}. The
-- answer is kept for the rest of the script run, so a batch of lock calls (batch.lua) reads
-- it once; so is policy_max_ttl, the longest TTL the master grants.
local admission_answer
local policy_max_ttl
local function admission(marker, policy_key)
  if admission_answer ~= nil then
    return admission_answer or nil
  end
  local info = redis.call('INFO', 'replication', 'memory')
  local eviction = eviction_policy(info)
  if eviction then
    admission_answer = {6, eviction}
    return admission_answer
  end
  local policy = redis.call('HMGET', policy_key, 'max_ttl_ms', 'write_window_ms')
  policy_max_ttl = tonumber(policy[1])
  if not policy_max_ttl then
    admission_answer = {4}
    return admission_answer
  end
  local window = tonumber(policy[2]) or 0
  local history = info_field(info, 'master_replid')
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
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
    admission_answer = {3, left}
    return admission_answer
  end
  admission_answer = false
  return nil
end
