-- Delete the lock only when it still carries our token, and wake the waiters; the fence key
-- stays, it must only grow. (holder.lua is prepended.)
-- KEYS: lock   ARGV: token, release channel, announcement ('' announces nothing)
-- Returns 1 deleted | 0 not ours (expired, released, or another holder's)
if holder_of(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- Only when someone listens: a PUBLISH is replicated like a write. A waiter subscribes
  -- before its next try, so a release it could miss here shows to that try as a free lock.
  -- The announcement names this release (the token, or the token marked as a rollback), so a
  -- waiter hearing it from several groups counts it once.
  if ARGV[3] ~= '' and redis.call('PUBSUB', 'NUMSUB', ARGV[2])[2] > 0 then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  return 1
end
return 0
