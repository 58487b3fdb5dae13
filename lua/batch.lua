-- Runs several lock calls in one script call: the group-commit path of a busy master (see
-- src/group/batch.rs). holder.lua, admission.lua and the bodies of acquire, release, extend
-- and permit are prepended by src/group/scripts.rs as the functions in CALLS, each taking
-- its own KEYS and ARGV.
-- A master declares every call's keys. A Cluster primary cannot: a script declares keys of
-- one slot only, and its batches mix slots. There the keys travel among the arguments, and
-- Redis lets a script without flags touch any key of a slot this node serves; a key of
-- another slot fails its own call only.
-- KEYS: every call's keys, in call order, when declared; else none
-- ARGV: number of calls, 'declared' or 'undeclared', then per call: script name, its key
--       count, its argument count, its keys when undeclared, its arguments
-- Returns one answer per call, as that script answers; a call that raised an error answers
-- the error's text (no script answers a bare string otherwise), and the others still run.
local declared = ARGV[2] == 'declared'
local answers = {}
local key_at, arg_at = 1, 3
for call = 1, tonumber(ARGV[1]) do
  local script = CALLS[ARGV[arg_at]]
  local key_count = tonumber(ARGV[arg_at + 1])
  local arg_count = tonumber(ARGV[arg_at + 2])
  arg_at = arg_at + 3
  local keys
  if declared then
    keys = {unpack(KEYS, key_at, key_at + key_count - 1)}
    key_at = key_at + key_count
  else
    keys = {unpack(ARGV, arg_at, arg_at + key_count - 1)}
    arg_at = arg_at + key_count
  end
  local args = {unpack(ARGV, arg_at, arg_at + arg_count - 1)}
  arg_at = arg_at + arg_count
  local ok, answer = pcall(script, keys, args)
  -- A call that raised between its unreplicated writes must not leave the next call's
  -- writes unreplicated.
  redis.set_repl(redis.REPL_ALL)
  if not ok then
    answer = type(answer) == 'table' and (answer.err or 'script error') or tostring(answer)
  end
  answers[call] = answer
end
return answers
