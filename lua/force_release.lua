-- Delete the lock whoever holds it (an operator's last resort for a stuck lock), and wake the
-- waiters. The fence stays: the next holder must still get a larger fencing token than the
-- evicted one.
-- In a Cluster group the lock's entry leaves the slot's ledger too (see release.lua).
-- KEYS: lock, then the admission marker in a Cluster group
-- ARGV: release channel, announcement (unique to this force release), then 'sharded' in a
--       Cluster group (see release.lua)
-- Returns 1 when a lock was there | 0
local entry = KEYS[2] and redis.call('HEXISTS', KEYS[2], 'l:' .. KEYS[1]) == 1
if redis.call('DEL', KEYS[1]) == 1 then
  if entry then
    redis.set_repl(redis.REPL_NONE)
    redis.pcall('HDEL', KEYS[2], 'l:' .. KEYS[1])
    redis.set_repl(redis.REPL_ALL)
  end
  if ARGV[3] == 'sharded' then
    redis.pcall('SPUBLISH', ARGV[1], ARGV[2])
  else
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
  return 1
end
return 0
