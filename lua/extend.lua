-- Renew the TTL of every lock of the lease, only when each still carries our token: a group
-- that lost one of them renews none. (holder.lua and admission.lua are prepended.)
-- KEYS: the locks, then the admission marker and the policy   ARGV: token, ttl_ms
-- Returns {1} renewed | {0} not ours | {3, quarantine_left_ms} | {4} unadmitted
--       | {5, max_ttl_ms} ttl above the policy | {6, maxmemory_policy}
local refused = vote_refusal(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[2])
if refused then
  return refused
end
for lock = 1, #KEYS - 2 do
  if holder_of(redis.call('GET', KEYS[lock])) ~= ARGV[1] then
    return {0}
  end
end
for lock = 1, #KEYS - 2 do
  redis.call('PEXPIRE', KEYS[lock], ARGV[2])
end
return {1}
