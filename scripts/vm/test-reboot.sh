#!/usr/bin/env bash
# The reboot tests (issue 16): a daemon with --state-dir in one VM boot, then a second, fresh VM
# boot on the same state directory. The directory lives in run.sh's `out` export, a host
# directory both boots get (--out), so it outlives the first VM as a disk outlives a reboot.
#
#   npm run test:reboot [-- MOCHA-ARGS...]
#     builds, then per kernel of WG_PEERD_VM_KERNELS (default "stock backports"; dirs as in
#     test-kernel.sh) prepares it and runs the pair of boots.
#   scripts/vm/test-reboot.sh --kernel KVER --add-to SUMMARY [MOCHA-ARGS...]
#     what test-kernel.sh calls after a kernel's suite: runs the pair on the kernel prepared in
#     $WG_PEERD_VM_DIR and adds the counts into that kernel's SUMMARY file.
#
# Boot 1 runs dist/test/kernel-reboot/boot1.test.js and orders-boot1.test.js (issue 28's orders of
# events), boot 2 boot2.test.js and orders-boot2.test.js, each boot one mocha in the guest (240 s
# per test): issue 28's scenarios share the two boots instead of adding their own. Both boots'
# tests count: a boot whose VM run ends without a summary (timeout, panic) counts as one failed
# test, and boot 2 is not run when boot 1 did not reach its end (one more failure); a boot that
# ran out of time is a failure, never rerun. MOCHA-ARGS go to both boots; when they select no
# reboot test (`--grep soak`), no VM boots and nothing is counted.
# WG_PEERD_TEST_REBOOT_TIMEOUT: seconds per boot (default 900). MOCHA_SUMMARY_FILE (standalone):
# the summed summary is written there. Exit status: 0 when every test passed, else 1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
cd "$REPO"
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
say() { printf 'test:reboot: %s\n' "$*" >&2; }

kver=""
add_to=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kver="${2:?--kernel needs a version}"; shift 2 ;;
    --add-to) add_to="${2:?--add-to needs a summary file}"; shift 2 ;;
    *) break ;;
  esac
done
# boot_files N: the test files of boot N, in the order they run.
boot_files() { echo "dist/test/kernel-reboot/boot$1.test.js dist/test/kernel-reboot/orders-boot$1.test.js"; }
read -r -a files <<<"$(boot_files 1) $(boot_files 2)"
timeout_s="${WG_PEERD_TEST_REBOOT_TIMEOUT:-900}"

# Adds summary files ({"passed","failed","skipped","failures"}) into the first one.
add_summaries() {
  node -e '
    const fs = require("fs");
    const [into, ...files] = process.argv.slice(1);
    const read = (f) => (fs.existsSync(f) ? JSON.parse(fs.readFileSync(f, "utf8")) : {});
    const sum = { passed: 0, failed: 0, skipped: 0, failures: [], ...read(into) };
    for (const f of files) {
      const s = read(f);
      for (const k of ["passed", "failed", "skipped"]) sum[k] += s[k] ?? 0;
      sum.failures.push(...(s.failures ?? []));
    }
    fs.writeFileSync(into, JSON.stringify(sum) + "\n");' "$@"
}

# summary_says FILE EXPR: EXPR (JavaScript, over the summary `s`) of a summary file.
summary_says() {
  node -e 'const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"
}

# Does any reboot test match MOCHA-ARGS? (a dry run on the host: nothing is executed)
selected() {
  [ $# -gt 0 ] || return 0
  local n
  n="$(./node_modules/.bin/mocha --no-config --dry-run --reporter json "${files[@]}" "$@" |
    node -e 'let t="";process.stdin.on("data",(c)=>t+=c).on("end",()=>console.log(JSON.parse(t).stats.tests))')"
  [ "$n" -gt 0 ]
}

