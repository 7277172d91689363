#!/usr/bin/env bash
# The Debian package's life on this machine, as root: install, check what it
# put where, run the installed binary as the package's user on the installed
# configuration, upgrade with an edited conffile kept, remove (configuration
# and data kept), purge (both gone). The machine is left as it was found.
#
#   bash packaging/test-deb.sh <amd64 saguin binary> <scratch dir>
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BINARY=${1:?usage: test-deb.sh <amd64 saguin binary> <scratch dir>}
SCRATCH=${2:?usage: test-deb.sh <amd64 saguin binary> <scratch dir>}
CONF=/etc/saguin/saguin.yaml
UNIT=/usr/lib/systemd/system/saguin.service
DATA=/var/lib/saguin
TOPIC=saguin-test/kept-across-upgrade

[ "$(id -u)" -eq 0 ] || fail "test-deb.sh installs a package: run it as root"
need dpkg dpkg-deb systemd-analyze setpriv adduser mosquitto_pub mosquitto_sub
# Never touch a real installation.
if dpkg-query -W -f='${Status}' saguin 2>/dev/null | grep -qv 'not-installed'; then
  fail "a saguin package is already on this machine; this test installs and purges its own"
fi
for leftover in /etc/saguin "$DATA"; do
  [ ! -e "$leftover" ] || fail "$leftover exists but no saguin package is installed; move it away first"
done
USER_EXISTED=0
getent passwd saguin >/dev/null && USER_EXISTED=1

