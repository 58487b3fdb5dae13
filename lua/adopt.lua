-- Gives a master that lost its data (no lock policy) the policy of a majority of groups,
-- and starts its quarantine: it sits out max_ttl_ms + write_window_ms from now. The engine
-- sends the largest policy that a majority of groups answered (policy.lua), which covers
-- every lease this master may have granted before it lost its data. A master that has a
-- policy again (replicated meanwhile, or adopted by another client) is left as it is.
-- KEYS: admission marker, policy   ARGV: max_ttl_ms, write_window_ms, acked_replicas
-- Returns {1, quarantine_ms} adopted | {0} it had a policy already
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0}
end
local quarantine = tonumber(ARGV[1]) + tonumber(ARGV[2])
redis.call('HSET', KEYS[2], 'max_ttl_ms', ARGV[1], 'write_window_ms', ARGV[2],
  'acked_replicas', tonumber(ARGV[3] or '') or 0)
local history = info_field(redis.call('INFO', 'replication'), 'master_replid')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.set_repl(redis.REPL_NONE)
redis.call('HSET', KEYS[1], 'history', history, 'since', now, 'vote_from', now + quarantine)
redis.set_repl(redis.REPL_ALL)
return {1, quarantine}
