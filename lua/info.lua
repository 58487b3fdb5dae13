-- Prologue of the scripts that read INFO (admission and its views, admit, adopt).
-- info_field(info, name) is the value of one `name:value` line of an INFO reply, or nil.
-- It finds the line by plain search: a Lua pattern is tried at every byte of the reply, and
-- on an idle master that cost more than building the reply.
local function info_field(info, name)
  local at = string.find(info, '\n' .. name .. ':', 1, true)
  if not at then
    return nil
  end
  local from = at + #name + 2
  local line_end = string.find(info, '\r', from, true) or #info + 1
  return string.sub(info, from, line_end - 1)
end
-- The eviction policy of a master that may evict keys (maxmemory set, a policy other than
-- noeviction), or nil. Reads the memory section of an INFO reply.
local function eviction_policy(info)
  if (tonumber(info_field(info, 'maxmemory')) or 0) == 0 then
    return nil
  end
  local policy = info_field(info, 'maxmemory_policy')
  if policy == 'noeviction' then
    return nil
  end
  return policy or 'unknown'
end
