-- Admits this master to the vote after ARGV[3] ms (0: now), under a lock policy at least
-- {max_ttl_ms = ARGV[1], write_window_ms = ARGV[2]}. A policy only grows: a field already
-- larger stays. For bootstrapping a brand-new deployment (or a lab) whose masters have never
-- held a lock, and for raising the policy; never admit at once a master that may have missed
-- grants. The policy is replicated; the marker is not (see admission.lua).
-- KEYS: admission marker, policy   ARGV: max_ttl_ms, write_window_ms, delay_ms
-- Returns {history, max_ttl_ms, write_window_ms} as now in force.
local current = redis.call('HMGET', KEYS[2], 'max_ttl_ms', 'write_window_ms')
local max_ttl = math.max(tonumber(current[1]) or 0, tonumber(ARGV[1]))
local window = math.max(tonumber(current[2]) or 0, tonumber(ARGV[2]))
redis.call('HSET', KEYS[2], 'max_ttl_ms', max_ttl, 'write_window_ms', window)
local history = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- A quarantine in progress is never shortened: raising the policy on a promoted replica
-- must not let it vote before the leases it may have missed expired. It keeps its `since`,
-- so the raised policy lengthens it (admission.lua). An operator's admission of a new
-- history has no `since`: the operator's delay is its whole quarantine.
local vote_from = now + tonumber(ARGV[3])
local admitted = redis.call('HMGET', KEYS[1], 'history', 'vote_from')
redis.set_repl(redis.REPL_NONE)
if admitted[1] == history then
  vote_from = math.max(vote_from, tonumber(admitted[2]) or 0)
else
  redis.call('HDEL', KEYS[1], 'since')
end
redis.call('HSET', KEYS[1], 'history', history, 'vote_from', vote_from)
redis.set_repl(redis.REPL_ALL)
return {history, max_ttl, window}
