-- Grant the lease on this group when every resource it names is free (or already ours) and
-- our fencing proposal is above the highest fence this group has committed for each: all of
-- them, or none. One resource is a set of one. (holder.lua and admission.lua are prepended.)
-- KEYS: per resource its lock and fence (lock_1, fence_1, ..., lock_k, fence_k), then the
--       admission marker and the policy
-- ARGV: token, ttl_ms, fence proposal, owner record (JSON), replicas the client waits for
-- Returns {1} granted | {0, pttl_ms, owner record, resource index} held by another token
--       | {2, stored_fence} | {3, quarantine_left_ms} quarantined (or this slot just found
--       it lost a lock or fence it granted: see the ledger in admission.lua) | {4} unadmitted
--       | {5, max_ttl_ms} ttl above the policy | {6, maxmemory_policy}
--       | {9, replicas} | {10, online, replicas, connected} (acknowledged mode)
local refused = vote_refusal(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[2], ARGV[5])
if refused then
  return refused
end
-- A fence outlives every lease it fenced by far: a day, or a hundred of the longest TTLs.
-- Proposals follow the clock, so once it expires the next proposal is above it anyway,
-- unless a client's clock is off by half that much (docs/safety.md, "Fence keys").
local fence_ttl = math.max(86400000, policy_max_ttl * 100)
local proposal = tonumber(ARGV[3])
local ahead, ahead_text
-- Everything is read before anything is written, so a refusal leaves no grant behind. A
-- value of the wrong type raises an error here: it is never overwritten.
for lock = 1, #KEYS - 2, 2 do
  local holder, record = holder_of(redis.call('GET', KEYS[lock]))
  if holder and holder ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[lock]), record, (lock + 1) / 2}
  end
  local stored_text = redis.call('GET', KEYS[lock + 1])
  local stored = tonumber(stored_text or '0') or 0
  if ledger_lost(KEYS[#KEYS - 1], KEYS[lock], holder, KEYS[lock + 1], stored) then
    return slot_lost(KEYS[#KEYS - 1])
  end
  -- Our own fence is a retried delivery of this very grant (or a member already granted to
  -- us in this round); anything else at or above the proposal is ahead of it.
  if stored > proposal or (stored == proposal and holder ~= ARGV[1]) then
    if not ahead or stored > ahead then
      ahead, ahead_text = stored, stored_text
    end
  end
end
if ahead then
  return {2, ahead_text}
end
local value = ARGV[1] .. '\n' .. ARGV[4]
for lock = 1, #KEYS - 2, 2 do
  redis.call('SET', KEYS[lock], value, 'PX', ARGV[2])
  redis.call('SET', KEYS[lock + 1], ARGV[3], 'PX', fence_ttl)
  ledger_note(KEYS[#KEYS - 1], KEYS[lock], KEYS[lock + 1], ARGV[3])
end
return {1}
