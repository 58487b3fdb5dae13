-- Read-only view of this master's admission to the vote (see admission.lua). (info.lua is
-- prepended.)
-- KEYS: admission marker, policy
-- Returns {admitted_history_matches (1/0), ms until it may vote (<= 0: voting),
--          max_ttl_ms (-1: no policy), write_window_ms, maxmemory_policy when the master
--          may evict keys (else ''), acked_replicas}
local info = redis.call('INFO', 'replication', 'memory')
local history = info_field(info, 'master_replid')
local eviction = eviction_policy(info) or ''
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local admitted = redis.call('HMGET', KEYS[1], 'history', 'vote_from', 'since')
local max_ttl, window, acked = read_policy(KEYS[2])
max_ttl = max_ttl or -1
if admitted[1] ~= history then
  return {0, 0, max_ttl, window, eviction, acked}
end
-- A quarantine runs from `since` under the policy in force now (admission.lua).
local vote_from = tonumber(admitted[2])
if admitted[3] and max_ttl >= 0 then
  vote_from = math.max(vote_from, tonumber(admitted[3]) + max_ttl + window)
end
return {1, vote_from - now, max_ttl, window, eviction, acked}
