#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The Debian package: `cpack -G DEB` from the build directory, then
#  - dpkg-deb -x into a scratch root: semqd in /usr/sbin, semqctl in
#    /usr/bin, the plugins in /usr/lib/semq/plugins, the unit naming
#    /usr/sbin/semqd, the sample as the conffile /etc/semq/node.ini whose
#    plugin path is a file of the package, the manual pages, the bash
#    completion, copyright and changelog; the maintainer scripts create the
#    user semq and /var/lib/semq; Depends from dpkg-shlibdeps;
#  - the packaged programs run and say the version;
#  - `man -l` renders semqd(8), semqctl(8) and semq.ini(5) without a
#    warning, and each shows what its source says;
#  - lintian reports no error (E:); its warnings are printed.
#
# Usage: bash test_package.sh BUILD_DIR CPACK VERSION
set -euo pipefail

if [ $# -ne 3 ]; then
	echo "usage: $0 BUILD_DIR CPACK VERSION" >&2
	exit 2
fi
BUILD=$(realpath "$1")
CPACK=$2
VERSION=$3

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
cli_begin test_package
for tool in dpkg-deb lintian man; do
	if ! command -v "$tool" >/dev/null; then
		echo "FAIL - $tool is not installed (tools/deps.sh installs it)"
		exit 1
	fi
done

t0=$(date +%s%N)
check "cpack -G DEB builds the package" \
	"$CPACK" -G DEB --config "$BUILD/CPackConfig.cmake" -B "$dir/pkg"
deb=$dir/pkg/semq_${VERSION}_amd64.deb
t1=$(date +%s%N)
echo "     (cpack: $(((t1 - t0) / 1000000)) ms)"
[ -s "$deb" ] || {
	ls -l "$dir/pkg" >"$dir/log" 2>&1
	bad "the package is $deb"
	finished=1
	exit 1
}

root=$dir/root
dpkg-deb -x "$deb" "$root"
missing=()
for f in usr/sbin/semqd usr/bin/semqctl usr/lib/libsemq.so.0 \
	usr/lib/semq/plugins/journal.so usr/lib/semq/plugins/bill.so \
	usr/lib/semq/plugins/export.so usr/lib/systemd/system/semqd.service \
	etc/semq/node.ini usr/share/doc/semq/node.ini.sample \
	usr/share/doc/semq/copyright usr/share/doc/semq/changelog.gz \
	usr/share/doc/semq/README.md usr/share/doc/semq/OPERATIONS.md \
	usr/share/man/man8/semqd.8.gz usr/share/man/man8/semqctl.8.gz \
	usr/share/man/man5/semq.ini.5.gz \
	usr/share/bash-completion/completions/semqctl \
	usr/include/semq/plugin.h usr/share/semq/db/0001_init.sql; do
	[ -s "$root/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ] && [ -x "$root/usr/sbin/semqd" ] &&
	[ -x "$root/usr/bin/semqctl" ] && [ ! -e "$root/usr/bin/semqd" ]; then
	ok "binaries, plugins, unit, config, docs, man pages and completion where Debian wants them"
else
	: >"$dir/log"
	bad "binaries, plugins, unit, config, docs, man pages and completion where Debian wants them (missing: ${missing[*]})"
fi
if grep -qx "ExecStart=/usr/sbin/semqd -c /etc/semq/node.ini" "$root/usr/lib/systemd/system/semqd.service" &&
	! grep -v '^#' "$root/usr/lib/systemd/system/semqd.service" | grep -q /usr/local; then
	ok "the unit runs /usr/sbin/semqd -c /etc/semq/node.ini, nothing under /usr/local"
else
	grep -n "ExecStart\|/usr/local" "$root/usr/lib/systemd/system/semqd.service" >"$dir/log" 2>&1 || true
	bad "the unit runs /usr/sbin/semqd -c /etc/semq/node.ini, nothing under /usr/local"
fi
plugin=$(sed -n 's/^path = \([^ ]*\).*/\1/p' "$root/etc/semq/node.ini")
if [ "$plugin" = /usr/lib/semq/plugins/bill.so ] && [ -s "$root$plugin" ] &&
	! grep -q /usr/local "$root/etc/semq/node.ini" &&
	cmp -s "$root/etc/semq/node.ini" "$root/usr/share/doc/semq/node.ini.sample"; then
	ok "/etc/semq/node.ini names the packaged plugin $plugin (as the sample in the docs)"
else
	echo "plugin path: '$plugin'" >"$dir/log"
	bad "/etc/semq/node.ini names the packaged plugin (as the sample in the docs)"
fi

dpkg-deb -e "$deb" "$dir/ctl"
if [ "$(cat "$dir/ctl/conffiles")" = /etc/semq/node.ini ] &&
	grep -q 'adduser --system' "$dir/ctl/postinst" &&
	grep -q 'install -d -m 0750 -o semq -g semq /var/lib/semq' "$dir/ctl/postinst" &&
	grep -q '^Depends: adduser, .*libsqlite3-0.*libssl3' "$dir/ctl/control" &&
	grep -q '^Section: net' "$dir/ctl/control"; then
	ok "conffiles /etc/semq/node.ini; postinst makes the user semq and /var/lib/semq; Depends from the libraries"
else
	cat "$dir/ctl/conffiles" "$dir/ctl/control" >"$dir/log" 2>&1 || true
	bad "conffiles /etc/semq/node.ini; postinst makes the user semq and /var/lib/semq; Depends from the libraries"
fi
check "the maintainer scripts are valid sh" sh -n "$dir/ctl/postinst" "$dir/ctl/prerm"

if [ "$("$root/usr/sbin/semqd" --version)" = "semqd $VERSION" ] &&
	[ "$("$root/usr/bin/semqctl" --version)" = "semqctl $VERSION" ]; then
	ok "the packaged semqd and semqctl run and say $VERSION"
else
	: >"$dir/log"
	bad "the packaged semqd and semqctl run and say $VERSION"
fi

# ---- manual pages ------------------------------------------------------------
for page in man8/semqd.8.gz:semqd man8/semqctl.8.gz:semqctl man5/semq.ini.5.gz:semq.ini; do
	f=$root/usr/share/man/${page%%:*}
	name=${page#*:}
	warnings=$(MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
	MANWIDTH=80 man -l "$f" 2>/dev/null >"$dir/page.txt"
	case $name in
	semqd) want="-c, --config FILE" ;;
	semqctl) want="redo retry" ;;
	semq.ini) want="max_payload = size" ;;
	esac
	if [ -z "$warnings" ] && grep -qF -- "$want" "$dir/page.txt" &&
		grep -q "$VERSION" "$dir/page.txt"; then
		ok "man -l $name renders without warnings and shows '$want'"
	else
		echo "$warnings" >"$dir/log"
		bad "man -l $name renders without warnings and shows '$want'"
	fi
done
# semq.ini(5) is the key table: every key of --config-reference is in it.
"$root/usr/sbin/semqd" --config-reference |
	sed -n 's/^  \([a-z_]*\) = <.*/\1/p' | sort -u >"$dir/keys"
MANWIDTH=200 man -l "$root/usr/share/man/man5/semq.ini.5.gz" 2>/dev/null |
	sed -n 's/^ *\([a-z_]*\) = .*/\1/p' | sort -u >"$dir/man_keys"
if [ -s "$dir/keys" ] && cmp -s "$dir/keys" "$dir/man_keys"; then
	ok "semq.ini(5) lists every key of semqd --config-reference ($(wc -l <"$dir/keys") names)"
else
	diff "$dir/keys" "$dir/man_keys" >"$dir/log" 2>&1 || true
	bad "semq.ini(5) lists every key of semqd --config-reference"
fi

# ---- lintian ---------------------------------------------------------------------
# Exit 0: no error (warnings are printed); 1: errors (E:); else it failed.
t0=$(date +%s%N)
lrc=0
lintian --tag-display-limit 0 "$deb" >"$dir/lintian" 2>&1 || lrc=$?
t1=$(date +%s%N)
echo "     (lintian: $(((t1 - t0) / 1000000)) ms)"
grep -v 'root privileges' "$dir/lintian" | sed 's/^/     lintian: /' || true
if [ "$lrc" -eq 0 ] && ! grep -q '^E:' "$dir/lintian"; then
	ok "lintian reports no error"
else
	cp "$dir/lintian" "$dir/log"
	bad "lintian reports no error (exit $lrc)"
fi

cli_end
