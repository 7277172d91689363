# Packaging targets, included by the top-level Makefile (which defines CARGO,
# BIN, TARGET_DIR and the cross prefixes). rfcs/0012-packaging.md has why
# each package is built the way it is.
#
#   make release-static   static aarch64 (musl) and armv7 (glibc) binaries, sizes printed
#   make test-static      run them under qemu-user without a sysroot, on board profiles
#   make deb              Debian packages for amd64, arm64 and armhf (DEB_ARCHES to choose)
#   make test-deb         install, run, upgrade, remove and purge the amd64 package (root)
#   make openwrt-ipk      OpenWrt packages from the static binaries, without the SDK
#   make test-ipk         check the .ipk files and their init script against the binary

STATIC_DIR      := $(TARGET_DIR)/static
PACKAGE_DIR     := $(TARGET_DIR)/packages
STATIC_MAX_BYTES := 3145728
STATIC_AARCH64  := aarch64-unknown-linux-musl
STATIC_ARMV7    := armv7-unknown-linux-gnueabihf

# aarch64: musl from rustup, linked by the Debian cross gcc with rustc's own
# musl start files and libc.a (link-self-contained), since Debian ships no
# aarch64 musl cross compiler. armv7: rustup has no armv7 musl target that
# installs here, so glibc linked statically. Their own target directory, so
# the static armv7 flags never mix with the dynamic release-armv7 build.
# Static glibc adds about 470 KB, so the static armv7 build is also Thumb-2
# (`+thumb-mode`, which rustc still calls unstable and warns about): every
# ARMv7-A core runs it, and it is what keeps that binary under 3 MiB.
# The static aarch64 binary drops its unwind tables after linking
# (.eh_frame, its index and the landing-pad tables, about 500 KB): release
# builds abort on panic and never unwind, so nothing at run time reads
# them, and without them the binary fits under 3 MiB.
STATIC_ENV := \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=$(AARCH64_PREFIX)-gcc \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C link-self-contained=yes" \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=$(GATEWAY_OPT_LEVEL) \
  CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_RUSTFLAGS="-C target-feature=+crt-static,+thumb-mode"

DEB_ARCHES   ?= amd64 arm64 armhf
DEB_VERSION  ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)-1
DEB_PROFILE  ?= boards/raspberry-pi-4.yaml
# The binary each Debian architecture gets: the ordinary dynamically linked
# glibc release builds (release-host, release-aarch64, release-armv7).
deb_binary_amd64 := $(TARGET_DIR)/release/$(BIN)
deb_binary_arm64 := $(TARGET_DIR)/$(AARCH64_TARGET)/release/$(BIN)
deb_binary_armhf := $(TARGET_DIR)/$(ARMV7_TARGET)/release/$(BIN)
deb_build_amd64  := release-host
deb_build_arm64  := release-aarch64
deb_build_armhf  := release-armv7

# OpenWrt architecture names each static binary is packed for. A static
# binary runs on any board of its instruction set, so other names (for
# example aarch64_cortex-a53) can be added here.
IPK_AARCH64_ARCHES ?= aarch64_generic
IPK_ARMV7_ARCHES   ?= arm_cortex-a7_neon-vfpv4

.PHONY: release-host release-static test-static deb test-deb openwrt-ipk test-ipk

# The host's release binary alone, for the amd64 package.
release-host:
	$(CARGO) build --release --bin $(BIN)

release-static:
	$(call cross-tools,aarch64-musl,$(STATIC_AARCH64),$(AARCH64_PREFIX),)
	$(call cross-tools,armv7-static,$(STATIC_ARMV7),$(ARMV7_PREFIX),)
	$(STATIC_ENV) $(CARGO) build $(GATEWAY_CARGO_FLAGS) --release --target $(STATIC_AARCH64) --target-dir $(STATIC_DIR) --bin $(BIN)
	$(AARCH64_PREFIX)-objcopy --remove-section .eh_frame --remove-section .eh_frame_hdr \
	  --remove-section .gcc_except_table $(STATIC_DIR)/$(STATIC_AARCH64)/release/$(BIN)
	$(STATIC_ENV) $(CARGO) build $(GATEWAY_CARGO_FLAGS) --release --target $(STATIC_ARMV7) --target-dir $(STATIC_DIR) --bin $(BIN)
	@for t in $(STATIC_AARCH64) $(STATIC_ARMV7); do \
	  bin=$(STATIC_DIR)/$$t/release/$(BIN); bytes=$$(stat -c %s $$bin); \
	  linked=$$(file -b $$bin | grep -o '[a-z-]* linked'); \
	  echo "static $$t: $(BIN) $$bytes bytes ($$(awk -v b=$$bytes 'BEGIN {printf "%.2f", b/1048576}') MiB), $$linked"; \
	  [ "$$linked" = "statically linked" ] || { echo "static $$t: not statically linked" >&2; exit 1; }; \
	  [ $$bytes -le $(STATIC_MAX_BYTES) ] || { echo "static $$t: over the $(STATIC_MAX_BYTES)-byte ceiling" >&2; exit 1; }; \
	done

test-static: release-static
	bash packaging/test-static.sh $(STATIC_DIR)

deb: $(foreach a,$(DEB_ARCHES),$(deb_build_$(a)))
	@for a in $(DEB_ARCHES); do \
	  case $$a in amd64) bin=$(deb_binary_amd64);; arm64) bin=$(deb_binary_arm64);; armhf) bin=$(deb_binary_armhf);; \
	    *) echo "deb: no binary for architecture $$a" >&2; exit 1;; esac; \
	  bash packaging/deb/build-deb.sh --arch $$a --version $(DEB_VERSION) --binary $$bin \
	    --profile $(DEB_PROFILE) --out $(PACKAGE_DIR); \
	done

test-deb: release-host
	bash packaging/test-deb.sh $(deb_binary_amd64) $(PACKAGE_DIR)/test-deb

openwrt-ipk: release-static
	@for a in $(IPK_AARCH64_ARCHES); do \
	  bash packaging/openwrt/build-ipk.sh --arch $$a --binary $(STATIC_DIR)/$(STATIC_AARCH64)/release/$(BIN) --out $(PACKAGE_DIR); \
	done
	@for a in $(IPK_ARMV7_ARCHES); do \
	  bash packaging/openwrt/build-ipk.sh --arch $$a --binary $(STATIC_DIR)/$(STATIC_ARMV7)/release/$(BIN) --out $(PACKAGE_DIR); \
	done

test-ipk: openwrt-ipk
	bash packaging/test-ipk.sh $(PACKAGE_DIR)
