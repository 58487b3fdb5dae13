-- Read one group's view of a lock without changing it.
-- KEYS: lock, fence, owner
-- Returns {token or '', pttl_ms, stored fence or '0', metadata or ''}
return {
  redis.call('GET', KEYS[1]) or '',
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]) or '0',
  redis.call('GET', KEYS[3]) or '',
}
