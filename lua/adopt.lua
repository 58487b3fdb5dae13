-- Gives a master that lost its data (no lock policy) the policy of a majority of groups,
-- and starts its quarantine: it sits out max_ttl_ms + write_window_ms from now. The engine
-- sends the largest policy that a majority of groups answered (policy.lua), which covers
-- every lease this master may have granted before it lost its data. A master that has a
-- policy again (replicated meanwhile, or adopted by another client) is left as it is.
-- KEYS: admission marker, policy   ARGV: max_ttl_ms, write_window_ms, acked_replicas
-- (info.lua and policy_fields.lua are prepended.)
-- Returns {1, quarantine_ms} adopted | {0} it had a policy already
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0}
end
local quarantine = tonumber(ARGV[1]) + tonumber(ARGV[2])
local info = redis.call('INFO', 'replication', 'cluster')
-- Acknowledged mode is for Sentinel groups only (admit refuses it on a Cluster group): a
-- Cluster slot adopts the policy outside it.
local acked = tonumber(ARGV[3] or '') or 0
if info_field(info, 'cluster_enabled') == '1' then
  acked = 0
end
write_policy(KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), acked)
local history = info_field(info, 'master_replid')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.set_repl(redis.REPL_NONE)
redis.call('HSET', KEYS[1], 'history', history, 'since', now, 'vote_from', now + quarantine)
redis.set_repl(redis.REPL_ALL)
return {1, quarantine}
