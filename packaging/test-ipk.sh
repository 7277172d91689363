#!/usr/bin/env bash
# The OpenWrt packages (make openwrt-ipk): the archive layout opkg reads, the
# control fields, conffiles, modes and owners, the maintainer and init
# scripts' syntax, and the procd init script run against the packaged
# binary: the command line start_service gives procd starts the broker on
# the packaged configuration, the directory it prepares is the one the
# configuration keeps its data in, and reload sends SIGUSR1.
#
#   bash packaging/test-ipk.sh <directory holding the .ipk files>
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IPK_DIR=${1:?usage: test-ipk.sh <directory holding the .ipk files>}
need tar gzip file readelf qemu-arm qemu-aarch64 mosquitto_pub mosquitto_sub
FEED_MK=$PACKAGING_DIR/openwrt/saguin/Makefile
PROFILE=$REPO_ROOT/boards/openwrt-128mb.yaml

use_scratch

feed_version=$(sed -n 's/^PKG_VERSION:=//p' "$FEED_MK")
feed_release=$(sed -n 's/^PKG_RELEASE:=//p' "$FEED_MK")
[ "$feed_version" = "$(cargo_version)" ] || fail "$FEED_MK has PKG_VERSION $feed_version, Cargo.toml $(cargo_version)"
pass "the feed package's version is Cargo.toml's ($feed_version)"

# control_field <control file> <field>
control_field() { sed -n "s/^$2: //p" "$1"; }

# mode_of <tar listing> <path>: "-rwxr-xr-x 0/0" for ./path
mode_of() { awk -v p="$2" '$6 == p {print $1, $2}' "$1"; }

check_ipk() {
  local arch=$1 machine=$2 qemu=$3
  local ipk="$IPK_DIR/saguin_${feed_version}-${feed_release}_${arch}.ipk"
  local dir="$WORK/$arch"
  [ -f "$ipk" ] || fail "$ipk is missing; run make openwrt-ipk"
  mkdir -p "$dir/outer" "$dir/control" "$dir/data"

  # The outer archive: a gzipped tar of three members, as ipkg-build writes it.
  [ "$(tar -tzf "$ipk" | tr '\n' ' ')" = "./debian-binary ./data.tar.gz ./control.tar.gz " ] \
    || fail "$ipk: members are $(tar -tzf "$ipk" | tr '\n' ' ')"
  tar -C "$dir/outer" -xzf "$ipk"
  [ "$(cat "$dir/outer/debian-binary")" = 2.0 ] || fail "$ipk: debian-binary is not 2.0"
  local data_list="$dir/data.list" control_list="$dir/control.list"
  tar -tvzf "$dir/outer/data.tar.gz" >"$data_list"
  tar -tvzf "$dir/outer/control.tar.gz" >"$control_list"
  tar -C "$dir/data" -xzf "$dir/outer/data.tar.gz"
  tar -C "$dir/control" -xzf "$dir/outer/control.tar.gz"
  ! awk '{print $6}' "$data_list" "$control_list" | grep -v '^\./' \
    || fail "$ipk: paths not relative to ./"
  ! awk '$2 != "0/0"' "$data_list" "$control_list" | grep . || fail "$ipk: files not owned by root"
  pass "$arch: ipk layout (debian-binary 2.0, data and control tars, ./ paths, root-owned)"

  local control="$dir/control/control"
  [ "$(control_field "$control" Package)" = saguin ] || fail "$arch: Package is not saguin"
  [ "$(control_field "$control" Version)" = "$feed_version-$feed_release" ] || fail "$arch: wrong Version"
  [ "$(control_field "$control" Architecture)" = "$arch" ] || fail "$arch: Architecture is $(control_field "$control" Architecture)"
  [ "$(control_field "$control" Require-User)" = saguin:saguin ] || fail "$arch: no Require-User saguin:saguin"
  [[ "$(control_field "$control" Installed-Size)" =~ ^[1-9][0-9]*$ ]] || fail "$arch: no Installed-Size"
  [ -n "$(control_field "$control" Description)" ] || fail "$arch: no Description"
  [ -z "$(control_field "$control" Depends)" ] || fail "$arch: a static binary depends on nothing"
  [ "$(cat "$dir/control/conffiles")" = /etc/saguin/saguin.yaml ] || fail "$arch: conffiles is $(cat "$dir/control/conffiles")"
  cmp -s "$dir/data/etc/saguin/saguin.yaml" "$PROFILE" || fail "$arch: the conffile is not boards/openwrt-128mb.yaml"
  pass "$arch: control fields, conffiles and the OpenWrt profile"

  local path want
  for want in "./usr/bin/saguin -rwxr-xr-x" "./etc/init.d/saguin -rwxr-xr-x" \
    "./etc/saguin/saguin.yaml -rw-r--r--" "./lib/upgrade/keep.d/saguin -rw-r--r--"; do
    path=${want% *}
    [ "$(mode_of "$data_list" "$path")" = "${want#* } 0/0" ] || fail "$arch: $path is $(mode_of "$data_list" "$path")"
  done
  for path in ./postinst ./prerm; do
    [ "$(mode_of "$control_list" "$path")" = "-rwxr-xr-x 0/0" ] || fail "$arch: control $path is $(mode_of "$control_list" "$path")"
  done
  local script
  for script in "$dir/data/etc/init.d/saguin" "$dir/control/postinst" "$dir/control/prerm"; do
    sh -n "$script" || fail "$arch: $script does not parse"
  done
  [ "$(head -n1 "$dir/data/etc/init.d/saguin")" = '#!/bin/sh /etc/rc.common' ] || fail "$arch: the init script is not an rc.common script"
  pass "$arch: file modes; init, postinst and prerm scripts parse"

  local bin="$dir/data/usr/bin/saguin" described
  described=$(file -b "$bin")
  [[ $described == *"$machine"* && $described == *"statically linked"* ]] || fail "$arch: the binary is $described"
  pass "$arch: the binary is a static $machine executable"

  check_init_script "$arch" "$dir" "$qemu"
}

