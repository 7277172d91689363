# Sagüin — build, test, lint and cross-compile entry points.
#
#   make build            release build for the host
#   make run              run the broker on config/saguin.yaml
#   make test             whole test suite on the host (unit + integration, both packages)
#   make test-interop     paho-mqtt interoperability tests (Python, pytest)
#   make bench            this broker against mosquitto, side by side; writes BENCHMARKS.md
#   make soak HOURS=1     a gateway's mix on the Pi Zero 2 W profile for HOURS (any length); CSV, plot, pass/fail
#   make lint             rustfmt check + clippy with warnings denied
#   make powercut SEEDS=N the store's power-cut simulation over N seeds (release)
#   make test-cross       library tests for armv7 and aarch64, run under qemu-user
#   make release-armv7    stripped release binary for armv7-unknown-linux-gnueabihf
#   make release-aarch64  stripped release binary for aarch64-unknown-linux-gnu
#   make release-static   static aarch64 (musl) and armv7 (glibc) binaries, sizes printed
#   make test-static      run the static binaries under qemu-user without a sysroot
#   make deb              Debian packages for amd64, arm64 and armhf (packaging/deb)
#   make test-deb         install, run, upgrade and remove the amd64 package (as root)
#   make openwrt-ipk      OpenWrt .ipk packages from the static binaries (packaging/openwrt)
#   make test-ipk         check the .ipk files and their procd init script
#
# Cross-compilation uses the Debian cross toolchains and qemu-user
# (apt: gcc-arm-linux-gnueabihf gcc-aarch64-linux-gnu libc6-dev-armhf-cross
# libc6-dev-arm64-cross qemu-user; rustup target add for both targets);
# `.ci/run` installs all of it. Linkers and runners are passed to cargo through
# environment variables; .cargo/config.toml holds only what every armv7 build
# must share however it is started (Thumb-2 code). Every variable below can be
# overridden from the command line or the environment.
# Users with Docker can use `cross` instead; see Cross.toml.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build
MAKEFLAGS += --no-print-directory

CARGO  ?= cargo
CONFIG ?= config/saguin.yaml
BIN    ?= saguin

ARMV7_TARGET   := armv7-unknown-linux-gnueabihf
AARCH64_TARGET := aarch64-unknown-linux-gnu
ARMV7_PREFIX   ?= arm-linux-gnueabihf
AARCH64_PREFIX ?= aarch64-linux-gnu

# The ARM release builds optimise for size (`z`) rather than the host's `s`:
# with TLS, the ACL, the operations listener and bridges, `s` left the armv7
# binary too close to its 3 MiB budget, and `z` saves about 10% there.
GATEWAY_OPT_LEVEL ?= z
# Cargo.toml builds redb for speed; the ARM builds take it down to the same
# size setting as the rest (an environment variable cannot name a package).
GATEWAY_CARGO_FLAGS := --config 'profile.release.package.redb.opt-level="$(GATEWAY_OPT_LEVEL)"'

# Where cargo puts its output; follows CARGO_TARGET_DIR if set.
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

# Linkers and qemu runners for cargo (`cargo test --target ...` runs the test
# binaries through the runner).
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER ?= $(ARMV7_PREFIX)-gcc
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_RUNNER ?= qemu-arm -L /usr/$(ARMV7_PREFIX)
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER ?= $(AARCH64_PREFIX)-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER ?= qemu-aarch64 -L /usr/$(AARCH64_PREFIX)
# For build scripts that compile C through the `cc` crate (ring, under
# rustls, does): it reads CC_<target>/AR_<target>.
export CC_armv7_unknown_linux_gnueabihf ?= $(ARMV7_PREFIX)-gcc
export AR_armv7_unknown_linux_gnueabihf ?= $(ARMV7_PREFIX)-ar
export CC_aarch64_unknown_linux_gnu ?= $(AARCH64_PREFIX)-gcc
export AR_aarch64_unknown_linux_gnu ?= $(AARCH64_PREFIX)-ar

.PHONY: bench soak build run test test-interop lint powercut test-cross test-armv7 test-aarch64 \
        release-armv7 release-aarch64 help

help:
	@sed -n 's/^#   make /  make /p' $(firstword $(MAKEFILE_LIST))

build:
	$(CARGO) build --release

run:
	$(CARGO) run --release -- --config $(CONFIG)

# --no-fail-fast: run every test binary and report all failures, not just the first.
test:
	$(CARGO) test --workspace --no-fail-fast

# The benchmark harness (the workspace member bench/), side by side with
# mosquitto. Not part of test or CI: it takes minutes and wants a quiet
# machine. mosquitto comes from Debian's package (apt-get install mosquitto).
# BENCH_ARGS="--baseline-bin PATH" adds an older saguin beside figures 1 to 7.
bench:
	@command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || { \
	  echo "bench: mosquitto is not installed; trying apt-get install mosquitto" >&2; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto; } || \
	  echo "bench: could not install mosquitto; its columns will be missing" >&2; }
	@[ -f /usr/include/mosquitto.h ] || { \
	  echo "bench: libmosquitto-dev is not installed (figure 9's C publisher needs it); trying apt-get install libmosquitto-dev" >&2; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmosquitto-dev; } || \
	  echo "bench: could not install libmosquitto-dev; figure 9's libmosquitto rows will fail" >&2; }
	$(CARGO) build --release --workspace
	$(TARGET_DIR)/release/saguin-bench --write BENCHMARKS.md $(BENCH_ARGS)
	$(TARGET_DIR)/release/saguin-bench worst-case --board boards/raspberry-pi-zero-2w.yaml \
	  --board boards/openwrt-128mb.yaml --write BENCHMARKS.md

