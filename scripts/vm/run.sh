#!/usr/bin/env bash
# Boot the throw-away test VM, run one command in it as root, power it off.
#
#   scripts/vm/run.sh [--out HOSTDIR] [--timeout SECONDS] [--stall FILE:SECONDS] [--cwd DIR]
#                     [-e NAME=VALUE]... [--live] -- CMD...
#
# CMD runs through `sh -c` in the guest, chrooted into the host's own root file system (read-only),
# with cwd = DIR (default: the repository, same absolute path as on the host) and the environment
#   PATH, HOME=/tmp, TERM=dumb, LANG=C.UTF-8, npm_config_update_notifier=false, WG_PEERD_VM=1,
#   OUT_DIR=/run/vm/out (a writable export: files written there appear in HOSTDIR),
#   and every NAME=VALUE given with -e.
# A single CMD argument is a shell script ("cd x && make"); several are one command line whose
# arguments are quoted as given (like exec).
# /tmp and /run are fresh tmpfs in the guest; everything else is the host's, read-only. The
# repository is a snapshot taken when run.sh starts (see below), or with --live the host's live view.
#
# The guest's stdout and stderr are streamed to this script's stdout and stderr while it runs.
# Exit status: the guest command's; 124 when the timeout (default: WG_PEERD_VM_TIMEOUT, else 1800 s)
# killed the VM (first a hang report is printed and kept as HOSTDIR/hang-report.txt: where each
# vCPU is, from QEMU's monitor; every task's state, kernel stack and system call, and the kernel's
# backtrace of every CPU, from the guest);
# 125 when the guest never reported a status (the last lines of its console are printed then).
# --stall FILE:SECONDS (FILE under HOSTDIR, e.g. mocha's progress file) counts as running out of
# time, with the same report and status 124, when FILE has not changed for SECONDS (or, before it
# exists, SECONDS have passed since the start): a hang is told within SECONDS of the last sign of
# progress, however long the whole run may take.
#
# Environment: WG_PEERD_VM_DIR (default <repo>/.vm), WG_PEERD_VM_ACCEL (default tcg,thread=single:
# multi-threaded TCG crashed node in the guest in 9 of 100 stress runs (SIGSEGV, SIGILL, wasm
# `unreachable`), single-threaded in 0 of 75;
# "kvm" where /dev/kvm works), WG_PEERD_VM_CPU (default max), WG_PEERD_VM_MEM (MiB, default 1024),
# WG_PEERD_VM_SMP (default 2), WG_PEERD_VM_APPEND (extra kernel command line; "vm.debug" traces
# the guest init on the console), WG_PEERD_VM_KEEP=1 (keep the control directory: console log,
# job script; for debugging), WG_PEERD_VM_TIMEOUT (default of --timeout).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  sed -n '2,/^\. "\$(dirname/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  printf 'run.sh: %s\n' "$*" >&2
  exit 125
}

out_dir=""
timeout_s="${WG_PEERD_VM_TIMEOUT:-1800}"
stall_file=""
stall_s=0
cwd="$REPO"
envs=()
snapshot="${WG_PEERD_VM_SNAPSHOT:-1}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out_dir="${2:?--out needs a directory}"; shift 2 ;;
    --out=*) out_dir="${1#--out=}"; shift ;;
    --timeout) timeout_s="${2:?--timeout needs seconds}"; shift 2 ;;
    --timeout=*) timeout_s="${1#--timeout=}"; shift ;;
    --stall) stall_file="${2%:*}"; stall_s="${2##*:}"; shift 2 ;;
    --cwd) cwd="${2:?--cwd needs a directory}"; shift 2 ;;
    --cwd=*) cwd="${1#--cwd=}"; shift ;;
    -e | --env) envs+=("${2:?-e needs NAME=VALUE}"); shift 2 ;;
    --live) snapshot=0; shift ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || usage
