#!/usr/bin/env bash
# npm run test:kernel [-- MOCHA-ARGS...]
#
# Builds the project, prepares the VM (scripts/vm/prepare.sh) and runs the kernel test suite
# (.mocharc.kernel.json: dist/test/kernel/**/*.test.js) inside it as root. Extra arguments go to
# mocha, e.g. `npm run test:kernel -- --grep handshake`.
#
# MOCHA_SUMMARY_FILE: when set on the host, the suite's {"passed":N,"failed":N,"skipped":N} summary
# (written by test/support/reporter.js in the guest) is copied there; a stale file is removed
# first, so a run that produced no summary leaves none behind.
# Exit status: mocha's (the number of failures), or run.sh's 124/125 when the VM timed out or
# never reported a status.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
cd "$REPO"
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

summary="${MOCHA_SUMMARY_FILE:-}"
if [ -n "$summary" ]; then rm -f "$summary"; fi

npm run build
"$HERE/prepare.sh"

out="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-kernel-tests.XXXXXX")"
trap 'rm -rf "$out"' EXIT

cmd='MOCHA_SUMMARY_FILE="$OUT_DIR/mocha-summary.json" exec ./node_modules/.bin/mocha --config .mocharc.kernel.json'
for a in "$@"; do cmd+=" $(q "$a")"; done

start=$SECONDS
rc=0
"$HERE/run.sh" --out "$out" -- "$cmd" || rc=$?
echo "test:kernel: the VM run took $((SECONDS - start)) s (exit status $rc)" >&2

if [ -n "$summary" ]; then
  if [ -f "$out/mocha-summary.json" ]; then
    mkdir -p "$(dirname "$summary")"
    cp "$out/mocha-summary.json" "$summary"
  else
    echo "test:kernel: mocha wrote no summary (it did not run to its end)" >&2
    if [ "$rc" -eq 0 ]; then rc=1; fi
  fi
fi
exit "$rc"
