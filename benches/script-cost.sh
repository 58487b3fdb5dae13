#!/usr/bin/env bash
# Where the acquire script's server time goes, measured in one run on one master: the
# master's own time per call (`INFO commandstats`, usec_per_call) for
#   1. SET NX PX, the bare lock a Redlock client takes;
#   2. an empty EVAL;
#   3. a script that only builds the INFO sections the admission check reads;
#   4. the acquire script as the engine runs it;
#   5. the acquire script with the INFO reply given as a constant (for measurement only:
#      it shows what building INFO costs inside the script);
#   6. the acquire script with no admission check at all: the lock and its fence alone (for
#      measurement only: it shows what the check costs beyond INFO);
#   7. the prologues the acquire script starts with, then `return 1`: what defining their
#      functions costs on every call.
# Each runs ROUNDS times in turn, and the medians are printed.
#
# The master must be admitted (a lab's are). Its keys under `ql:bench-cost:` are left to
# expire; fence keys stay for their day.
#
#   quorumlock --lab-dir /tmp/cost-lab lab up
#   benches/script-cost.sh 127.0.0.1:PORT      # PORT: a master's, from `quorumlock --lab-dir /tmp/cost-lab lab status`
#   quorumlock --lab-dir /tmp/cost-lab lab down
set -euo pipefail

address=${1:?usage: benches/script-cost.sh HOST:PORT [CALLS] [ROUNDS]}
calls=${2:-40000}
rounds=${3:-3}
host=${address%:*}
port=${address##*:}
root=$(cd "$(dirname "$0")/.." && pwd)
cli() { redis-cli -h "$host" -p "$port" "$@"; }

acquire_lua=$(cat "$root"/lua/{holder,info,policy_fields,admission,acquire}.lua)
info_call="redis.call('INFO', 'replication', 'memory', 'cluster')"
grep -qF "$info_call" <<<"$acquire_lua" || {
  echo "lua/admission.lua no longer reads INFO as this script expects: $info_call" >&2
  exit 1
}
# The INFO reply as a Lua string with its \r\n kept, for variant 5.
info_literal=$(cli INFO replication memory cluster | python3 -c 'import sys,json; print(json.dumps(sys.stdin.read()))')
without_info=${acquire_lua//"$info_call"/$info_literal}
vote_call="local refused = vote_refusal(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[2], ARGV[5])"
grep -qF "$vote_call" <<<"$acquire_lua" || {
  echo "lua/acquire.lua no longer asks for a vote as this script expects: $vote_call" >&2
  exit 1
}
no_admission=${acquire_lua//"$vote_call"/"local refused = nil; policy_max_ttl = 60000; ledger_on = false"}
only_info="return #$info_call"

sha_acquire=$(cli SCRIPT LOAD "$acquire_lua")
sha_without=$(cli SCRIPT LOAD "$without_info")
sha_info=$(cli SCRIPT LOAD "$only_info")
sha_bare=$(cli SCRIPT LOAD "$no_admission")
sha_prologue=$(cli SCRIPT LOAD "$(cat "$root"/lua/{holder,info,policy_fields,admission}.lua; echo 'return 1')")
owner='{"owner":"bench-cost"}'
proposal=9000000000000000

# usec_per_call of one command after a run of it; $1 is the commandstats name.
measure() {
  local stat=$1
  shift
  cli CONFIG RESETSTAT >/dev/null
  redis-benchmark -h "$host" -p "$port" -n "$calls" -c 4 -r 100000000 "$@" >/dev/null
  cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p"
}

# A grant answers {1}; anything else means the benchmark measured a refusal.
check=$(cli EVALSHA "$sha_acquire" 4 "ql:bench-cost:{check-$$-$RANDOM}:lock" "ql:bench-cost:{check-$$-$RANDOM}:fence" \
  ql:admission ql:policy check-token 10000 "$proposal" "$owner" 0)
if [ "$check" != 1 ]; then
  echo "the acquire script did not grant on $address (answer: $check); is the master admitted?" >&2
  exit 1
fi

declare -A results
names=("SET NX PX" "empty EVAL" "INFO only" "acquire script" "acquire, INFO given" "lock and fence alone" "prologues only")
for ((round = 1; round <= rounds; round++)); do
  results["SET NX PX"]+=" $(measure set SET ql:bench-cost:__rand_int__ x NX PX 10000)"
  results["empty EVAL"]+=" $(measure eval EVAL 'return 1' 0)"
  results["INFO only"]+=" $(measure evalsha EVALSHA "$sha_info" 0)"
  results["prologues only"]+=" $(measure evalsha EVALSHA "$sha_prologue" 0)"
  for variant in "acquire script:$sha_acquire" "acquire, INFO given:$sha_without" \
    "lock and fence alone:$sha_bare"; do
    name=${variant%:*}
    sha=${variant##*:}
    results[$name]+=" $(measure evalsha EVALSHA "$sha" 4 \
      "ql:bench-cost:{__rand_int__}:lock" "ql:bench-cost:{__rand_int__}:fence" \
      ql:admission ql:policy bench-token 10000 "$proposal" "$owner" 0)"
  done
done

echo "server µs per call on $address, median of $rounds runs of $calls calls (4 clients):"
for name in "${names[@]}"; do
  median=$(tr ' ' '\n' <<<"${results[$name]}" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '  %-22s %8s   (runs:%s)\n' "$name" "$median" "${results[$name]}"
done
