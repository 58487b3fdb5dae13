-- Admits this master to the vote after ARGV[3] ms (0: now), under a lock policy at least
-- {max_ttl_ms = ARGV[1], write_window_ms = ARGV[2]}. A policy only grows: a field already
-- larger stays. For bootstrapping a brand-new deployment (or a lab) whose masters have never
-- held a lock, and for raising the policy; never admit at once a master that may have missed
-- grants. The policy is replicated; the marker is not (see admission.lua).
-- The acknowledged mode is set, not raised: ARGV[5] is the number of replicas the master
-- has (0 turns the mode off), or empty to keep the mode as it is.
-- Leaving the mode takes two calls. Until every replica holds the record marked revoked, a
-- replica promoted after votes that were not acknowledged could take the record over and
-- vote without them (admission.lua). So the first call marks the record revoked and keeps
-- the mode on; the engine waits for every replica (WAIT) and then calls again with
-- ARGV[6] = 'revoked', which turns the mode off and deletes the record.
-- KEYS: admission marker, policy   ARGV: max_ttl_ms, write_window_ms, delay_ms, forced (1/0),
--       acked_replicas (or ''), 'revoked' once the replicas hold the revocation (or '')
-- (info.lua and policy_fields.lua are prepended.)
-- Returns {history, max_ttl_ms, write_window_ms, ms until it votes, acked_replicas,
--          1 when the mode waits for its replicas to hold the revocation, else 0}.
local current_ttl, current_window, current_acked = read_policy(KEYS[2])
local had_policy = current_ttl ~= nil
local max_ttl = math.max(current_ttl or 0, tonumber(ARGV[1]))
local window = math.max(current_window, tonumber(ARGV[2]))
local acked = tonumber(ARGV[5] or '') or current_acked
local record = KEYS[2] .. ':acked'
local kept_record = redis.call('HMGET', record, 'history', 'revoked')
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
local leaving = 0
if acked == 0 and current_acked == 0 then
  redis.call('DEL', record)
elseif acked == 0 then
  if ARGV[6] == 'revoked' and kept_record[2] == '1' then
    redis.call('DEL', record)
  else
    -- The record keeps this history, so a vote in the meantime does not write it anew.
    redis.call('HSET', record, 'history', history, 'revoked', 1)
    acked = current_acked
    leaving = 1
  end
end
write_policy(KEYS[2], max_ttl, window, acked)
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
-- A record revoked on the way out of the mode is written anew from now.
local record_kept = had_policy and current_acked > 0 and kept_record[2] ~= '1'
if acked > 0 and leaving == 0 and not record_kept then
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
return {history, max_ttl, window, math.max(vote_from - now, 0), acked, leaving}
