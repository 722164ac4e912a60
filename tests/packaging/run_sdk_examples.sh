#!/usr/bin/env bash
# Runs each class of the SDK guide's examples (sdk_examples/*.cpp, built into one plugin)
# on a small input and checks what it prints, so the guide's code is not only compiled
# but does what the guide says.
#
# usage: run_sdk_examples.sh JOBHOST PLUGIN WORK_DIR
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $# -eq 3 ]] || fail "usage: run_sdk_examples.sh JOBHOST PLUGIN WORK_DIR"
jobhost=$1 plugin=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
export JOBHOST_HOME=$work/home
unset JOBHOST_CONF_DIR

# run CLASS ARGS...: runs the class, its stdout in $work/CLASS.out.
run() {
  local cls=$1
  shift
  if ! "$jobhost" run -c "$cls" "$plugin" "$@" >"$work/$cls.out" 2>"$work/$cls.log"; then
    cat "$work/$cls.log" >&2
    fail "jobhost run -c $cls failed"
  fi
}
# expect CLASS LINE...: each line appears in CLASS's output.
expect() {
  local cls=$1
  shift
  for line in "$@"; do
    grep -qxF -- "$line" "$work/$cls.out" || {
      cat "$work/$cls.out" >&2
      fail "$cls did not print '$line' (output above)"
    }
  done
}

printf 'to be or not to be\n' >"$work/words.txt"
run WordCounter --input "$work/words.txt"
expect WordCounter "(to,2)" "(be,2)" "(or,1)" "(not,1)"

printf 'alice /home\nbob /cart\nalice /cart\nalice /home\nalice /pay\n' >"$work/visits.txt"
run PageVisits --input "$work/visits.txt"
expect PageVisits \
  "bob visits=1 /cart=1 recent=/cart;" \
  "alice visits=3 /home=2 recent=/home;/cart;/home;" \
  "alice visits=4 /pay=1 recent=/cart;/home;/pay;"

printf 's1 20.5 1\ns1 19 2\ns1 22.25 3\ns2 5 4\n' >"$work/readings.txt"
run HottestReading --input "$work/readings.txt"
expect HottestReading "s1 hottest 20.500000 at 1" "s1 hottest 22.250000 at 3" "s2 hottest 5.000000 at 4"
[[ $(wc -l <"$work/HottestReading.out") -eq 3 ]] || fail "HottestReading printed a reading that is not the hottest"

printf 's1 20\ns2 5\ns1 31\ns3 7\ns2 9.5\n' >"$work/readings.txt"
printf 's1 30\ns2 10\ns3 5\n' >"$work/limits.txt"
run SensorLimits --input "$work/readings.txt" --limits "$work/limits.txt"
expect SensorLimits "s1 over its limit: 31.000000" "s3 over its limit: 7.000000"
[[ $(wc -l <"$work/SensorLimits.out") -eq 2 ]] || fail "SensorLimits reported a sensor within its limit"

run EventsPerAccount --events 50 --accounts 5
expect EventsPerAccount "(0,10)" "(1,10)" "(2,10)" "(3,10)" "(4,10)"

printf 'alice 1000\nbob 2000\nalice 20000\nbob 40000\nalice 100000\n' >"$work/clicks.txt"
run Sessions --input "$work/clicks.txt"
expect Sessions "alice session 1000..50000: 2 clicks" "bob session 2000..32000: 1 clicks" \
  "bob session 40000..70000: 1 clicks" "alice session 100000..130000: 1 clicks"
[[ $(wc -l <"$work/Sessions.out") -eq 4 ]] || fail "Sessions printed more than the four sessions"
# A timestamp that is not all digits fails the job naming the line (not read as 1 ms).
printf 'alice 1000\nbob 1.7e+12\n' >"$work/bad-clicks.txt"
if "$jobhost" run -c Sessions -D restart-strategy.type=none "$plugin" --input "$work/bad-clicks.txt" \
    >"$work/bad.out" 2>"$work/bad.log"; then
  fail "Sessions accepted the timestamp 1.7e+12"
fi
grep -qF "input line 'bob 1.7e+12' is not '<user> <epoch millis, digits only>'" "$work/bad.log" ||
  { cat "$work/bad.log" >&2; fail "Sessions did not name the refused line"; }
run InactiveUsers --input "$work/clicks.txt"
expect InactiveUsers "bob inactive since 40000" "alice inactive since 100000"
[[ $(wc -l <"$work/InactiveUsers.out") -eq 2 ]] || fail "InactiveUsers reported a user whose timer was deleted"

printf 'to\nbe\nor\nnot\nto\nbe\n' >"$work/one-per-line.txt"
run CountsToFiles --input "$work/one-per-line.txt" --output "$work/files"
sort "$work"/files/part-* | tr '\n' ' ' | grep -qxF "(be,1) (be,2) (not,1) (or,1) (to,1) (to,2) " ||
  fail "CountsToFiles did not commit each count once: $(cat "$work"/files/part-* | tr '\n' ' ')"
ls -a "$work/files" | grep -q '^\.part-' && fail "CountsToFiles left a hidden part file"
run CountsToBatches --input "$work/one-per-line.txt" --output "$work/batches"
sort "$work"/batches/batch-* | tr '\n' ' ' | grep -qxF "be 1 be 2 not 1 or 1 to 1 to 2 " ||
  fail "CountsToBatches did not commit each count once: $(cat "$work"/batches/batch-* | tr '\n' ' ')"
ls -a "$work/batches" | grep -q '^\.batch-' && fail "CountsToBatches left a hidden batch"

printf 'to be or not\nthree trees\n' >"$work/fan.txt"
run WordsThreeWays --input "$work/fan.txt"
expect WordsThreeWays "(to,1)" "(be,1)" "(three,1)" "(t*,1)" "(t*,2)" "(t*,3)" "(b*,1)" "long: three" "long: trees"
[[ $(wc -l <"$work/WordsThreeWays.out") -eq 14 ]] || fail "WordsThreeWays printed $(wc -l <"$work/WordsThreeWays.out") lines, not 6 + 6 + 2"

echo "PASS: the SDK guide's example classes run"