# The soak (bench/src/soak/): the release broker on the Pi Zero 2 W profile
# under a gateway's mix for HOURS (fractions allowed), sampled into
# $(TARGET_DIR)/soak/soak.csv and soak.png; fails when RSS, open files or
# p99 climb once warm, or an acknowledged record is missing. The plot needs
# matplotlib (pip install matplotlib). SOAK_ARGS="--sample-every 10s" for
# short runs; SOAK_ARGS="--write BENCHMARKS.md --write-plot bench/soak.png"
# records a run in BENCHMARKS.md.
HOURS ?= 1
SOAK_ARGS ?=
soak:
	@command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || { \
	  echo "soak: mosquitto is not installed (apt-get install mosquitto): the bridge's peer needs it" >&2; exit 1; }
	@python3 -c 'import matplotlib' 2>/dev/null || { \
	  echo "soak: matplotlib is not importable by python3 (pip install matplotlib): the plot needs it" >&2; exit 1; }
	$(CARGO) build --release --workspace
	$(TARGET_DIR)/release/saguin-bench soak --hours $(HOURS) --out $(TARGET_DIR)/soak $(SOAK_ARGS)

# Interoperability tests: the real broker binary driven by the paho-mqtt
# Python client (pip install paho-mqtt pytest). Uses target/debug/saguin.
# CI runs them.
test-interop:
	$(CARGO) build --bin $(BIN)
	PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider tests/interop

# Both checks always run; the target fails if either does.
# The power-cut simulations in release mode: the store's
# (src/store/powercut_tests.rs) over seeds 0..SEEDS, and the broker core's
# (src/core/broker/powercut_tests.rs) over 0..CORE_SEEDS; a failing seed
# prints how to replay it.
SEEDS ?= 5000
CORE_SEEDS ?= 1000
powercut:
	SAGUIN_POWERCUT_SEEDS=$(SEEDS) SAGUIN_CORECUT_SEEDS=$(CORE_SEEDS) \
	  $(CARGO) test --release --lib powercut -- --nocapture

lint:
	@rc=0; \
	echo "$(CARGO) fmt --all --check"; $(CARGO) fmt --all --check || rc=1; \
	echo "$(CARGO) clippy --workspace --all-targets -- -D warnings"; $(CARGO) clippy --workspace --all-targets -- -D warnings || rc=1; \
	exit $$rc

# ---------------------------------------------------------------------------
# Cross targets.
#
# $(call cross-tools,<name>,<target>,<prefix>,<qemu>) fails early, with a hint,
# when the toolchain pieces are missing.
define cross-tools
	@missing=""; \
	for t in $(3)-gcc $(4); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	[ -d /usr/$(3)/lib ] || missing="$$missing /usr/$(3)/lib"; \
	rustup target list --installed 2>/dev/null | grep -qx '$(2)' || missing="$$missing rust-std($(2))"; \
	if [ -n "$$missing" ]; then \
	  echo "$(1): missing:$$missing" >&2; \
	  echo "$(1): run 'bash .ci/run' once, or install gcc-$(3) libc6-dev-*-cross qemu-user and 'rustup target add $(2)'" >&2; \
	  exit 1; \
	fi
endef

# $(call cross-test,<name>,<target>,<prefix>,<qemu>): run the library's tests for
# <target> under qemu, print "<name>: N passed", fail if no test ran.
define cross-test
	$(call cross-tools,$(1),$(2),$(3),$(4))
	@log=$(TARGET_DIR)/test-cross-$(1).log; mkdir -p $(TARGET_DIR); \
	echo "== $(1): $(CARGO) test --lib --target $(2) (runner: $(4))"; \
	$(CARGO) test --lib --target $(2) 2>&1 | tee $$log; \
	count() { sed -n "s/^test result: .* \([0-9][0-9]*\) $$1;.*/\1/p" $$log | awk '{s+=$$1} END {print s+0}'; }; \
	passed=$$(count passed); ignored=$$(count ignored); \
	echo "$(1): $$passed passed, $$ignored ignored ($(2), under $(4))"; \
	if [ "$$passed" -eq 0 ]; then echo "$(1): no test ran under $(4)" >&2; exit 1; fi
endef

# $(call cross-release,<name>,<target>,<prefix>): stripped release binary for
# <target>; print its path, size and that it really is stripped.
define cross-release
	$(call cross-tools,$(1),$(2),$(3),)
	CARGO_PROFILE_RELEASE_OPT_LEVEL=$(GATEWAY_OPT_LEVEL) $(CARGO) build $(GATEWAY_CARGO_FLAGS) --release --target $(2) --bin $(BIN)
	@bin=$(TARGET_DIR)/$(2)/release/$(BIN); \
	bytes=$$(stat -c %s $$bin); \
	if $(3)-readelf -S $$bin | grep -q '\.symtab'; then strip=NO; else strip=yes; fi; \
	echo "$$bin"; \
	echo "$(1): $(BIN) $$bytes bytes ($$(awk -v b=$$bytes 'BEGIN {printf "%.2f", b/1048576}') MiB), stripped: $$strip"; \
	[ $$strip = yes ] || { echo "$(1): binary still has a symbol table" >&2; exit 1; }
endef

test-cross: test-armv7 test-aarch64

test-armv7:
	$(call cross-test,armv7,$(ARMV7_TARGET),$(ARMV7_PREFIX),qemu-arm)

test-aarch64:
	$(call cross-test,aarch64,$(AARCH64_TARGET),$(AARCH64_PREFIX),qemu-aarch64)

release-armv7:
	$(call cross-release,armv7,$(ARMV7_TARGET),$(ARMV7_PREFIX))

release-aarch64:
	$(call cross-release,aarch64,$(AARCH64_TARGET),$(AARCH64_PREFIX))

# Static binaries, Debian and OpenWrt packages.
include packaging/packaging.mk