# check_init_script <arch> <unpacked dir> <qemu>: run the init script's
# start_service and reload_service with procd's calls recorded, then start
# what it would have procd start.
check_init_script() {
  local arch=$1 dir=$2 qemu=$3 rec="$dir/procd.rec" argv="$dir/procd.argv"
  INIT="$dir/data/etc/init.d/saguin" REC=$rec ARGV=$argv sh -c '
    procd_open_instance() { :; }
    procd_close_instance() { :; }
    procd_set_param() {
      echo "param $*" >>"$REC"
      if [ "$1" = command ]; then shift; for a in "$@"; do echo "$a"; done >"$ARGV"; fi
    }
    procd_send_signal() { echo "signal $*" >>"$REC"; }
    mkdir() { echo "mkdir $*" >>"$REC"; }
    chown() { echo "chown $*" >>"$REC"; }
    chmod() { echo "chmod $*" >>"$REC"; }
    . "$INIT"
    start_service
    reload_service
  ' || fail "$arch: the init script's start_service or reload_service failed"

  grep -qx 'param user saguin' "$rec" || fail "$arch: the init script does not run the broker as saguin"
  grep -q '^param respawn' "$rec" || fail "$arch: the init script does not ask procd to respawn"
  grep -qx "signal saguin \* USR1" "$rec" || fail "$arch: reload does not send SIGUSR1 ($(grep '^signal' "$rec"))"
  local snapshot_dir
  snapshot_dir=$(sed -n 's/^ *snapshot_dir: *//p' "$dir/data/etc/saguin/saguin.yaml")
  grep -qx "mkdir -p $snapshot_dir" "$rec" || fail "$arch: the init script does not create the profile's snapshot_dir $snapshot_dir"
  grep -qx "chown -R saguin:saguin $snapshot_dir" "$rec" || fail "$arch: the init script does not give $snapshot_dir to saguin"
  [ "$(cat "$dir/data/lib/upgrade/keep.d/saguin")" = "$snapshot_dir/" ] || fail "$arch: sysupgrade does not keep $snapshot_dir"
  pass "$arch: init script runs as saguin with respawn, prepares $snapshot_dir, reload sends SIGUSR1"

  # The command line, with the packaged files standing in for their
  # installed paths (the configuration on loopback, its data in $dir).
  local cmd=() arg
  while IFS= read -r arg; do
    if [ ${#cmd[@]} -eq 0 ]; then
      [ -x "$dir/data$arg" ] || fail "$arch: the init script starts $arg, which the package does not install"
      cmd=("$qemu" "$dir/data$arg")
    elif [ "$arg" = /etc/saguin/saguin.yaml ]; then
      test_profile "$dir/data$arg" "$dir/run.yaml" "$dir/state"
      cmd+=("$dir/run.yaml")
    else
      cmd+=("$arg")
    fi
  done <"$argv"
  start_broker "$dir/broker.log" "${cmd[@]}"
  round_trip "$BROKER_PORT" "ipk-$arch"
  stop_broker
  pass "$arch: the init script's command line ($(tr '\n' ' ' <"$argv")) runs the packaged broker"
}

check_ipk aarch64_generic "ARM aarch64" qemu-aarch64
check_ipk arm_cortex-a7_neon-vfpv4 "ARM, EABI5" qemu-arm

passed_line "openwrt packages"
