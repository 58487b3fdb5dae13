-- Delete the lock only when it still carries our token, and wake the waiters; the fence key
-- stays, it must only grow.
-- KEYS: lock, owner   ARGV: token, release channel
-- Returns 1 deleted | 0 not ours (expired, released, or another holder's)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  -- The token names this release, so a waiter hearing it from several groups counts it once.
  redis.call('PUBLISH', ARGV[2], ARGV[1])
  return 1
end
return 0
