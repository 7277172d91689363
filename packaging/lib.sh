# Shell helpers shared by the packaging tests (sourced, not run).
#
# Every wait here polls a condition with a deadline; none sleeps blindly.

PACKAGING_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$PACKAGING_DIR/.." && pwd)
WAIT_S=${WAIT_S:-60}   # generous: a broker under qemu on a busy 2-core machine starts slowly

PASSED=0
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; PASSED=$((PASSED + 1)); }
# The closing line: every check passed, since the first failure exits.
passed_line() { echo "$1: $PASSED passed, 0 failed"; }

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (bash .ci/run installs it)"
  done
}

# use_scratch: WORK, a temporary directory removed on exit, together with
# any broker a test left running.
use_scratch() {
  WORK=$(mktemp -d)
  BROKER_PID=
  trap 'kill_broker; rm -rf "$WORK"' EXIT
}
kill_broker() { [ -z "${BROKER_PID:-}" ] || kill -KILL "$BROKER_PID" 2>/dev/null || true; }

# poll <seconds> <command...>: run the command every 0.1 s until it succeeds;
# false if it never did within the time.
poll() {
  local deadline=$(($(date +%s) + $1)); shift
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# Cargo.toml's package version.
cargo_version() {
  sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -n1
}

# test_profile <source yaml> <dest yaml> <state dir>: a copy of a board
# profile a test can run: every listener on 127.0.0.1 port 0 (the broker logs
# the port it got), logs at info (the bound port is logged there), and every
# absolute path the profile names for data or a pid file moved under
# <state dir>, which is created (with any snapshot directory in it).
test_profile() {
  local src=$1 dst=$2 state=$3
  mkdir -p "$state"
  sed -E \
    -e 's#^([[:space:]]*-?[[:space:]]*address:[[:space:]]*).*#\1127.0.0.1:0#' \
    -e 's#^([[:space:]]*log_level:[[:space:]]*).*#\1info#' \
    -e "s#^([[:space:]]*(file_path|snapshot_dir|pid_file):[[:space:]]*)/.*/([^/]*)\$#\\1$state/\\3#" \
    "$src" >"$dst"
  # A snapshot directory must exist, as the init script or package makes it.
  sed -n 's#^[[:space:]]*snapshot_dir:[[:space:]]*\(/.*\)$#\1#p' "$dst" | while read -r dir; do mkdir -p "$dir"; done
}

# start_broker <log> <command...>: start a broker in the background; sets
# BROKER_PID, and BROKER_PORT once it logged its first listener's port.
start_broker() {
  local log=$1; shift
  : >"$log"
  "$@" >"$log" 2>&1 &
  BROKER_PID=$!
  if ! poll "$WAIT_S" broker_bound "$log"; then
    cat "$log" >&2
    fail "the broker ($*) did not bind a listener within ${WAIT_S}s"
  fi
  BROKER_PORT=$(sed -n 's/.*listener .* bound to 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$log" | head -n1)
}

broker_bound() {
  kill -0 "$BROKER_PID" 2>/dev/null || { cat "$1" >&2; fail "the broker exited before it listened"; }
  grep -q 'listener .* bound to 127\.0\.0\.1:[0-9]' "$1"
}

# stop_broker: SIGTERM, then wait for a clean exit (status 0).
stop_broker() {
  [ -n "${BROKER_PID:-}" ] || return 0
  kill -TERM "$BROKER_PID" 2>/dev/null || true
  poll "$WAIT_S" broker_gone || fail "the broker did not stop within ${WAIT_S}s of SIGTERM"
  local rc=0
  wait "$BROKER_PID" || rc=$?
  BROKER_PID=
  [ "$rc" -eq 0 ] || fail "the broker exited with status $rc after SIGTERM"
}

broker_gone() { ! kill -0 "$BROKER_PID" 2>/dev/null; }

# round_trip <port> <label>: a live QoS 1 publish from mosquitto_pub reaches
# a mosquitto_sub subscribed on the same broker. The publisher repeats until
# the subscriber has its message, since the subscription may not be in place
# when the first one goes out.
round_trip() {
  local port=$1 label=$2 topic="saguin-test/$2/$$" out
  out=$(mktemp)
  mosquitto_sub -h 127.0.0.1 -p "$port" -q 1 -t "$topic" -C 1 -W "$WAIT_S" >"$out" 2>&1 &
  local sub=$!
  poll "$WAIT_S" publish_until_received "$port" "$topic" "$label" "$sub" \
    || { cat "$out" >&2; fail "$label: no message came back through port $port"; }
  wait "$sub" || true
  grep -qx "hello from $label" "$out" || { cat "$out" >&2; fail "$label: the subscriber got something else"; }
  rm -f "$out"
  pass "$label: publish/subscribe round trip on port $port"
}

publish_until_received() {
  local port=$1 topic=$2 label=$3 sub=$4
  kill -0 "$sub" 2>/dev/null || return 0
  mosquitto_pub -h 127.0.0.1 -p "$port" -q 1 -t "$topic" -m "hello from $label" >/dev/null 2>&1 || true
  ! kill -0 "$sub" 2>/dev/null
}

# retain <port> <topic> <message>: publish a retained QoS 1 message.
retain() {
  mosquitto_pub -h 127.0.0.1 -p "$1" -q 1 -r -t "$2" -m "$3" || fail "cannot publish a retained message to port $1"
}

# expect_retained <port> <topic> <message>: a new subscriber gets it.
expect_retained() {
  local got
  got=$(mosquitto_sub -h 127.0.0.1 -p "$1" -q 1 -t "$2" -C 1 -W "$WAIT_S" 2>&1) || true
  [ "$got" = "$3" ] || fail "retained $2 on port $1: wanted '$3', got '$got'"
}
