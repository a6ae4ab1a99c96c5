#!/bin/busybox sh
# PID 1 of the test VM: prepare.sh copies this file into the initramfs as /init.
#
# It loads the virtio/9p modules, mounts the host's root file system (read-only, tag "host") on
# /host, the unpacked kernel's modules (tag "modules") over /host/lib/modules, and the two writable
# exports of run.sh: "ctl" (the job, its output, its status) on /host/run/vm/ctl and "out"
# (OUT_DIR) on /host/run/vm/out. It loads wireguard, then runs ctl/job.sh as root chrooted into
# /host with stdout/stderr written to ctl/stdout and ctl/stderr, writes the exit code to
# ctl/status and powers off. Output never goes through the serial console.

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

CTL=/host/run/vm/ctl

say() { echo "vm-init: $*" >/dev/console; }
# "vm.debug" on the kernel command line (WG_PEERD_VM_APPEND=vm.debug) traces the steps on the console.
case " $(cat /proc/cmdline) " in
  *" vm.debug "*) trace() { say "$*"; } ;;
  *) trace() { :; } ;;
esac
fail() {
  say "$*"
  if mountpoint -q "$CTL" 2>/dev/null; then echo "$*" >"$CTL/init-error"; fi
  sync
  poweroff -f
}

trace "loading modules"
while read -r m; do
  insmod "/modules/$m" || fail "insmod $m failed"
done </modules/order

# request_module() runs this helper in the initramfs' root; it delegates to the host's modprobe.
echo /sbin/vm-modprobe >/proc/sys/kernel/modprobe

mount9p() { # TAG DIR OPTIONS
  tries=0
  until mount -t 9p -o "trans=virtio,version=9p2000.L,msize=512000,$3" "$1" "$2" 2>/dev/null; do
    tries=$((tries + 1))
    [ "$tries" -lt 50 ] || fail "cannot mount the 9p export '$1' on $2"
    sleep 0.1
  done
}

trace "mounting"
# cache=loose: the host root is read-only for the whole run, and node starts in 0.4 s instead of 3-5 s.
mount9p host /host ro,cache=loose
mount -t proc proc /host/proc || fail "mount /host/proc"
mount -t sysfs sysfs /host/sys || fail "mount /host/sys"
mount -t devtmpfs devtmpfs /host/dev || fail "mount /host/dev"
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
ln -sf /proc/self/fd /host/dev/fd
ln -sf /proc/self/fd/0 /host/dev/stdin
ln -sf /proc/self/fd/1 /host/dev/stdout
ln -sf /proc/self/fd/2 /host/dev/stderr
mount -t tmpfs -o mode=1777 tmpfs /host/tmp || fail "mount /host/tmp"
mount -t tmpfs -o mode=755 tmpfs /host/run || fail "mount /host/run"
if [ -d /host/var/run ] && [ ! -L /host/var/run ]; then mount -t tmpfs tmpfs /host/var/run; fi
mkdir -p "$CTL" /host/run/vm/out
mount9p ctl "$CTL" rw,cache=none
mount9p out /host/run/vm/out rw,cache=none
[ -f "$CTL/job.sh" ] || fail "no job.sh in the ctl export"
# A working directory under /tmp or /run (hidden by the tmpfs above) comes as its own export.
if [ -f "$CTL/work-path" ]; then
  work="$(cat "$CTL/work-path")"
  mkdir -p "/host$work"
  mount9p work "/host$work" ro,cache=loose
fi
# vm.snapshot=DIR: run.sh appended a copy of the repository DIR to the initramfs (now under /DIR in
# the initramfs' RAM file system). Put it over the live 9p view, read-only: the run no longer sees
# concurrent rebuilds, and node loads the project's modules from RAM faster than over 9p.
snapshot="$(sed -n 's/.*[[:space:]]vm\.snapshot=\([^[:space:]]*\).*/\1/p' /proc/cmdline)"
if [ -n "$snapshot" ]; then
  [ -d "$snapshot" ] && [ -d "/host$snapshot" ] || fail "no snapshot of $snapshot in the initramfs"
  mount --bind "$snapshot" "/host$snapshot" || fail "cannot bind the snapshot of $snapshot"
  mount -o remount,ro,bind "/host$snapshot" || fail "cannot make the snapshot of $snapshot read-only"
