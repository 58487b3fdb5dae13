-- Renew the lock's TTL only when it still carries our token. (holder.lua and admission.lua
-- are prepended.)
-- KEYS: lock, admission marker   ARGV: token, ttl_ms, quarantine_ms
-- Returns {1} renewed | {0} not ours | {3, quarantine_left_ms}
local left = quarantine_left(KEYS[#KEYS], ARGV[#ARGV])
if left > 0 then
  return {3, left}
end
if holder_of(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0}
