-- Renew the TTL of every lock of the lease, only when each still carries our token: a group
-- that lost one of them renews none. A permit's renewal also keeps its semaphore's permit
-- count alive, as long as a grant does: a permit held by renewals alone must not outlive the
-- count, or a caller giving a larger count would find none and take more permits.
-- (holder.lua and admission.lua are prepended.)
-- KEYS: the locks, then the permit counts, then the admission marker and the policy
-- ARGV: token, ttl_ms, number of locks, replicas the client waits for
-- Returns {1} renewed | {0} not ours | {3, quarantine_left_ms} quarantined (or this slot
--       just found it lost a lock it granted: see the ledger in admission.lua) | {4} unadmitted
--       | {5, max_ttl_ms} ttl above the policy | {6, maxmemory_policy}
--       | {9, replicas} | {10, online, replicas, connected} (acknowledged mode)
local refused = vote_refusal(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[2], ARGV[4])
if refused then
  return refused
end
local locks = tonumber(ARGV[3])
-- Every key is read before any is written: on a slot mid-migration a key that left fails
-- the call here, before it changed anything.
for count = locks + 1, #KEYS - 2 do
  redis.call('EXISTS', KEYS[count])
end
for lock = 1, locks do
  local holder = holder_of(redis.call('GET', KEYS[lock]))
  if holder ~= ARGV[1] then
    if ledger_lost(KEYS[#KEYS - 1], KEYS[lock], holder) then
      return slot_lost(KEYS[#KEYS - 1])
    end
    return {0}
  end
end
for lock = 1, locks do
  redis.call('PEXPIRE', KEYS[lock], ARGV[2])
  ledger_note(KEYS[#KEYS - 1], KEYS[lock])
end
-- The count lives as long as the fences (see acquire.lua).
local fence_ttl = math.max(86400000, policy_max_ttl * 100)
for count = locks + 1, #KEYS - 2 do
  redis.call('PEXPIRE', KEYS[count], fence_ttl)
end
return {1}
