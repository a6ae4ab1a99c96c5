#!/usr/bin/env bash
# npm run test:kernel [-- MOCHA-ARGS...]
#
# Builds the project, prepares a VM for each kernel of WG_PEERD_VM_KERNELS (default "stock
# backports"; scripts/vm/prepare.sh), then runs the kernel test suite (.mocharc.kernel.json:
# dist/test/kernel/**/*.test.js) in its own VM boot per kernel, as root, the kernels side by side
# on a machine with 2 cores or more (WG_PEERD_VM_PARALLEL, below), each followed by its reboot
# pair (scripts/vm/test-reboot.sh). Extra arguments go to mocha, e.g.
# `npm run test:kernel -- --grep handshake`.
#
# Kernels (each prepared in its own cache directory, so their current.env never clash):
#   stock      linux-image-amd64 of the host's Debian release (bookworm: 6.1), in $WG_PEERD_VM_DIR
#   backports  linux-image-amd64 of <codename>-backports (bookworm: 6.12), in $WG_PEERD_VM_DIR/backports
# WG_PEERD_VM_DIR defaults to <repo>/.vm. `WG_PEERD_VM_KERNELS=stock npm run test:kernel` runs one.
#
# MOCHA_SUMMARY_FILE: when set on the host, ONE {"passed":N,"failed":N,"skipped":N,"failures":[...]}
# summary summing every kernel's run is written there (a stale file is removed first), with
# "unfinished": [...] naming each VM run that did not reach the end of the suite. A kernel that
# cannot be prepared counts as one failed test: never a skip.
# A VM run that does not reach the end of the suite (no test ends for WG_PEERD_TEST_KERNEL_STALL
# seconds, default 1000, or the run passes WG_PEERD_TEST_KERNEL_TIMEOUT, default 3600, and is
# killed after run.sh printed where it hung; or the guest dies) is a FAILED test named after the
# test or hook it stopped in, and what failed before it stays failed (mocha's progress file,
# MOCHA_PROGRESS_FILE: test/support/reporter.js). With WG_PEERD_TEST_KERNEL_RERUN=1 the kernel's
# suite then runs once more in a fresh VM for the diagnosis; its failures are added, never
# subtracted (scripts/vm/kernel-summary.js). Each unfinished run is named again in the very last
# lines.
# Per kernel it prints its version, counts, duration and the titles of its failed tests.
# Exit status: 0 when every kernel's run passed, else 1.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
say() { printf 'test:kernel: %s\n' "$*" >&2; }

summary="${MOCHA_SUMMARY_FILE:-}"
if [ -n "$summary" ]; then rm -f "$summary"; fi

base_dir="$VM_DIR"
read -r -a kernels <<<"${WG_PEERD_VM_KERNELS:-stock backports}"
[ "${#kernels[@]}" -gt 0 ] || { say "WG_PEERD_VM_KERNELS names no kernel"; exit 2; }
for k in "${kernels[@]}"; do
  case "$k" in stock | backports) ;; *) say "unknown kernel '$k' in WG_PEERD_VM_KERNELS (stock, backports)"; exit 2 ;; esac
done

npm run build

out="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-kernel-tests.XXXXXX")"
trap 'rm -rf "$out"' EXIT

cmd='MOCHA_SUMMARY_FILE="$OUT_DIR/mocha-summary.json" MOCHA_PROGRESS_FILE="$OUT_DIR/mocha-progress.json"'
# node --single-threaded-gc, as `npm start` runs the daemon (under single-threaded TCG the GC
# threads bring no parallelism, only cross-thread waits). The suite's past hangs (mocha's main
# thread in futex_wait, in "adds 1,000 peers in one call") were not the VM's: gdb in the hang
# report (init.sh) showed Node's own deadlock in the tests' randomPublicKey (test/support/keys.ts).
cmd+=' exec node --single-threaded-gc ./node_modules/mocha/bin/mocha.js --config .mocharc.kernel.json'
for a in "$@"; do cmd+=" $(q "$a")"; done

