-- Grant one permit of a counting semaphore: a free slot among its `permits` slots, each slot a
-- lock of its own with its own fence, so no slot ever has two holders and the semaphore never
-- more than `permits`. Slots are tried from the client's starting slot on, so that clients
-- spread over the free slots while every group tries them in the same order. (holder.lua and
-- admission.lua are prepended.)
-- KEYS: the semaphore's permit count, per slot its lock and fence, then the admission marker
--       and the policy
-- ARGV: token, ttl_ms, fence proposal, owner record (JSON), permits, first slot (from 0),
--       replicas the client waits for
-- Returns {1, slot} granted | {0, pttl_ms, owner record} every slot held (the soonest to
--       expire) | {2, stored_fence} | {3, quarantine_left_ms} | {4} unadmitted
--       | {5, max_ttl_ms} ttl above the policy | {6, maxmemory_policy}
--       | {7, permits} the semaphore has another permit count
--       | {9, replicas} | {10, online, replicas, connected} (acknowledged mode)
local refused = vote_refusal(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[2], ARGV[7])
if refused then
  return refused
end
local permits = tonumber(ARGV[5])
local known = redis.call('GET', KEYS[1])
if known and tonumber(known) ~= permits then
  return {7, tonumber(known)}
end
-- The count lives as long as the fences (see acquire.lua): a semaphore keeps its count while
-- it is in use, and a day after.
local fence_ttl = math.max(86400000, policy_max_ttl * 100)
local proposal = tonumber(ARGV[3])
local function grant(slot)
  local lock = 2 + 2 * slot
  redis.call('SET', KEYS[lock], ARGV[1] .. '\n' .. ARGV[4], 'PX', ARGV[2])
  redis.call('SET', KEYS[lock + 1], ARGV[3], 'PX', fence_ttl)
  redis.call('SET', KEYS[1], ARGV[5], 'PX', fence_ttl)
  ledger_note(KEYS[#KEYS - 1], KEYS[lock], KEYS[lock + 1], ARGV[3])
  return {1, slot}
end
local free, soonest, soonest_record, ahead, ahead_text, held
for step = 0, permits - 1 do
  local slot = (tonumber(ARGV[6]) + step) % permits
  local lock = 2 + 2 * slot
  local holder, record = holder_of(redis.call('GET', KEYS[lock]))
  local stored_text = redis.call('GET', KEYS[lock + 1])
  local stored = tonumber(stored_text or '0') or 0
  if ledger_lost(KEYS[#KEYS - 1], KEYS[lock], holder, KEYS[lock + 1], stored) then
    return slot_lost(KEYS[#KEYS - 1])
  end
  if holder == ARGV[1] then
    -- Ours from an earlier round of this attempt (under a lower fence), or a retried delivery
    -- of this very grant: the same slot again, never a second one.
    if stored <= proposal then
      return grant(slot)
    end
    return {2, stored_text}
  elseif holder then
    held = true
    local left = redis.call('PTTL', KEYS[lock])
    if not soonest or left < soonest then
      soonest, soonest_record = left, record
    end
  elseif stored < proposal then
    free = free or slot
  elseif not ahead or stored > ahead then
    ahead, ahead_text = stored, stored_text
  end
end
-- A held permit keeps the count alive (grants and renewals refresh it): a count missing
-- beside one left with a broken-off migration, and a caller giving a larger count could take
-- more permits than the semaphore has.
if held and not known and ledger_kept() then
  return slot_lost(KEYS[#KEYS - 1])
end
if free then
  return grant(free)
end
if ahead then
  return {2, ahead_text}
end
return {0, soonest, soonest_record}
