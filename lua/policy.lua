-- Read-only view of this master's lock policy (see admission.lua).
-- KEYS: policy
-- Returns {max_ttl_ms, write_window_ms, acked_replicas}, or {} when the master has none.
local max_ttl, window, acked = read_policy(KEYS[1])
if not max_ttl then
  return {}
end
return {max_ttl, window, acked}
