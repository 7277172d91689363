#!/usr/bin/env bash
# The static release binaries (make release-static) run with no shared
# libraries: under qemu-user with no sysroot (-L), on board profiles, with a
# publish/subscribe round trip from the host's mosquitto clients over
# loopback and a clean stop on SIGTERM.
#
#   bash packaging/test-static.sh [<target dir>]   (default: target/static)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATIC_DIR=${1:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/static}
need file readelf qemu-arm qemu-aarch64 mosquitto_pub mosquitto_sub

use_scratch

# check_static <binary> <what file(1) names the machine>
check_static() {
  local bin=$1 machine=$2 described
  [ -x "$bin" ] || fail "$bin is missing; run make release-static"
  described=$(file -b "$bin")
  [[ $described == *"$machine"* ]] || fail "$bin: not a $machine binary: $described"
  [[ $described == *"statically linked"* ]] || fail "$bin: file(1) does not say statically linked: $described"
  ! readelf -l "$bin" | grep -q 'INTERP' || fail "$bin asks for a dynamic loader"
  ! readelf -d "$bin" 2>/dev/null | grep -q 'NEEDED' || fail "$bin needs shared libraries"
  pass "$bin: $machine, statically linked, no loader, no shared libraries"
}

# run_on_profile <qemu> <binary> <board profile>
run_on_profile() {
  local qemu=$1 bin=$2 board=$3 name
  name="$(basename "$(dirname "$(dirname "$bin")")")/$(basename "$board" .yaml)"
  local dir="$WORK/${name//\//-}"
  test_profile "$REPO_ROOT/boards/$board" "$dir.yaml" "$dir"
  "$qemu" "$bin" --check-config "$dir.yaml" >/dev/null || fail "$name: --check-config refused the profile"
  start_broker "$dir.log" "$qemu" "$bin" --config "$dir.yaml"
  round_trip "$BROKER_PORT" "$name"
  stop_broker
  pass "$name: started under $qemu without -L and stopped cleanly"
}

AARCH64=$STATIC_DIR/aarch64-unknown-linux-musl/release/saguin
ARMV7=$STATIC_DIR/armv7-unknown-linux-gnueabihf/release/saguin

check_static "$AARCH64" "ARM aarch64"
check_static "$ARMV7" "ARM, EABI5"

run_on_profile qemu-aarch64 "$AARCH64" raspberry-pi-4.yaml
run_on_profile qemu-aarch64 "$AARCH64" openwrt-128mb.yaml
run_on_profile qemu-arm "$ARMV7" industrial-arm-512mb.yaml
run_on_profile qemu-arm "$ARMV7" openwrt-128mb.yaml

passed_line "static binaries"