BROKER_PID=
cleanup() {
  kill_broker
  dpkg --purge saguin >/dev/null 2>&1 || true
  # Absent when the test began, so whatever is there now is the test's.
  rm -rf /etc/saguin "$DATA"
  if [ "$USER_EXISTED" = 0 ]; then
    userdel saguin 2>/dev/null || true
    groupdel saguin 2>/dev/null || true
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"

version=$(cargo_version)
build() { # build <debian revision> <profile>
  bash "$PACKAGING_DIR/deb/build-deb.sh" --arch amd64 --version "$version-$1" \
    --binary "$BINARY" --profile "$2" --out "$SCRATCH"
}

# run_installed: the installed binary, as the package's user, on the
# installed configuration; sets BROKER_PORT.
run_installed() {
  start_broker "$SCRATCH/broker.log" setpriv --reuid=saguin --regid=saguin --init-groups \
    /usr/bin/saguin --config "$CONF"
}

# ---- install ---------------------------------------------------------------
build 1 "$REPO_ROOT/boards/raspberry-pi-4.yaml"
dpkg -i "$SCRATCH/saguin_${version}-1_amd64.deb"

uid=$(id -u saguin) || fail "the package made no saguin user"
[ "$uid" -lt 1000 ] || fail "saguin is uid $uid, not a system user"
[ "$(getent passwd saguin | cut -d: -f7)" = /usr/sbin/nologin ] || fail "the saguin user has a login shell"
[ "$(stat -c '%U:%G %a' "$DATA")" = "saguin:saguin 750" ] || fail "$DATA is $(stat -c '%U:%G %a' "$DATA"), not saguin:saguin 750"
pass "system user saguin (uid $uid), $DATA owned by it"

dpkg-query -W -f='${Conffiles}\n' saguin | grep -q "^ $CONF " || fail "$CONF is not a conffile"
cmp -s "$CONF" "$REPO_ROOT/boards/raspberry-pi-4.yaml" || fail "$CONF is not the Raspberry Pi 4 profile"
/usr/bin/saguin --check-config "$CONF" >/dev/null || fail "the installed binary refuses the installed configuration"
grep -q "file_path: $DATA/" "$CONF" || fail "the installed configuration keeps no data under $DATA"
pass "$CONF is a conffile, the Raspberry Pi 4 profile, valid, with its data under $DATA"

[ -f "$UNIT" ] || fail "no unit at $UNIT"
systemd-analyze verify --man=no "$UNIT" || fail "systemd-analyze verify refuses $UNIT"
# Exposure 2.0 or less on systemd's 0-10 scale (the threshold counts tenths).
systemd-analyze security --offline=yes --threshold=20 --no-pager "$UNIT" | tail -n1 \
  || fail "systemd-analyze security rates $UNIT above 2.0"
for setting in User=saguin ProtectSystem=strict "ReadWritePaths=$DATA" NoNewPrivileges=yes \
  Restart=on-failure 'ExecReload=/bin/kill -USR1 $MAINPID' "ExecStart=/usr/bin/saguin --config $CONF"; do
  grep -qxF "$setting" "$UNIT" || fail "$UNIT lacks $setting"
done
max_connections=$(sed -n 's/^ *max_connections: *\([0-9]*\)/\1/p' "$CONF")
nofile=$(sed -n 's/^LimitNOFILE=//p' "$UNIT")
[ "$nofile" -gt "$max_connections" ] || fail "LimitNOFILE=$nofile does not cover max_connections $max_connections"
[ "$(systemctl is-enabled saguin.service 2>&1)" = enabled ] || fail "the package did not enable saguin.service"
pass "unit verified by systemd-analyze, enabled, hardened; LimitNOFILE=$nofile for $max_connections connections"

# ---- run as the package's user ---------------------------------------------
# The administrator's edit: loopback, a port of the kernel's choosing, and
# the log level at which the broker names that port.
sed -i -E -e 's#^( *address: ).*#\1127.0.0.1:0#' -e 's#^( *log_level: ).*#\1info#' "$CONF"
run_installed
round_trip "$BROKER_PORT" deb-installed
retain "$BROKER_PORT" "$TOPIC" before-upgrade
stop_broker
[ "$(stat -c %U "$DATA/saguin.redb")" = saguin ] || fail "the store $DATA/saguin.redb is not the saguin user's"
pass "installed broker ran as saguin and kept its store in $DATA"

# ---- upgrade -----------------------------------------------------------------
# The new version ships a changed profile, so dpkg has a conffile conflict to
# settle, and --force-confold must settle it for the administrator's edit.
cp "$REPO_ROOT/boards/raspberry-pi-4.yaml" "$SCRATCH/profile-2.yaml"
echo "# revised in $version-2" >>"$SCRATCH/profile-2.yaml"
build 2 "$SCRATCH/profile-2.yaml"
dpkg -i --force-confold "$SCRATCH/saguin_${version}-2_amd64.deb"
[ "$(dpkg-query -W -f='${Version}' saguin)" = "$version-2" ] || fail "the upgrade did not install $version-2"
grep -q '127.0.0.1:0' "$CONF" || fail "the upgrade replaced the edited $CONF"
grep -q "revised in $version-2" "$CONF.dpkg-dist" || fail "the new profile was not left beside it as $CONF.dpkg-dist"
run_installed
expect_retained "$BROKER_PORT" "$TOPIC" before-upgrade
stop_broker
pass "upgrade to $version-2 kept the edited conffile and the stored data"

# ---- remove, then purge ---------------------------------------------------
dpkg -r saguin
[ ! -e /usr/bin/saguin ] && [ ! -e "$UNIT" ] || fail "remove left the binary or the unit"
[ -z "$(find /etc/systemd/system -name saguin.service 2>/dev/null)" ] || fail "remove left saguin.service enabled"
dpkg-query -W -f='${Status}' saguin | grep -q 'config-files' || fail "remove did not leave the package's configuration"
grep -q '127.0.0.1:0' "$CONF" || fail "remove did not keep the edited $CONF"
[ -f "$DATA/saguin.redb" ] || fail "remove did not keep $DATA"
pass "remove kept $CONF and $DATA"

dpkg -P saguin
[ ! -e /etc/saguin ] && [ ! -e "$DATA" ] || fail "purge left /etc/saguin or $DATA"
status=$(dpkg-query -W -f='${Status}' saguin 2>/dev/null || true)
[[ -z $status || $status == *not-installed ]] || fail "purge left the package as '$status'"
pass "purge removed /etc/saguin and $DATA"

passed_line "debian package"
