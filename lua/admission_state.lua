-- Read-only view of this master's admission to the vote (see admission.lua).
-- KEYS: admission marker
-- Returns {admitted_history_matches (1/0), ms until it may vote (<= 0: voting)}
local history = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local admitted = redis.call('HMGET', KEYS[1], 'history', 'vote_from')
if admitted[1] ~= history then
  return {0, 0}
end
return {1, tonumber(admitted[2]) - now}
