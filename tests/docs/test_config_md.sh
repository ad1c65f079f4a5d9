#!/bin/sh
# docs/CONFIG.md must be what the programs' option tables print now: regenerates it into
# the build tree (cmake/config_md.sh) and fails with the difference when the committed
# file is stale. Negative control: a copy with one default changed must be caught.
# usage: test_config_md.sh SOURCE_DIR WORK_DIR PROGRAM...
set -eu
src=$1 work=$2
shift 2
mkdir -p "$work"
"$src/cmake/config_md.sh" "$work/CONFIG.md" "$@"
# the negative control: a stale copy differs, and diff says so
sed 's/| `--seed` | int64 | `1` |/| `--seed` | int64 | `2` |/' "$work/CONFIG.md" >"$work/CONFIG.stale.md"
if cmp -s "$work/CONFIG.md" "$work/CONFIG.stale.md"; then
  echo "FAIL: the negative control did not change the generated file" >&2
  exit 1
fi
if ! diff -u "$src/docs/CONFIG.md" "$work/CONFIG.md"; then
  echo "FAIL: docs/CONFIG.md is stale; run: cmake --build build --target update_config_md" >&2
  exit 1
fi
echo "docs/CONFIG.md is fresh ($(grep -c '^| `--' "$work/CONFIG.md") options of $# programs)"
