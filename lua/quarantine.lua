-- Puts this master (in a Cluster group: this slot) back in quarantine, as if its history
-- had just begun: it sits out max_ttl_ms + write_window_ms from now. For what the engine
-- cannot see, such as a slot closed back on its source after some of its keys left
-- (docs/operations.md). A quarantine in progress is never shortened. The marker starts over
-- without its ledger (admission.lua): every lease and fence guard it names ends within the
-- quarantine. Written without replication, like every write of the marker.
-- (info.lua is prepended.)
-- KEYS: admission marker, policy   ARGV: none
-- Returns {1, ms until it votes} | {0} no lock policy: the master does not vote anyway
local max_ttl, window = read_policy(KEYS[2])
if not max_ttl then
  return {0}
end
local quarantine = max_ttl + window
local history = info_field(redis.call('INFO', 'replication'), 'master_replid')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local vote_from = now + quarantine
local admitted = redis.call('HMGET', KEYS[1], 'history', 'vote_from', 'since')
if admitted[1] == history then
  vote_from = math.max(vote_from, tonumber(admitted[2]) or 0)
end
redis.set_repl(redis.REPL_NONE)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'history', history, 'since', now, 'vote_from', vote_from)
redis.set_repl(redis.REPL_ALL)
return {1, vote_from - now}