# Bounds of a kernel's VM run. A test that makes no progress for WG_PEERD_TEST_KERNEL_STALL
# seconds (default 1000: above the suite's longest single timeout, 900 s, after which mocha itself
# fails the test and goes on) means the guest stopped scheduling the test or its event loop never
# came back: run.sh then prints its hang report (vCPU samples, every task's state and kernel
# stack) and kills the VM. WG_PEERD_TEST_KERNEL_TIMEOUT (default 3600 s) bounds the whole run as
# well. The two kernels' suites run side by side (below): 37 minutes each on this 2-core build
# machine (2026-11-27), where one alone took 29-34. A hang then costs CI at most the stall bound
# beyond the run it stopped, never a second suite.
# Such a run is a failure, named with the test it stopped in (mocha's progress file), and what
# failed before it stays failed. WG_PEERD_TEST_KERNEL_RERUN=1 then runs the suite once more in a
# fresh VM, for the diagnosis only (hang again, or only now and then), never to make the run green;
# it is off by default: CI's 90 minutes do not hold a third suite (stop 25's CI ran out of them).
vm_timeout="${WG_PEERD_TEST_KERNEL_TIMEOUT:-3600}"
vm_stall="${WG_PEERD_TEST_KERNEL_STALL:-1000}"
rerun="${WG_PEERD_TEST_KERNEL_RERUN:-0}"

# Kernels side by side: each VM is one single-threaded TCG process (one host core), so a 2-core
# machine runs both kernels' suites in the time of one. WG_PEERD_VM_PARALLEL (default: the
# number of cores) above 1 runs them all at once (there are two at most); 1 runs them one after
# the other. Each line of a kernel's output is then prefixed with [stock] or [backports].
cores="$(nproc 2>/dev/null || echo 1)"
parallel="${WG_PEERD_VM_PARALLEL:-$cores}"
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { say "WG_PEERD_VM_PARALLEL must be a positive whole number"; exit 2; }
if [ "$parallel" -gt "${#kernels[@]}" ]; then parallel="${#kernels[@]}"; fi

codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"

# run_kernel K DIR KVER MOCHA-ARGS...: kernel K's suite, then its reboot pair; leaves
# $out/K/mocha-summary.json, $out/K/rc (0 when every run passed) and $out/K/seconds.
run_kernel() {
  local k="$1" dir="$2" kver="$3" kout="$out/$1" start=$SECONDS rc=0 attempt overall=0
  shift 3
  local runs=()
  for attempt in 1 2; do
    rc=0
    rm -f "$kout/mocha-summary.json" "$kout/mocha-progress.json"
    WG_PEERD_VM_DIR="$dir" "$HERE/run.sh" --timeout "$vm_timeout" \
      --stall "$kout/mocha-progress.json:$vm_stall" --out "$kout" \
      -e "WG_PEERD_TEST_KERNEL=$kver" -- "$cmd" || rc=$?
    runs+=("$kout/run-$attempt.json")
    if [ -s "$kout/mocha-summary.json" ]; then
      cp "$kout/mocha-summary.json" "$kout/run-$attempt.json"
      break
    fi
    node "$HERE/kernel-summary.js" stopped "$kout/mocha-progress.json" "$kver" "$attempt" "$rc" \
      "$vm_timeout s, or $vm_stall s without a test ending" >"$kout/run-$attempt.json"
    say "kernel $kver: $(node -p 'JSON.parse(process.argv[1]).unfinished[0]' "$(cat "$kout/run-$attempt.json")")"
    # 124: run.sh killed a VM that ran out of time; 125: the guest never reported a status.
    if [ "$attempt" = 1 ] && [ "$rerun" = 1 ] && { [ "$rc" = 124 ] || [ "$rc" = 125 ]; }; then
      say "kernel $kver: that is a failure of this run; running the whole suite once more in a fresh VM (WG_PEERD_TEST_KERNEL_RERUN=1), to tell a steady hang from an occasional one."
      continue
    fi
    break
  done
  node "$HERE/kernel-summary.js" merge "${runs[@]}" >"$kout/mocha-summary.json"
  say "kernel $kver: VM run took $((SECONDS - start)) s (exit status $rc)"
  if [ "$rc" -ne 0 ]; then overall=1; fi
  WG_PEERD_VM_DIR="$dir" "$HERE/test-reboot.sh" --kernel "$kver" --add-to "$kout/mocha-summary.json" "$@" || overall=1
  echo "$overall" >"$kout/rc"
  echo "$((SECONDS - start))" >"$kout/seconds"
}