# run_pair KVER RESULT [MOCHA-ARGS...]: both boots on the kernel of $WG_PEERD_VM_DIR; the summed
# summary goes to RESULT.
run_pair() {
  local label="$1" result="$2"
  shift 2
  local args="" a
  for a in "$@"; do args+=" $(q "$a")"; done
  local boot rc summary boot_start
  local out
  out="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-reboot.XXXXXX")"
  echo '{"passed":0,"failed":0,"skipped":0,"failures":[]}' >"$result"
  for boot in 1 2; do
    summary="$out/summary-boot$boot.json"
    if [ "$boot" = 2 ] && [ ! -s "$out/summary-boot1.json" ]; then
      say "kernel $label: boot 2 not run: boot 1 did not reach its end; counted as 1 failure"
      echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$label] reboot boot 2 not run: boot 1 did not reach its end\"]}" >"$summary"
      add_summaries "$result" "$summary"
      break
    fi
    say "kernel $label: boot $boot of 2"
    rc=0
    boot_start=$SECONDS
    "$HERE/run.sh" --timeout "$timeout_s" --out "$out" -e "WG_PEERD_TEST_KERNEL=$label" -- \
      "MOCHA_SUMMARY_FILE=\"\$OUT_DIR/summary-boot$boot.json\" exec node --single-threaded-gc ./node_modules/mocha/bin/mocha.js --no-config --timeout 240000 --slow 10000 --reporter test/support/reporter.js --exit $(boot_files "$boot")$args" ||
      rc=$?
    say "kernel $label: boot $boot took $((SECONDS - boot_start)) s"
    if [ ! -s "$summary" ]; then
      say "kernel $label: boot $boot's VM run ended without a summary (exit status $rc: 124 ran out of time, 125 reported no status); counted as 1 failure"
      echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$label] reboot boot $boot: the VM run did not reach its end (exit status $rc)\"]}" >"$summary"
    fi
    add_summaries "$result" "$summary"
  done
  say "kernel $label: reboot tests: $(summary_says "$result" '`${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`')"
  rm -rf "$out"
}

failed() { [ "$(summary_says "$1" 's.failed')" -gt 0 ]; }

if [ -n "$add_to" ]; then
  # One kernel, already built and prepared by test-kernel.sh.
  [ -n "$kver" ] || { say "--add-to needs --kernel"; exit 2; }
  if ! selected "$@"; then exit 0; fi
  result="$(mktemp "${TMPDIR:-/tmp}/wg-peerd-reboot-summary.XXXXXX")"
  run_pair "$kver" "$result" "$@"
  add_summaries "$add_to" "$result"
  rc=0
  failed "$result" && rc=1
  rm -f "$result"
  exit "$rc"
fi

# Standalone: build, then every kernel of WG_PEERD_VM_KERNELS.
npm run build
summary="${MOCHA_SUMMARY_FILE:-}"
if [ -n "$summary" ]; then rm -f "$summary"; fi
if ! selected "$@"; then
  say "no reboot test matches the mocha arguments: nothing to run"
  exit 0
fi
base_dir="${WG_PEERD_VM_DIR:-$REPO/.vm}"
codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
total="$(mktemp "${TMPDIR:-/tmp}/wg-peerd-reboot-total.XXXXXX")"
trap 'rm -f "$total"' EXIT
echo '{"passed":0,"failed":0,"skipped":0,"failures":[]}' >"$total"
read -r -a kernels <<<"${WG_PEERD_VM_KERNELS:-stock backports}"
for k in "${kernels[@]}"; do
  case "$k" in
    stock) dir="$base_dir" release="" ;;
    backports) dir="$base_dir/backports" release="${codename:-unknown}-backports" ;;
    *) say "unknown kernel '$k' in WG_PEERD_VM_KERNELS (stock, backports)"; exit 2 ;;
  esac
  result="$(mktemp "${TMPDIR:-/tmp}/wg-peerd-reboot-summary.XXXXXX")"
  if WG_PEERD_VM_DIR="$dir" WG_PEERD_VM_KERNEL_RELEASE="$release" "$HERE/prepare.sh"; then
    label="$(. "$dir/current.env" && echo "$VM_KVER")"
    WG_PEERD_VM_DIR="$dir" run_pair "$label" "$result" "$@"
  else
    say "kernel $k: prepare.sh failed; counted as 1 failure"
    echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$k] the kernel could not be prepared\"]}" >"$result"
  fi
  add_summaries "$total" "$result"
  rm -f "$result"
done
say "all kernels: $(summary_says "$total" '`${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`')"
if failed "$total"; then summary_says "$total" 's.failures.map((f) => `test:reboot:   failed: ${f}`).join("\n")' >&2; fi
if [ -n "$summary" ]; then
  mkdir -p "$(dirname "$summary")"
  cp "$total" "$summary"
fi
failed "$total" && exit 1
exit 0
