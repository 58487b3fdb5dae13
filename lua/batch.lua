-- Runs several lock calls in one script call: the group-commit path of a busy master (see
-- src/batch.rs). holder.lua, admission.lua and the bodies of acquire, release and extend are
-- prepended by src/scripts.rs as the functions in CALLS, each taking its own KEYS and ARGV.
-- KEYS: every call's keys, in call order
-- ARGV: number of calls, then per call: script name, its key count, its argument count, its
--       arguments
-- Returns one answer per call, as that script answers; a call that raised an error answers
-- the error's text (no script answers a bare string otherwise), and the others still run.
local answers = {}
local key_at, arg_at = 1, 2
for call = 1, tonumber(ARGV[1]) do
  local script = CALLS[ARGV[arg_at]]
  local key_count = tonumber(ARGV[arg_at + 1])
  local arg_count = tonumber(ARGV[arg_at + 2])
  local keys = {unpack(KEYS, key_at, key_at + key_count - 1)}
  local args = {unpack(ARGV, arg_at + 3, arg_at + 2 + arg_count)}
  key_at = key_at + key_count
  arg_at = arg_at + 3 + arg_count
  local ok, answer = pcall(script, keys, args)
  if not ok then
    answer = type(answer) == 'table' and (answer.err or 'script error') or tostring(answer)
  end
  answers[call] = answer
end
return answers
