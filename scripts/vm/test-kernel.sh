#!/usr/bin/env bash
# npm run test:kernel [-- MOCHA-ARGS...]
#
# Builds the project, then for each kernel of WG_PEERD_VM_KERNELS (default "stock backports"),
# one after the other: prepares the VM for it (scripts/vm/prepare.sh) and runs the kernel test
# suite (.mocharc.kernel.json: dist/test/kernel/**/*.test.js) in its own VM boot, as root. Extra
# arguments go to mocha, e.g. `npm run test:kernel -- --grep handshake`.
#
# Kernels (each prepared in its own cache directory, so their current.env never clash):
#   stock      linux-image-amd64 of the host's Debian release (bookworm: 6.1), in $WG_PEERD_VM_DIR
#   backports  linux-image-amd64 of <codename>-backports (bookworm: 6.12), in $WG_PEERD_VM_DIR/backports
# WG_PEERD_VM_DIR defaults to <repo>/.vm. `WG_PEERD_VM_KERNELS=stock npm run test:kernel` runs one.
#
# MOCHA_SUMMARY_FILE: when set on the host, ONE {"passed":N,"failed":N,"skipped":N} summary summing
# every kernel's run is written there (a stale file is removed first). A kernel that cannot be
# prepared, or whose run wrote no summary (VM timeout, panic), counts as one failed test: never a skip.
# A kernel's VM that runs out of time (WG_PEERD_TEST_KERNEL_TIMEOUT, default 900 s) is killed after
# run.sh printed where it hung, and the kernel's suite runs once more; each such hang is named in
# the last lines, and a second one counts as that kernel's failure like any run without a summary.
# Per kernel it prints its version, counts, duration and the titles of its failed tests.
# Exit status: 0 when every kernel's run passed, else 1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
cd "$REPO"
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
say() { printf 'test:kernel: %s\n' "$*" >&2; }

summary="${MOCHA_SUMMARY_FILE:-}"
if [ -n "$summary" ]; then rm -f "$summary"; fi

base_dir="${WG_PEERD_VM_DIR:-$REPO/.vm}"
read -r -a kernels <<<"${WG_PEERD_VM_KERNELS:-stock backports}"
[ "${#kernels[@]}" -gt 0 ] || { say "WG_PEERD_VM_KERNELS names no kernel"; exit 2; }
for k in "${kernels[@]}"; do
  case "$k" in stock | backports) ;; *) say "unknown kernel '$k' in WG_PEERD_VM_KERNELS (stock, backports)"; exit 2 ;; esac
done

npm run build

out="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-kernel-tests.XXXXXX")"
trap 'rm -rf "$out"' EXIT

cmd='MOCHA_SUMMARY_FILE="$OUT_DIR/mocha-summary.json" exec ./node_modules/.bin/mocha --config .mocharc.kernel.json'
for a in "$@"; do cmd+=" $(q "$a")"; done

# A kernel's suite takes 5-6 minutes in the VM; one that has not ended in 15 hangs. The VM is then
# killed after its hang report (run.sh: vCPU samples, every task's state and kernel stack) and the
# suite runs once more in a fresh VM. Mocha's own timeouts end any test whose promise never settles,
# so a VM that runs out of time is one whose guest stopped scheduling the test or whose event loop
# never came back, which the report shows. A second hang fails the kernel's run.
vm_timeout="${WG_PEERD_TEST_KERNEL_TIMEOUT:-900}"
hung=()

codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
report=()
overall=0
for k in "${kernels[@]}"; do
  dir="$base_dir"
  release=""
  if [ "$k" = backports ]; then
    dir="$base_dir/backports"
    [ -n "$codename" ] || { say "no VERSION_CODENAME in /etc/os-release: cannot name the backports release"; }
    release="${codename:-unknown}-backports"
  fi
  mkdir -p "$out/$k"
  start=$SECONDS
  kver="(not prepared)"
  if WG_PEERD_VM_DIR="$dir" WG_PEERD_VM_KERNEL_RELEASE="$release" "$HERE/prepare.sh"; then
    kver="$(. "$dir/current.env" && echo "$VM_KVER")"
    echo >&2
    say "=== kernel $kver ($k) ==="
    note=""
    for attempt in 1 2; do
      rc=0
      rm -f "$out/$k/mocha-summary.json"
      WG_PEERD_VM_DIR="$dir" "$HERE/run.sh" --timeout "$vm_timeout" --out "$out/$k" \
        -e "WG_PEERD_TEST_KERNEL=$kver" -- "$cmd" || rc=$?
      # 124: run.sh killed a VM that ran out of time; 125: the guest never reported a status.
      if [ "$attempt" = 1 ] && [ ! -s "$out/$k/mocha-summary.json" ] && { [ "$rc" = 124 ] || [ "$rc" = 125 ]; }; then
        note=" (after a first VM that did not reach the end: exit status $rc; see above)"
        say "kernel $kver: the VM did not reach the end of the suite (exit status $rc: 124 ran out of time, 125 reported no status); run.sh printed why above."
        say "kernel $kver: running the whole suite once more in a fresh VM; the hang stays in this log and in the summary line below."
        hung+=("$kver")
        continue
      fi
      break
    done
    say "kernel $kver: prepare and VM run took $((SECONDS - start)) s (exit status $rc)$note"
    if [ ! -s "$out/$k/mocha-summary.json" ]; then
      say "kernel $kver: mocha wrote no summary (exit status $rc: it did not run to its end); counted as 1 failure"
      echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$kver] the run did not reach its end\"]}" >"$out/$k/mocha-summary.json"
    elif [ "$rc" -ne 0 ]; then
      overall=1
    fi
  else
    say "kernel $k: prepare.sh failed; counted as 1 failure"
    echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$k] the kernel could not be prepared\"]}" >"$out/$k/mocha-summary.json"
  fi
  report+=("$k|$kver|$((SECONDS - start))")
done

# One summary over all kernels; per kernel a line with its counts and failures.
totals="$(node -e '
  const fs = require("fs");
  const [outDir, ...rows] = process.argv.slice(1);
  const sum = { passed: 0, failed: 0, skipped: 0 };
  for (const row of rows) {
    const [k, kver, seconds] = row.split("|");
    const s = JSON.parse(fs.readFileSync(`${outDir}/${k}/mocha-summary.json`, "utf8"));
    for (const key of Object.keys(sum)) sum[key] += s[key];
    console.error(`test:kernel: kernel ${kver} (${k}): ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped in ${seconds} s`);
    for (const title of s.failures ?? []) console.error(`test:kernel:   failed: ${title}`);
  }
  console.log(JSON.stringify(sum));' "$out" "${report[@]}")"
say "all kernels: $totals"
if [ "${#hung[@]}" -gt 0 ]; then
  say "VM runs that hung or died, each followed by a full rerun counted above: ${#hung[@]} (kernels: ${hung[*]})"
fi
if [ -n "$summary" ]; then
  mkdir -p "$(dirname "$summary")"
  echo "$totals" >"$summary"
fi
if [ "$(node -p 'JSON.parse(process.argv[1]).failed' "$totals")" -gt 0 ]; then overall=1; fi
exit "$overall"
