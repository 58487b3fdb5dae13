-- Prologue of the scripts that vote (acquire, extend). A master may vote only once its current
-- replication history has been known for one maximum TTL. A promoted replica, or a master
-- restarted without its data, starts a new history (a new master_replid), so it sits out until
-- every lease it may have missed has expired: the "delayed restart" rule, read from the server
-- itself, so it holds for clients that start after the failover too. The marker is written
-- without replication, so a replica never inherits its master's admission.
-- Takes the marker key and the quarantine in ms. The answer is kept for the rest of the script
-- run, so a batch of lock calls (batch.lua) reads the replication history once.
local admission_left
local function quarantine_left(marker, quarantine)
  if admission_left then
    return admission_left
  end
  local history = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local admitted = redis.call('HMGET', marker, 'history', 'vote_from')
  if admitted[1] ~= history then
    quarantine = tonumber(quarantine)
    redis.set_repl(redis.REPL_NONE)
    local written = redis.pcall('HSET', marker, 'history', history, 'vote_from', now + quarantine)
    -- Replication back on before any error goes up: the calls batched after this one
    -- must replicate their writes.
    redis.set_repl(redis.REPL_ALL)
    if type(written) == 'table' and written.err then
      error(written)
    end
    admission_left = quarantine
  else
    admission_left = tonumber(admitted[2]) - now
  end
  return admission_left
end