fi
[ -d /host/lib/modules ] || fail "the host has no /lib/modules directory to mount the modules on"
mount9p modules /host/lib/modules ro,cache=loose

trace "modprobe wireguard"
hostname wg-peerd-vm
ip link set lo up
chroot /host /sbin/modprobe wireguard 2>"$CTL/init-error" || fail "modprobe wireguard: $(cat "$CTL/init-error")"
rm -f "$CTL/init-error"

# A hang report for run.sh, which asks for one (ctl/report-request) before it kills a VM that ran
# out of time: where every task of the guest is, in the kernel's own words. A job that hangs for
# half an hour is otherwise a SeaBIOS banner and nothing more (the console is quiet). It tells a
# node blocked in a child it waits for (wait4), a task stuck in the kernel (state D, its stack),
# and a CPU spinning (state R; sysrq-l backtraces every CPU) apart. It runs beside the job, so it
# answers as long as the guest still schedules; no answer says the guest itself is wedged.
hang_report() {
  echo "guest uptime $(cut -d' ' -f1 /proc/uptime) s, load $(cat /proc/loadavg)," \
    "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  for t in /proc/[0-9]*/task/[0-9]*; do
    [ -r "$t/stat" ] || continue
    pid="${t#/proc/}"
    pid="${pid%%/*}"
    # Fields after the ") " that ends comm: 1 state, ..., 12 utime, 13 stime (clock ticks).
    rest="$(sed 's/.*) //' "$t/stat" 2>/dev/null)"
    set -- $rest
    state="$1"
    cpu=$((${12:-0} + ${13:-0}))
    args="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
    # Kernel threads (no command line) only when they run or wait in state D.
    if [ -z "$args" ] && [ "$state" != R ] && [ "$state" != D ]; then continue; fi
    printf 'pid %s tid %s %s cpu %s ticks wchan %s syscall %s: %s [%s]\n' "$pid" "${t##*/}" "$state" \
      "$cpu" "$(cat "$t/wchan" 2>/dev/null)" "$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)" \
      "$(cat "$t/comm" 2>/dev/null)" "$args"
    case "$state" in R | D) sed 's/^/    /' "$t/stack" 2>/dev/null ;; esac
  done
  # Where each node thread is in user space: a task in futex_wait says only that it waits, not on
  # what (a lock, a condition variable, V8's job). The host's gdb, run in the job's root.
  if [ -x /host/usr/bin/gdb ]; then
    for p in /proc/[0-9]*; do
      [ "$(cat "$p/comm" 2>/dev/null)" = node ] || continue
      echo "--- user-space stacks of node pid ${p#/proc/} (gdb) ---"
      chroot /host /usr/bin/gdb -nx -batch -p "${p#/proc/}" -ex 'set pagination off' \
        -ex 'thread apply all bt 24' 2>&1 | grep -E '^(Thread|#)' | head -n 400
    done
  fi
  echo 1 >/proc/sys/kernel/sysrq
  echo l >/proc/sysrq-trigger # a backtrace of every CPU
  echo w >/proc/sysrq-trigger # the tasks blocked in state D
  sleep 1
  echo "--- kernel log: warnings and errors of the run ---"
  dmesg | grep -iE 'warn|bug|error|fail|hung|blocked|lockup|oom|killed|stall' | grep -v 'sysrq' | tail -n 40
  echo "--- kernel log: the backtraces asked for above ---"
  dmesg | sed -n '/sysrq: Show backtrace/,$p' | tail -n 250
}
(
  while [ ! -e "$CTL/report-request" ]; do sleep 2; done
  grep ' [tTwW] ' /proc/kallsyms >"$CTL/kallsyms" 2>/dev/null # names run.sh's vCPU samples
  hang_report >"$CTL/hang-report.tmp" 2>&1
  mv "$CTL/hang-report.tmp" "$CTL/hang-report"
) &

trace "running job"
env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/tmp \
  TERM=dumb \
  LANG=C.UTF-8 \
  npm_config_update_notifier=false \
  OUT_DIR=/run/vm/out \
  WG_PEERD_VM=1 \
  chroot /host /bin/sh /run/vm/ctl/job.sh >"$CTL/stdout" 2>"$CTL/stderr" </dev/null
echo "$?" >"$CTL/status.tmp"
trace "job done"
mv "$CTL/status.tmp" "$CTL/status"
sync
poweroff -f
