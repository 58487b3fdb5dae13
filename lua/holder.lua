-- Prologue of the scripts that read a lock. A lock's value is "<token>\n<owner record>": one
-- key per grant, so a grant writes the lock and the fence and nothing else. Tokens never hold
-- a newline (the engine checks them), and a value planted by anything else reads as its own
-- token with an empty record.
local function holder_of(value)
  if not value then
    return nil, ''
  end
  local cut = string.find(value, '\n', 1, true)
  if not cut then
    return value, ''
  end
  return string.sub(value, 1, cut - 1), string.sub(value, cut + 1)
end
