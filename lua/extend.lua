-- Renew the lock's TTL only when it still carries our token. (holder.lua and admission.lua
-- are prepended.)
-- KEYS: lock, admission marker, policy   ARGV: token, ttl_ms
-- Returns {1} renewed | {0} not ours | {3, quarantine_left_ms} | {4} unadmitted
--       | {5, max_ttl_ms} ttl above the policy
local refused = admission(KEYS[2], KEYS[3])
if refused then
  return refused
end
if tonumber(ARGV[2]) > policy_max_ttl then
  return {5, policy_max_ttl}
end
if holder_of(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0}
