-- Read one group's view of a lock without changing it. (holder.lua is prepended.)
-- KEYS: lock, fence
-- Returns {token or '', pttl_ms, stored fence or '0', owner record or ''}
local holder, record = holder_of(redis.call('GET', KEYS[1]))
return {
  holder or '',
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]) or '0',
  record,
}
