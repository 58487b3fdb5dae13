-- Read one group's view of locks without changing them: one lock, or many at once for a
-- listing. (holder.lua is prepended.)
-- KEYS: per lock its lock and fence (lock_1, fence_1, ..., lock_k, fence_k)
-- Returns per lock {token or '', pttl_ms, stored fence or '0', owner record or ''}, one after
-- the other in one flat list
local views = {}
for lock = 1, #KEYS, 2 do
  local holder, record = holder_of(redis.call('GET', KEYS[lock]))
  views[#views + 1] = holder or ''
  views[#views + 1] = redis.call('PTTL', KEYS[lock])
  views[#views + 1] = redis.call('GET', KEYS[lock + 1]) or '0'
  views[#views + 1] = record
end
return views
