#!/usr/bin/env bash
# Packs a static saguin binary into an OpenWrt .ipk without the SDK.
#
#   build-ipk.sh --arch aarch64_generic --binary PATH [--out DIR]
#
# What goes in is read from the feed package definition beside this script
# (saguin/Makefile): its name, version, release, user, description and
# conffiles, and its install recipe, which is carried out here with the
# static binary in place of the SDK's build. The archive is laid out as the
# SDK's ipkg-build lays it out: a gzipped tar of ./debian-binary,
# ./data.tar.gz and ./control.tar.gz, each inner tar holding ./-relative
# paths owned by root.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FEED=$HERE/saguin
MK=$FEED/Makefile

arch= binary= out=$ROOT/target/packages
while [ $# -gt 0 ]; do
  case $1 in
    --arch) arch=$2 ;;
    --binary) binary=$2 ;;
    --out) out=$2 ;;
    *) echo "build-ipk.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$arch" ] && [ -n "$binary" ] || { echo "usage: build-ipk.sh --arch ARCH --binary PATH [--out DIR]" >&2; exit 2; }
[ -x "$binary" ] || { echo "build-ipk.sh: $binary is not an executable; run make release-static" >&2; exit 1; }

# A static binary only: OpenWrt's libc is musl, and the package declares no
# library dependencies.
! readelf -l "$binary" | grep -q INTERP \
  || { echo "build-ipk.sh: $binary is dynamically linked; an .ipk built here must carry a static binary" >&2; exit 1; }

# mk_var NAME: a `NAME:=value` line of the feed Makefile.
mk_var() { sed -n "s/^[[:space:]]*$1:=//p" "$MK" | head -n1; }
# mk_block NAME: the lines of `define NAME` ... `endef`.
mk_block() { awk -v name="define $1" '$0 == name {on = 1; next} on && /^endef/ {exit} on' "$MK"; }

name=$(mk_var PKG_NAME)
version="$(mk_var PKG_VERSION)-$(mk_var PKG_RELEASE)"
[ -n "$name" ] && [ "$version" != - ] || { echo "build-ipk.sh: $MK names no PKG_NAME/PKG_VERSION/PKG_RELEASE" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
data=$stage/data control=$stage/control
mkdir -p "$data" "$control"

# The install recipe, with the SDK's variables given their meaning here.
while read -r tool args; do
  [ -n "$tool" ] || continue
  args=${args//'$(1)'/$data}
  args=${args//'$(PKG_INSTALL_DIR)/bin/saguin'/$binary}
  args=${args//'$(SAGUIN_SOURCE)'/$ROOT}
  args=${args//.\/files\//$FEED/files/}
  [[ $args != *'$('* ]] || { echo "build-ipk.sh: $MK install recipe uses a variable this script does not know: $args" >&2; exit 1; }
  # shellcheck disable=SC2086 # the recipe's words are separate arguments
  case $tool in
    '$(INSTALL_DIR)') install -d -m 0755 $args ;;
    '$(INSTALL_BIN)') install -m 0755 $args ;;
    '$(INSTALL_DATA)') install -m 0644 $args ;;
    *) echo "build-ipk.sh: $MK install recipe uses $tool, which this script does not carry out" >&2; exit 1 ;;
  esac
done < <(mk_block "Package/$name/install")

# Conffiles that are files in the package are conffiles; the rest (a data
# directory) are only kept across a sysupgrade, as the SDK does with them.
while read -r kept; do
  [ -n "$kept" ] || continue
  if [ -f "$data$kept" ]; then
    echo "$kept" >>"$control/conffiles"
  else
    mkdir -p "$data/lib/upgrade/keep.d"
    echo "$kept" >>"$data/lib/upgrade/keep.d/$name"
  fi
done < <(mk_block "Package/$name/conffiles")
[ ! -f "$data/lib/upgrade/keep.d/$name" ] || chmod 0644 "$data/lib/upgrade/keep.d/$name"

installed_size=$(tar -C "$data" --owner=0 --group=0 --numeric-owner -cf - . | wc -c)
package_block=$(mk_block "Package/$name")
field() { sed -n "s/^[[:space:]]*$1:=//p" <<<"$package_block" | head -n1; }
{
  echo "Package: $name"
  echo "Version: $version"
  echo "License: $(mk_var PKG_LICENSE)"
  echo "Section: $(field SECTION)"
  echo "Require-User: $(field USERID)"
  echo "Maintainer: $(mk_var PKG_MAINTAINER)"
  echo "Architecture: $arch"
  echo "Installed-Size: $installed_size"
  printf 'Description: %s\n' "$(field TITLE)"
  mk_block "Package/$name/description" | sed 's/^[[:space:]]*/ /'
} >"$control/control"

# The maintainer scripts the SDK writes for every package: OpenWrt's own
# default_postinst adds the Require-User user and enables and starts the
# init script; default_prerm stops and disables it.
printf '#!/bin/sh\n[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0\n. ${IPKG_INSTROOT}/lib/functions.sh\ndefault_postinst $0 $@\n' >"$control/postinst"
printf '#!/bin/sh\n. ${IPKG_INSTROOT}/lib/functions.sh\ndefault_prerm $0 $@\n' >"$control/prerm"
chmod 0755 "$control/postinst" "$control/prerm"
chmod 0644 "$control/control" "$control/conffiles"

pack() { # pack <dir> <archive> [members...]: a reproducible root-owned tar.gz
  local dir=$1 archive=$2; shift 2
  tar -C "$dir" --format=gnu --numeric-owner --owner=0 --group=0 --sort=name \
    --mtime=@"${SOURCE_DATE_EPOCH:-0}" -cf - "${@:-.}" | gzip -n9 >"$archive"
}
pack "$data" "$stage/data.tar.gz"
pack "$control" "$stage/control.tar.gz"
echo 2.0 >"$stage/debian-binary"
mkdir -p "$out"
ipk="$out/${name}_${version}_${arch}.ipk"
pack "$stage" "$ipk" ./debian-binary ./data.tar.gz ./control.tar.gz
echo "$ipk: $(stat -c %s "$ipk") bytes"
