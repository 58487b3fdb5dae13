-- Delete each lock that still carries our token, and wake the waiters of each resource
-- deleted; the fence keys stay, they must only grow. One resource is a set of one.
-- (holder.lua is prepended.)
-- In a Cluster group the slot's admission marker comes last: a lock deleted here leaves the
-- slot's ledger (admission.lua), read before the delete, since a script writes only keys it
-- read earlier in the call (docs/design.md, "Cluster groups"). A lock not deleted here keeps
-- its entry, so a grant that finds it missing before its expiry knows the slot lost it.
-- KEYS: the locks, then the admission marker in a Cluster group
-- ARGV: token, announcement ('' announces nothing), then per lock its release channel, then
--       'sharded' in a Cluster group
-- Returns 1 deleted at least one | 0 none was ours, another token holds one
--       | 8 none was ours, none exists (expired, released, or never granted here)
local deleted = 0
local held = false
-- A Cluster group announces with sharded pub/sub, on a channel in the resource's slot: its
-- waiters subscribe on that slot's primary, and no other node hears it. Redis before 7.0 has
-- no sharded pub/sub: there the count fails and nothing is announced (waiters poll).
-- No channel is named 'sharded': each ends in ':released'.
local sharded = ARGV[#ARGV] == 'sharded'
local locks = #KEYS
local marker
if sharded then
  locks = #KEYS - 1
  marker = KEYS[#KEYS]
end
local function listeners(channel)
  if not sharded then
    return redis.call('PUBSUB', 'NUMSUB', channel)[2]
  end
  local counted = redis.pcall('PUBSUB', 'SHARDNUMSUB', channel)
  if type(counted) == 'table' and counted.err == nil then
    return counted[2]
  end
  return 0
end
for lock = 1, locks do
  local holder = holder_of(redis.call('GET', KEYS[lock]))
  held = held or holder ~= nil
  if holder == ARGV[1] then
    local entry = marker and redis.call('HEXISTS', marker, 'l:' .. KEYS[lock]) == 1
    redis.call('DEL', KEYS[lock])
    if entry then
      redis.set_repl(redis.REPL_NONE)
      redis.pcall('HDEL', marker, 'l:' .. KEYS[lock])
      redis.set_repl(redis.REPL_ALL)
    end
    deleted = 1
    -- Only when someone listens: a PUBLISH is replicated like a write. A waiter subscribes
    -- before its next try, so a release it could miss here shows to that try as a free
    -- lock. The announcement names this release (the token, or the token marked as a
    -- rollback), so a waiter hearing it from several groups counts it once.
    local channel = ARGV[2 + lock]
    if ARGV[2] ~= '' and listeners(channel) > 0 then
      if sharded then
        -- An announcement never fails the release that made it.
        redis.pcall('SPUBLISH', channel, ARGV[2])
      else
        redis.call('PUBLISH', channel, ARGV[2])
      end
    end
  end
end
if deleted == 0 and not held then
  return 8
end
return deleted
