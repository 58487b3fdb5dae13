-- Admit this master's current replication history to the vote after ARGV[1] ms (0: now).
-- For bootstrapping a brand-new deployment (or a lab) whose masters have never held a lock;
-- never run it on a master that may have missed grants. Not replicated (see admission.lua).
-- KEYS: admission marker   ARGV: delay_ms
-- Returns the history admitted.
local history = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.set_repl(redis.REPL_NONE)
redis.call('HSET', KEYS[1], 'history', history, 'vote_from', now + tonumber(ARGV[1]))
redis.set_repl(redis.REPL_ALL)
return history
