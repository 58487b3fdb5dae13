-- Runs a script about the whole group once for each hash slot a Cluster primary owns; the
-- script is defined above as RUN(KEYS, ARGV). Each run's keys are the script's keys moved
-- into its slot by the slot's tag. They are not declared, since a script declares keys of
-- one slot only; Redis lets a script without flags touch any key of a slot this node serves.
-- KEYS: none
-- ARGV: key count k, the k keys, argument count m, the m arguments, then each slot's tag
-- Returns one answer per slot, as RUN answers; a run that raised an error answers its text,
-- and the others still run.
local key_count = tonumber(ARGV[1])
local arg_count = tonumber(ARGV[key_count + 2])
local args = {}
for at = 1, arg_count do
  args[at] = ARGV[key_count + 2 + at]
end
local answers = {}
for at = key_count + arg_count + 3, #ARGV do
  local keys = {}
  for k = 1, key_count do
    keys[k] = '{' .. ARGV[at] .. '}' .. ARGV[1 + k]
  end
  local ok, answer = pcall(RUN, keys, args)
  -- A run may raise between turning replication off and on (admission markers are not
  -- replicated): the next slot's writes must replicate.
  redis.set_repl(redis.REPL_ALL)
  if not ok then
    answer = type(answer) == 'table' and (answer.err or 'script error') or tostring(answer)
  end
  answers[#answers + 1] = answer
end
return answers
