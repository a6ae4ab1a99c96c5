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
# MOCHA_SUMMARY_FILE: when set on the host, ONE {"passed":N,"failed":N,"skipped":N,"failures":[...]}
# summary summing every kernel's run is written there (a stale file is removed first), with
# "unfinished": [...] naming each VM run that did not reach the end of the suite. A kernel that
# cannot be prepared counts as one failed test: never a skip.
# A VM run that does not reach the end of the suite (it runs out of WG_PEERD_TEST_KERNEL_TIMEOUT,
# default 1800 s, and is killed after run.sh printed where it hung; or the guest dies) is a FAILED
# test named after the test or hook it stopped in, and what failed before it stays failed (mocha's
# progress file, MOCHA_PROGRESS_FILE: test/support/reporter.js). The kernel's suite then runs once
# more in a fresh VM for the diagnosis; its failures are added, never subtracted
# (scripts/vm/kernel-summary.js). Each unfinished run is named again in the very last lines.
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

# A kernel's whole suite took about 11 minutes in CI (6.1, 2026-11-26: its diagnosis rerun, the
# kernel's 2171 s less the 1200 s run, the reboot pair and the prepare) and 16 here (6.1, 80 tests,
# a loaded machine). That CI run's first VM was killed at 20 minutes in the suite's last file with
# nothing failed before: a hang or a stall, which its lines do not tell apart. The bound is now 30
# minutes, so that only a run stuck for well over twice the suite's time counts as a hang; CI's
# worst case with one (30 + its diagnosis rerun 11 + the other kernel 17 + the reboot pairs,
# release check and installs 15) stays near 75 of its 90 minutes. The VM is then
# killed after its hang report (run.sh: vCPU samples, every task's state and kernel stack). Mocha's
# own timeouts end any test whose promise never settles, and sh() kills a command after 240 s, so a
# VM that runs out of time is one whose guest stopped scheduling the test or whose event loop never
# came back, which the report shows.
# Such a run is a failure, named with the test it stopped in (mocha's progress file), and what
# failed before it stays failed; the suite then runs once more in a fresh VM, for the diagnosis
# only (hang again, or only now and then), never to make the run green.
vm_timeout="${WG_PEERD_TEST_KERNEL_TIMEOUT:-1800}"

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
  kout="$out/$k"
  mkdir -p "$kout"
  start=$SECONDS
  kver="(not prepared)"
  if WG_PEERD_VM_DIR="$dir" WG_PEERD_VM_KERNEL_RELEASE="$release" "$HERE/prepare.sh"; then
    kver="$(. "$dir/current.env" && echo "$VM_KVER")"
    echo >&2
    say "=== kernel $kver ($k) ==="
    runs=()
    for attempt in 1 2; do
      rc=0
      rm -f "$kout/mocha-summary.json" "$kout/mocha-progress.json"
      WG_PEERD_VM_DIR="$dir" "$HERE/run.sh" --timeout "$vm_timeout" --out "$kout" \
        -e "WG_PEERD_TEST_KERNEL=$kver" -- "$cmd" || rc=$?
      runs+=("$kout/run-$attempt.json")
      if [ -s "$kout/mocha-summary.json" ]; then
        cp "$kout/mocha-summary.json" "$kout/run-$attempt.json"
        break
      fi
      node "$HERE/kernel-summary.js" stopped "$kout/mocha-progress.json" "$kver" "$attempt" "$rc" \
        "$vm_timeout" >"$kout/run-$attempt.json"
      say "kernel $kver: $(node -p 'JSON.parse(process.argv[1]).unfinished[0]' "$(cat "$kout/run-$attempt.json")")"
      # 124: run.sh killed a VM that ran out of time; 125: the guest never reported a status.
      if [ "$attempt" = 1 ] && { [ "$rc" = 124 ] || [ "$rc" = 125 ]; }; then
        say "kernel $kver: that is a failure of this run; running the whole suite once more in a fresh VM, to tell a steady hang from an occasional one."
        continue
      fi
      break
    done
    node "$HERE/kernel-summary.js" merge "${runs[@]}" >"$kout/mocha-summary.json"
    say "kernel $kver: prepare and VM run took $((SECONDS - start)) s (exit status $rc)"
    if [ "$rc" -ne 0 ]; then overall=1; fi
    WG_PEERD_VM_DIR="$dir" "$HERE/test-reboot.sh" --kernel "$kver" --add-to "$kout/mocha-summary.json" "$@" || overall=1
  else
    say "kernel $k: prepare.sh failed; counted as 1 failure"
    echo "{\"passed\":0,\"failed\":1,\"skipped\":0,\"failures\":[\"[$k] the kernel could not be prepared\"]}" >"$kout/mocha-summary.json"
  fi
  report+=("$k|$kver|$((SECONDS - start))")
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
