-- Reads a listing's keys in some hash slots of a Cluster primary. Each slot is read only
-- while this node serves it and is not moving it, so a slot that moved is read again, whole,
-- from the primary that serves it now.
-- KEYS: none (a script declares keys of one slot only)
-- ARGV: what every wanted key starts with once its slot tag is off, then per slot its number
-- and its tag
-- Returns per slot the wanted keys (slot tag included), or the error that says this node
-- does not serve the slot now.
local start = ARGV[1]
local ALL = 2147483647
local answers = {}
for at = 2, #ARGV, 2 do
  local slot, tag = ARGV[at], ARGV[at + 1]
  -- A key of the slot that is never written: Redis lets a script read it only where the slot
  -- is served and not migrating (else MOVED, ASK or CLUSTERDOWN, raised as an error).
  local probe = redis.pcall('EXISTS', '{' .. tag .. '}')
  if type(probe) == 'table' and probe.err then
    answers[#answers + 1] = probe.err
  else
    local head = '{' .. tag .. '}' .. start
    local keys = {}
    -- Redis answers at most the keys the slot holds, however many are asked for.
    for _, key in ipairs(redis.call('CLUSTER', 'GETKEYSINSLOT', slot, ALL)) do
      if string.sub(key, 1, #head) == head then
        keys[#keys + 1] = key
      end
    end
    answers[#answers + 1] = keys
  end
end
return answers