[[ "$timeout_s" =~ ^[0-9]+$ ]] || die "--timeout must be a whole number of seconds"
[[ "$stall_s" =~ ^[0-9]+$ ]] || die "--stall wants FILE:SECONDS"
for e in "${envs[@]+"${envs[@]}"}"; do
  [[ "$e" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "-e wants NAME=VALUE, got: $e"
done

if [ $# -eq 1 ]; then
  cmd="$1"
else
  cmd=""
  for a in "$@"; do cmd+="$(q "$a") "; done
fi

[ -f "$VM_DIR/current.env" ] || die "the VM is not prepared: run scripts/vm/prepare.sh first"
# shellcheck source=/dev/null
. "$VM_DIR/current.env"
for f in "$VM_KERNEL" "$VM_INITRD" "$VM_MODULES"; do
  [ -e "$f" ] || die "$f is missing: run scripts/vm/prepare.sh"
done
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: run scripts/vm/prepare.sh"

cwd="$(cd "$cwd" && pwd -P)" || die "no such directory: $cwd"
# The guest mounts fresh tmpfs on /tmp and /run. A working directory under them (a CI checkout in
# /tmp, say) is exported on its own and mounted back at the same path after those tmpfs mounts.
work_export=()
case "$cwd/" in
  /proc/* | /sys/* | /dev/*) die "$cwd is hidden in the guest" ;;
  /tmp/* | /run/*)
    work_export=(-virtfs "local,path=$cwd,mount_tag=work,security_model=passthrough,readonly=on,multidevs=remap")
    ;;
esac

ctl=""
qemu_pid=""
cleanup() {
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$qemu_pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$qemu_pid" 2>/dev/null; then kill -9 "$qemu_pid" 2>/dev/null || true; fi
  fi
  if [ -z "$ctl" ]; then
    return
  elif [ "${WG_PEERD_VM_KEEP:-0}" = 1 ]; then
    echo "run.sh: kept $ctl" >&2
  else
    rm -rf "$ctl"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ctl="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-vm.XXXXXX")"
chmod 755 "$ctl"
if [ -z "$out_dir" ]; then
  out_dir="$ctl/out"
fi
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd -P)"

{
  echo "cd $(q "$cwd") || exit 125"
  for e in "${envs[@]+"${envs[@]}"}"; do
    echo "export ${e%%=*}=$(q "${e#*=}")"
  done
  echo "exec /bin/sh -c $(q "$cmd")"
} >"$ctl/job.sh"
if [ "${#work_export[@]}" -gt 0 ]; then printf '%s\n' "$cwd" >"$ctl/work-path"; fi
: >"$ctl/stdout"
: >"$ctl/stderr"

# The repository snapshot: a copy of the repository (without .git and .vm) appended to the
# initramfs as an uncompressed cpio archive (about 1 s here, 3-5 s of unpacking in the guest). The
# kernel unpacks it into RAM and the guest's init mounts it read-only over the live 9p view of the
# repository: a concurrent `npm run build` in the same checkout cannot change the files under a
# running test, and node loads the project's modules about twice as fast as over 9p. --live (or
# WG_PEERD_VM_SNAPSHOT=0) uses the live 9p view instead (quicker boot, for one-off commands).
initrd="$VM_INITRD"
cmdline_snapshot=""
if [ "$snapshot" != 0 ]; then
  case "$REPO" in
    *[[:space:]]*) die "the repository path has white space; use --live" ;;
    /bin/* | /sbin/* | /usr/* | /lib/* | /etc/* | /dev/* | /proc/* | /sys/* | /host/* | /modules/*)
      die "the repository path $REPO collides with the initramfs; use --live" ;;
  esac
  initrd="$ctl/initrd.img"
  cp "$VM_INITRD" "$initrd"
  # The kernel reads an uncompressed cpio appended to a compressed one only at a 4-byte boundary;
  # the zeros in between are skipped.
  truncate -s %4 "$initrd"
  (
    cd /
    # The kernel creates no missing parent directories: list the repository's ancestors first.
    parent="$(dirname "${REPO#/}")"
    ancestors=()
    while [ "$parent" != . ]; do
      ancestors=("$parent" "${ancestors[@]+"${ancestors[@]}"}")
      parent="$(dirname "$parent")"
    done
    {
      if [ "${#ancestors[@]}" -gt 0 ]; then printf '%s\n' "${ancestors[@]}"; fi
      find "${REPO#/}" \( -path "${REPO#/}/.git" -o -path "${REPO#/}/.vm" \) -prune -o \
        \( -type f -o -type d -o -type l \) -print
    } | cpio --quiet -o -H newc -R 0:0
  ) >>"$initrd" || die "cannot pack the repository snapshot"
  cmdline_snapshot=" vm.snapshot=$REPO"
fi

# Besides the essentials, the command line drops what only slows a TCG boot: CPU mitigations,
# AppArmor/IMA, audit, the PS/2 keyboard, the lockup watchdogs. random.trust_cpu seeds the RNG at
# once (wg genkey never waits for entropy). Not tsc=reliable: on a loaded host the TSC calibration
# can be off, and only the clocksource watchdog then keeps the guest's clock honest (timeouts and
# rate measurements of the tests depend on it).
cmdline="console=ttyS0 quiet loglevel=0 panic=-1 random.trust_cpu=on mitigations=off"
cmdline+=" lsm=capability audit=0 i8042.noaux i8042.nokbd nowatchdog"
# nokaslr: the kernel sits at the same addresses on every boot, so a hung guest's instruction
# pointers can be named from outside with a kallsyms copy of an earlier boot (cpu-samples.js).
cmdline+=" nokaslr"
cmdline+="$cmdline_snapshot ${WG_PEERD_VM_APPEND:-}"
qemu-system-x86_64 \
  -M q35 -accel "${WG_PEERD_VM_ACCEL:-tcg,thread=single}" -cpu "${WG_PEERD_VM_CPU:-max}" \
  -m "${WG_PEERD_VM_MEM:-1024}" -smp "${WG_PEERD_VM_SMP:-2}" \
  -nographic -nodefaults -no-user-config -no-reboot \
  -serial "file:$ctl/console.log" -monitor "unix:$ctl/monitor.sock,server=on,wait=off" \
  -kernel "$VM_KERNEL" -initrd "$initrd" \
  -append "$cmdline" \
  -virtfs "local,path=/,mount_tag=host,security_model=passthrough,readonly=on,multidevs=remap" \
  -virtfs "local,path=$VM_MODULES,mount_tag=modules,security_model=passthrough,readonly=on" \
  -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none" \
  -virtfs "local,path=$out_dir,mount_tag=out,security_model=none" \
  "${work_export[@]+"${work_export[@]}"}" \
  </dev/null >"$ctl/qemu.log" 2>&1 &
qemu_pid=$!

# Stream what the guest wrote to ctl/NAME since the last look to file descriptor FD: stream NAME FD.
declare -A sent=([stdout]=0 [stderr]=0)
stream() {
  local size
  size="$(stat -c %s "$ctl/$1" 2>/dev/null || echo 0)"
  if [ "$size" -gt "${sent[$1]}" ]; then
    tail -c "+$((sent[$1] + 1))" "$ctl/$1" | head -c "$((size - sent[$1]))" >&"$2" || true
    sent[$1]="$size"
  fi
}

# Before a VM that ran out of time is killed: where its vCPUs are (QEMU's monitor, cpu-samples.js),
# then where its tasks are (the guest's init writes that on request: init.sh, hang_report). Both are
# printed here and kept as OUT/hang-report.txt. The guest's /proc/kallsyms, which the init writes
# beside its report, is kept per kernel in the VM directory, so that the vCPU samples of a guest too
# wedged to answer can still be named (nokaslr: every boot of a kernel has the same addresses).
hang_report() {
  local kallsyms="$VM_DIR/kallsyms-$VM_KVER"
  # Bounded: a monitor that does not answer must not keep the VM from being killed.
  timeout 30 node "$HERE/cpu-samples.js" sample "$ctl/monitor.sock" 20 >"$ctl/cpu-samples" || true
  : >"$ctl/report-request"
  local waited=0
  while [ ! -s "$ctl/hang-report" ] && [ "$waited" -lt 60 ] && kill -0 "$qemu_pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
  done
  if [ -s "$ctl/kallsyms" ]; then cp "$ctl/kallsyms" "$kallsyms.tmp" && mv "$kallsyms.tmp" "$kallsyms"; fi
  {
    echo "run.sh: the VM ran out of time ($out_of_time); where it was before it was killed:"
    node "$HERE/cpu-samples.js" print "$ctl/cpu-samples" "$kallsyms" || true
    if [ -s "$ctl/hang-report" ]; then
      tr -d '\r' <"$ctl/hang-report"
    else
      echo "the guest wrote no report within ${waited} s: its kernel no longer runs the init's watcher"
    fi
  } >"$out_dir/hang-report.txt" 2>&1
  head -n 400 "$out_dir/hang-report.txt" >&2
  echo "run.sh: (the hang report is kept as $out_dir/hang-report.txt)" >&2
}

start=$SECONDS
start_epoch="$(date +%s)"
timed_out=0
out_of_time=""
# Seconds since FILE last changed (since the start while it does not exist); looked at about every
# 10 s (two forks each time: the loop below shares the host's cores with the VMs).
quiet_for() {
  local mtime
  mtime="$(stat -c %Y "$1" 2>/dev/null || echo "$start_epoch")"
  echo $(($(date +%s) - mtime))
}
while kill -0 "$qemu_pid" 2>/dev/null; do
  stream stdout 1
  stream stderr 2
  if [ $((SECONDS - start)) -ge "$timeout_s" ]; then
    out_of_time="${timeout_s} s"
  elif [ -n "$stall_file" ] && [ "$stall_s" -gt 0 ] && [ $((SECONDS % 10)) = 0 ] &&
    [ "$(quiet_for "$stall_file")" -ge "$stall_s" ]; then
    out_of_time="no change of $(basename "$stall_file") for ${stall_s} s"
  fi
  if [ -n "$out_of_time" ]; then
    timed_out=1
    hang_report
    kill "$qemu_pid" 2>/dev/null || true
    break
  fi
  sleep 0.5
done
qemu_rc=0
wait "$qemu_pid" 2>/dev/null || qemu_rc=$?
qemu_pid=""
stream stdout 1
stream stderr 2

console_tail() {
  if [ -s "$ctl/init-error" ]; then echo "guest init: $(cat "$ctl/init-error")" >&2; fi
  if [ -s "$ctl/qemu.log" ]; then sed 's/^/qemu: /' "$ctl/qemu.log" | tail -n 20 >&2; fi
  if [ -s "$ctl/console.log" ]; then
    echo "--- last lines of the guest console ---" >&2
    tr -d '\r' <"$ctl/console.log" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' | tail -n 40 >&2
  fi
}

if [ "$timed_out" = 1 ]; then
  echo "run.sh: timed out ($out_of_time, after $((SECONDS - start)) s); the VM was killed" >&2
  console_tail
  exit 124
fi
if [ ! -s "$ctl/status" ]; then
  echo "run.sh: the guest never reported an exit status (qemu exited with $qemu_rc)" >&2
  console_tail
  exit 125
fi
status="$(cat "$ctl/status")"
[[ "$status" =~ ^[0-9]+$ ]] || die "the guest reported a malformed status: $status"
exit "$status"
