-- Read-only view of this master's lock policy (see admission.lua).
-- KEYS: policy
-- Returns {max_ttl_ms, write_window_ms, acked_replicas}, or {} when the master has none.
local policy = redis.call('HMGET', KEYS[1], 'max_ttl_ms', 'write_window_ms', 'acked_replicas')
if not policy[1] then
  return {}
end
return {tonumber(policy[1]), tonumber(policy[2]) or 0, tonumber(policy[3]) or 0}
