#!/usr/bin/env bash
# Builds saguin_<version>_<arch>.deb with dpkg-deb from a tree staged here.
#
#   build-deb.sh --arch amd64|arm64|armhf --version 0.1.0-1 --binary PATH
#                [--profile boards/raspberry-pi-4.yaml] [--out DIR]
#
# The profile becomes /etc/saguin/saguin.yaml, a conffile. The binary's
# Depends come from what it links: its NEEDED libraries and the newest glibc
# symbol version it uses.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

arch= version= binary= profile=$ROOT/boards/raspberry-pi-4.yaml out=$ROOT/target/packages
while [ $# -gt 0 ]; do
  case $1 in
    --arch) arch=$2 ;;
    --version) version=$2 ;;
    --binary) binary=$2 ;;
    --profile) profile=$2 ;;
    --out) out=$2 ;;
    *) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$arch" ] && [ -n "$version" ] && [ -n "$binary" ] \
  || { echo "usage: build-deb.sh --arch ARCH --version VERSION --binary PATH [--profile FILE] [--out DIR]" >&2; exit 2; }
[ -x "$binary" ] || { echo "build-deb.sh: $binary is not an executable; build it first" >&2; exit 1; }

# The ELF machine each Debian architecture must carry.
case $arch in
  amd64) machine='X86-64' ;;
  arm64) machine='AArch64' ;;
  armhf) machine='ARM' ;;
  *) echo "build-deb.sh: no Debian architecture $arch (amd64, arm64, armhf)" >&2; exit 2 ;;
esac
readelf -h "$binary" | grep -q "Machine:.*$machine" \
  || { echo "build-deb.sh: $binary is not a $machine binary, so it cannot go in a $arch package" >&2; exit 1; }

# Depends: each shared library the binary names, mapped to its package.
depends=()
glibc=$(readelf --version-info "$binary" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1 || true)
for lib in $(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  case $lib in
    libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux*) dep="libc6${glibc:+ (>= $glibc)}" ;;
    libgcc_s.so.1) dep='libgcc-s1' ;;
    *) echo "build-deb.sh: $binary needs $lib, and no package is known for it; add it here" >&2; exit 1 ;;
  esac
  [[ " ${depends[*]} " == *" $dep "* ]] || depends+=("$dep")
done
depends+=(adduser)

# LimitNOFILE: the profile's max_connections plus the descriptors that are
# not connections (handshakes waiting, listeners, the store, stdio).
max_connections=$(sed -n 's/^[[:space:]]*max_connections:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$profile" | head -n1)
[ -n "$max_connections" ] || { echo "build-deb.sh: $profile sets no max_connections" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/saguin
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/etc/saguin" "$pkg/usr/lib/systemd/system" \
  "$pkg/usr/share/doc/saguin" "$pkg/usr/share/saguin/boards"
install -m 0755 "$binary" "$pkg/usr/bin/saguin"
install -m 0644 "$profile" "$pkg/etc/saguin/saguin.yaml"
sed "s/@LIMIT_NOFILE@/$((max_connections + 64))/" "$HERE/saguin.service" >"$pkg/usr/lib/systemd/system/saguin.service"
chmod 0644 "$pkg/usr/lib/systemd/system/saguin.service"
install -m 0644 "$ROOT"/boards/*.yaml "$pkg/usr/share/saguin/boards/"
install -m 0644 "$ROOT/README.md" "$HERE/copyright" "$pkg/usr/share/doc/saguin/"
install -m 0755 "$HERE/postinst" "$HERE/prerm" "$HERE/postrm" "$pkg/DEBIAN/"
echo /etc/saguin/saguin.yaml >"$pkg/DEBIAN/conffiles"

installed_kib=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: saguin
Version: $version
Architecture: $arch
Maintainer: ${DEB_MAINTAINER:-Sagüin maintainers <maintainers@saguin.invalid>}
Installed-Size: $installed_kib
Depends: $(IFS=,; echo "${depends[*]}" | sed 's/,/, /g')
Section: net
Priority: optional
Description: MQTT 3.1.1 and 5 broker for edge gateways
 Sagüin runs on the gateway itself and speaks MQTT 3.1.1 and MQTT 5 on one
 port. Parts of the topic space can be kept as durable append logs, latest
 values or work queues. This package runs it as the saguin system user
 under systemd, with its configuration in /etc/saguin/saguin.yaml and its
 data in /var/lib/saguin; /usr/share/saguin/boards has profiles for other
 boards.
CONTROL
(cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/conffiles" "$pkg/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/saguin_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb: $(stat -c %s "$deb") bytes; Depends: $(dpkg-deb -f "$deb" Depends); LimitNOFILE=$((max_connections + 64))"
