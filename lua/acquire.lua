-- Grant the lock on this group when it is free (or already ours) and our fencing proposal is
-- above the highest fence this group has committed. (holder.lua and admission.lua are
-- prepended.)
-- KEYS: lock, fence, admission marker, policy
-- ARGV: token, ttl_ms, fence proposal, owner record (JSON)
-- Returns {1} granted | {0, pttl_ms, owner record} held by another token | {2, stored_fence}
--       | {3, quarantine_left_ms} | {4} unadmitted | {5, max_ttl_ms} ttl above the policy
local refused = admission(KEYS[3], KEYS[4])
if refused then
  return refused
end
if tonumber(ARGV[2]) > policy_max_ttl then
  return {5, policy_max_ttl}
end
-- A fence outlives every lease it fenced by far: a day, or a hundred of the longest TTLs.
-- Proposals follow the clock, so once it expires the next proposal is above it anyway,
-- unless a client's clock is off by half that much (docs/safety.md, "Fence keys").
local fence_ttl = math.max(86400000, policy_max_ttl * 100)
local stored_text = redis.call('GET', KEYS[2])
local stored = tonumber(stored_text or '0') or 0
local proposal = tonumber(ARGV[3])
local value = ARGV[1] .. '\n' .. ARGV[4]
if stored < proposal then
  -- The common case in one call: take the lock if it is free (a value of the wrong type
  -- raises an error, it is never overwritten), else learn who holds it.
  local holder, record = holder_of(redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2], 'GET'))
  if not holder then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', fence_ttl)
    return {1}
  end
  if holder ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1]), record}
  end
  -- Ours from an earlier round of this attempt, under a lower fence: take the new one.
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  redis.call('SET', KEYS[2], ARGV[3], 'PX', fence_ttl)
  return {1}
end
local holder, record = holder_of(redis.call('GET', KEYS[1]))
if holder and holder ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1]), record}
end
-- A retried delivery of this very grant finds its own token and fence: answer it again.
if holder == ARGV[1] and stored == proposal then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {2, stored_text}
