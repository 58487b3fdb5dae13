-- Prologue of the scripts that read or write the lock policy (<prefix>:policy).
-- In acknowledged mode the longest TTL is kept as acked_max_ttl_ms, and max_ttl_ms is
-- removed. A client from before the mode reads max_ttl_ms only: it finds no policy and does
-- not vote, since it would count its grants without waiting for the replicas.
-- read_policy(key) answers max_ttl_ms (nil: no policy), write_window_ms, acked_replicas.
local function read_policy(key)
  local fields = redis.call('HMGET', key, 'max_ttl_ms', 'write_window_ms', 'acked_replicas',
    'acked_max_ttl_ms')
  local acked = tonumber(fields[3]) or 0
  local max_ttl = tonumber(fields[1])
  if acked > 0 then
    -- A policy written before the field moved keeps max_ttl_ms until admitted again.
    max_ttl = math.max(tonumber(fields[4]) or 0, max_ttl or 0)
    if max_ttl == 0 then
      max_ttl = nil
    end
  end
  return max_ttl, tonumber(fields[2]) or 0, acked
end
-- write_policy(key, max_ttl, window, acked) writes the policy, its TTL under the field the
-- mode reads. Replicated, like the whole policy.
local function write_policy(key, max_ttl, window, acked)
  if acked > 0 then
    redis.call('HSET', key, 'acked_max_ttl_ms', max_ttl, 'write_window_ms', window,
      'acked_replicas', acked)
    redis.call('HDEL', key, 'max_ttl_ms')
  else
    redis.call('HSET', key, 'max_ttl_ms', max_ttl, 'write_window_ms', window,
      'acked_replicas', 0)
    redis.call('HDEL', key, 'acked_max_ttl_ms')
  end
end
