#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that every C file in the repository is formatted per .clang-format.
# Fix with: clang-format -i FILE
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files -co --exclude-standard -- '*.c' '*.h' 2>/dev/null ||
	find . -name '*.[ch]' -not -path './build*')
bad=0
for f in $files; do
	[ -f "$f" ] || continue
	if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
		echo "format: $f is not formatted (fix: clang-format -i $f)" >&2
		bad=$((bad + 1))
	fi
done
if [ "$bad" -ne 0 ]; then
	echo "format: $bad file(s) need clang-format" >&2
	exit 1
fi
echo "format: all C files formatted"