# Prepare every kernel first, one at a time (apt downloads and initramfs builds), then run.
declare -A kdir kver_of
for k in "${kernels[@]}"; do
  dir="$base_dir"
  release=""
  if [ "$k" = backports ]; then
    dir="$base_dir/backports"
    [ -n "$codename" ] || { say "no VERSION_CODENAME in /etc/os-release: cannot name the backports release"; }
    release="${codename:-unknown}-backports"
  fi
  mkdir -p "$out/$k"
  if WG_PEERD_VM_DIR="$dir" WG_PEERD_VM_KERNEL_RELEASE="$release" "$HERE/prepare.sh"; then
    kdir[$k]="$dir"
    kver_of[$k]="$(. "$dir/current.env" && echo "$VM_KVER")"
  else
    say "kernel $k: prepare.sh failed; counted as 1 failure"
    echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$k] the kernel could not be prepared\"]}" >"$out/$k/mocha-summary.json"
    echo 1 >"$out/$k/rc"
    echo 0 >"$out/$k/seconds"
    kver_of[$k]="(not prepared)"
  fi
done

say "running ${#kernels[@]} kernel(s), $parallel at a time"
for k in "${kernels[@]}"; do
  [ -n "${kdir[$k]:-}" ] || continue
  echo >&2
  say "=== kernel ${kver_of[$k]} ($k) ==="
  if [ "$parallel" -gt 1 ]; then
    # Line-buffered prefixes keep the two suites' lines whole and tell them apart.
    (run_kernel "$k" "${kdir[$k]}" "${kver_of[$k]}" "$@" 2>&1 | sed -u "s/^/[$k] /") &
  else
    run_kernel "$k" "${kdir[$k]}" "${kver_of[$k]}" "$@"
  fi
done
wait

report=()
overall=0
for k in "${kernels[@]}"; do
  if [ "$(cat "$out/$k/rc" 2>/dev/null || echo 1)" != 0 ]; then overall=1; fi
  if [ ! -s "$out/$k/mocha-summary.json" ]; then
    echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$k] the kernel's run wrote no summary\"]}" >"$out/$k/mocha-summary.json"
  fi
  report+=("$k|${kver_of[$k]}|$(cat "$out/$k/seconds" 2>/dev/null || echo 0)")
done

# One summary over all kernels; per kernel a line with its counts and failures; the runs that did
# not reach their end last, so that they are what a reader of the output's end sees.
totals="$(node "$HERE/kernel-summary.js" total "$out" "${report[@]}")"
say "all kernels: $(node -p 'const t = JSON.parse(process.argv[1]); `${t.passed} passed, ${t.failed} failed, ${t.skipped} skipped`' "$totals")"
node -e 'for (const line of JSON.parse(process.argv[1]).unfinished ?? []) console.error(`test:kernel: FAILED, did not reach its end: ${line}`)' "$totals"
if [ -n "$summary" ]; then
  mkdir -p "$(dirname "$summary")"
  echo "$totals" >"$summary"
fi
if [ "$(node -p 'JSON.parse(process.argv[1]).failed' "$totals")" -gt 0 ]; then overall=1; fi
exit "$overall"
