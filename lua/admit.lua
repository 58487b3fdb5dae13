-- Admits this master to the vote after ARGV[3] ms (0: now), under a lock policy at least
-- {max_ttl_ms = ARGV[1], write_window_ms = ARGV[2]}. A policy only grows: a field already
-- larger stays. For bootstrapping a brand-new deployment (or a lab) whose masters have never
-- held a lock, and for raising the policy; never admit at once a master that may have missed
-- grants. The policy is replicated; the marker is not (see admission.lua).
-- The acknowledged mode is set, not raised: ARGV[5] is the number of replicas the master
-- has (0 turns the mode off), or empty to keep the mode as it is. Off, the record goes: a
-- record kept through votes that were not acknowledged would let a replica promoted later
-- take over an admission it cannot back (admission.lua).
-- KEYS: admission marker, policy   ARGV: max_ttl_ms, write_window_ms, delay_ms, forced (1/0),
--       acked_replicas (or '')
-- Returns {history, max_ttl_ms, write_window_ms, ms until it votes, acked_replicas}.
local current = redis.call('HMGET', KEYS[2], 'max_ttl_ms', 'write_window_ms', 'acked_replicas')
local had_policy = tonumber(current[1]) ~= nil
local max_ttl = math.max(tonumber(current[1]) or 0, tonumber(ARGV[1]))
local window = math.max(tonumber(current[2]) or 0, tonumber(ARGV[2]))
local acked = tonumber(ARGV[5] or '') or tonumber(current[3]) or 0
redis.call('HSET', KEYS[2], 'max_ttl_ms', max_ttl, 'write_window_ms', window, 'acked_replicas', acked)
if acked == 0 then
  redis.call('DEL', KEYS[2] .. ':acked')
end
local history = info_field(redis.call('INFO', 'replication'), 'master_replid')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- A quarantine in progress is never shortened: raising the policy on a promoted replica
-- must not let it vote before the leases it may have missed expired. It keeps its `since`,
-- so the raised policy lengthens it (admission.lua).
local vote_from = now + tonumber(ARGV[3])
local admitted = redis.call('HMGET', KEYS[1], 'history', 'vote_from', 'since')
local since = nil
if admitted[1] == history then
  vote_from = math.max(vote_from, tonumber(admitted[2]) or 0)
  since = tonumber(admitted[3])
elseif had_policy and ARGV[4] ~= '1' then
  -- A history no vote has met yet, on a master that already held the policy: a promoted
  -- replica or a master restarted with its data. It may have missed grants, so its
  -- quarantine starts now, as at its first vote, whatever the delay asked for.
  since = now
end
redis.set_repl(redis.REPL_NONE)
if admitted[1] ~= history then
  -- A ledger belongs to one history (admission.lua): a copy from a full resync would show
  -- this node's grants as lost.
  redis.call('DEL', KEYS[1])
end
if since then
  redis.call('HSET', KEYS[1], 'history', history, 'since', since, 'vote_from', vote_from)
else
  -- A master that held no policy is brand new, or an operator forced it: the operator's
  -- delay is its whole quarantine.
  redis.call('HDEL', KEYS[1], 'since')
  redis.call('HSET', KEYS[1], 'history', history, 'vote_from', vote_from)
end
redis.set_repl(redis.REPL_ALL)
-- The record of acknowledged mode (admission.lua), replicated. A master that held no policy
-- never voted: its record is its marker, so a replica promoted in its place votes when it
-- would. One that voted outside the mode until now gets a record from now: those votes
-- may be missing on its replicas. One already in the mode keeps its record.
local was_acked = (tonumber(current[3]) or 0) > 0
if acked > 0 and not (had_policy and was_acked) then
  local record = KEYS[2] .. ':acked'
  redis.call('DEL', record)
  if not had_policy and since then
    redis.call('HSET', record, 'history', history, 'since', since, 'vote_from', vote_from)
  elseif not had_policy then
    redis.call('HSET', record, 'history', history, 'vote_from', vote_from)
  else
    redis.call('HSET', record, 'history', history, 'since', now, 'vote_from', vote_from)
  end
end
if since then
  vote_from = math.max(vote_from, since + max_ttl + window)
end
return {history, max_ttl, window, math.max(vote_from - now, 0), acked}
