-- Renew the lock's TTL only when it still carries our token.
-- KEYS: lock, owner   ARGV: token, ttl_ms
-- Returns 1 renewed | 0 not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
