#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs tools/quickstart.sh against an already built tree (argument 1) in a
# throw-away demo directory, and stops its nodes whatever happens. The
# quickstart asserts what it shows; this passes when it exits 0.
set -euo pipefail
build=${1:?usage: test_quickstart.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
demo=$(mktemp -d "${TMPDIR:-/tmp}/quickstart.XXXXXX")
cleanup() {
	SEMQ_DEMO_DIR=$demo "$src/tools/quickstart.sh" --stop >/dev/null 2>&1 || true
	rm -rf "$demo"
}
trap cleanup EXIT
SEMQ_BUILD_DIR=$build SEMQ_DEMO_DIR=$demo "$src/tools/quickstart.sh"
echo "1 passed, 0 failed"
