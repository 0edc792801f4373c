#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages SEMQ needs to build and test, when missing.
# Sourced by tools/test.sh and tools/quickstart.sh; safe to run again.
set -euo pipefail

SEMQ_PACKAGES=(
	build-essential cmake pkg-config
	libevent-dev libssl-dev openssl libsqlite3-dev sqlite3
	libprotobuf-c-dev protobuf-c-compiler libcmocka-dev libinih-dev
	libjansson-dev clang-format python3 spin
	postgresql libpq-dev
	python3-psycopg2 # semq-bench --db postgresql (and its test in test_bench)
	clang libclang-rt-14-dev valgrind
	chromium
	help2man lintian
)

# Installs the Debian packages named that are missing (root needed then).
semq_install_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "==> installing Debian packages: ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "error: need root to install ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

semq_install_deps() {
	semq_install_packages "${SEMQ_PACKAGES[@]}"
}

# promtool (the alert rules and /metrics checks, contrib/prometheus): only
# the binary, taken out of Debian's prometheus package with dpkg-deb -x.
# Installing the package would add a prometheus user, a service that its
# postinst starts and a dozen JavaScript libraries, none of which a build
# or test machine wants; promtool needs libc only.
semq_install_promtool() {
	command -v promtool >/dev/null && return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "error: need root to install promtool into /usr/local/bin" >&2
		return 1
	fi
	local tmp
	tmp=$(mktemp -d)
	echo "==> installing promtool (from Debian's prometheus package)"
	(cd "$tmp" && chmod 777 . &&
		{ apt-get download -qq prometheus 2>/dev/null ||
			{ apt-get update -qq && apt-get download -qq prometheus; }; }) &&
		dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" &&
		install -m 0755 "$tmp/x/usr/bin/promtool" /usr/local/bin/promtool
	local r=$?
	rm -rf "$tmp"
	return $r
}

# Mosquitto, for `tools/semq-bench --compare mosquitto` only (the broker
# and libmosquitto-dev for tools/mqtt-load): a benchmark's packages, not a
# build's or a test's, so tools/test.sh does not call this. Installing the
# package enables and starts a mosquitto.service on port 1883 (policy-rc.d
# permitting); the benchmark starts brokers of its own on other ports.
semq_install_mosquitto() {
	semq_install_packages mosquitto libmosquitto-dev
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	semq_install_deps
	semq_install_promtool
fi
