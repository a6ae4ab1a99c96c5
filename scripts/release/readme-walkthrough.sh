#!/bin/bash
# readme-walkthrough.sh: does what the README tells a newcomer, block by block as written, on a
# fresh host, up to a client passing traffic through the tunnel. Run as root in the throw-away
# VM (scripts/vm/run.sh), never on a real host: it changes the firewall, IP forwarding and links.
#
# The README marks the blocks to run with an HTML comment right above the code fence:
#   <!-- walkthrough: KIND[, check: NAME] -->
# KIND: `server` runs the block with bash -e on the VPN host (this VM's root network namespace);
# `daemon` starts it in the background there and waits for /readyz (a daemon already running is
# stopped first with SIGINT, the Ctrl-C the README asks for before it); `client` runs it in the
# client's network namespace; `install` is not run here (the guest's /usr is read-only):
# scripts/release/check.sh ran that block on the host with npm's prefix set to a clean directory
# and passes it as WG_PEERD_PREFIX, whose bin/ comes first on PATH. `check:` names a check of this script run
# after the block (created, alive, deleted). All blocks run in README order in one directory.
#
# The machine around the README (not in it): the host's uplink `eth0` is 203.0.113.1/24, default
# route via 203.0.113.254, a router namespace `internet` that also holds 1.1.1.1 (a server on the
# internet) and a client namespace `client` (192.0.2.2, default route via the router). The
# router has no route to the VPN's 10.8.0.0/24: a client reaches 1.1.1.1 only through the
# tunnel, IP forwarding and the README's masquerade. IPv6 the same way (issue 32): the uplink has
# the global-looking 2001:db8:ffff::1/64, default route via the router's 2001:db8:ffff::fe, and
# the router holds 2606:4700:4700::1111 (an IPv6 server on the internet), with no route to the
# VPN's unique-local fd42:42:42::/64, and the client has no IPv6 but its tunnel: a client reaches
# that server only through the tunnel, IPv6 forwarding and the README's ip6 masquerade.
# `ping` is busybox's (the host has none). /var/lib is an empty tmpfs (the daemon's state dir
# goes there).
#
# Output: "ok N - ..." / "not ok N - ..." per block and check, then "N passed, N failed".
set -uo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
readme="${WG_PEERD_README:-$repo/README.md}"
prefix="${WG_PEERD_PREFIX:?WG_PEERD_PREFIX: the npm prefix the release tarball was installed into}"
work="$(mktemp -d /tmp/walkthrough.XXXXXX)"
export PATH="$prefix/bin:$work/bin:$PATH"
mkdir -p "$work/bin" "$work/blocks"
printf '#!/bin/sh\nexec busybox ping "$@"\n' >"$work/bin/ping"
chmod +x "$work/bin/ping"

n=0
failed=0
daemon_logs=()
result() { # result STATUS DESCRIPTION
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
}
stop_daemon() { # stop_daemon SIGNAL HOW: stops the running daemon block, if any
  if [ -n "${daemon_pid:-}" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    # The block's shell runs the daemon in the foreground: signal the daemon, as systemd
    # (SIGTERM) or the terminal's Ctrl-C (SIGINT) would.
    kill "-$1" $(pgrep -P "$daemon_pid")
    wait "$daemon_pid"
    result $? "the daemon stops on $2 with status 0"
  fi
  daemon_pid=""
}
finish() {
  stop_daemon TERM SIGTERM
  echo "$((n - failed)) passed, $failed failed"
  [ "$failed" -eq 0 ] && exit 0
  exit 1
}

# --- the machine -------------------------------------------------------------------------------
set -e
ip link set lo up
ip netns add internet
ip netns add client
ip link add eth0 type veth peer name up0 netns internet
ip addr add 203.0.113.1/24 dev eth0
ip link set eth0 up
ip route add default via 203.0.113.254
ip link add cl0 netns internet type veth peer name eth0 netns client
ip -n internet addr add 203.0.113.254/24 dev up0
ip -n internet addr add 192.0.2.1/24 dev cl0
ip -n internet addr add 1.1.1.1/32 dev lo
ip -n internet link set lo up
ip -n internet link set up0 up
ip -n internet link set cl0 up
ip netns exec internet sysctl -qw net.ipv4.ip_forward=1
ip -n client addr add 192.0.2.2/24 dev eth0
ip -n client link set lo up
ip -n client link set eth0 up
ip -n client route add default via 192.0.2.1
# nodad: the addresses are usable at once, not after duplicate address detection's second.
ip addr add 2001:db8:ffff::1/64 dev eth0 nodad
ip route add default via 2001:db8:ffff::fe dev eth0
ip -n internet addr add 2001:db8:ffff::fe/64 dev up0 nodad
ip -n internet addr add 2606:4700:4700::1111/128 dev lo
# The README's daemon keeps its state in /var/lib/wg-peerd. The guest's root is the host's,
# read-only: a fresh host's /var/lib is writable, so here it is a tmpfs of its own.
mount -t tmpfs -o mode=755 tmpfs /var/lib
set +e
[ "$(command -v wg-peerd)" = "$prefix/bin/wg-peerd" ]
result $? "wg-peerd on PATH is the installed copy ($prefix/bin/wg-peerd: $(wg-peerd --version))"
# What makes the IPv6 step a proof: neither the client nor the internet has a way to the other
# but the tunnel and the masquerade.
! ip netns exec client ip -6 route get 2606:4700:4700::1111 >/dev/null 2>&1 &&
  ! ip -n internet -6 route get fd42:42:42::2 >/dev/null 2>&1
result $? "the client has no IPv6 route to 2606:4700:4700::1111, the internet none to fd42:42:42::/64"

# --- the README's blocks -------------------------------------------------------------------------
# Each marked block becomes blocks/NNN.KIND[.CHECK].sh, in order.
"$(dirname "$0")/readme-blocks.sh" "$readme" "$work/blocks"
blocks=("$work"/blocks/*.sh)
[ -e "${blocks[0]}" ]
result $? "the README marks blocks to run (${#blocks[@]})"

api=http://127.0.0.1:8080
key() { node -p 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).peer.publicKey' "$work/peer.json"; }
list_status() { # the status of the created peer in GET /api/peers, "absent" when not listed
  curl -sf "$api/api/peers" | node -e '
    const list = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const peer = list.peers.find((p) => p.public_key === process.argv[1]);
    console.log(peer ? peer.status : "absent");' "$(key)"
}
run_check() {
  case "$1" in
    created)
      node -e '
        const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        if (r.success !== true || !/^\[Interface\]/.test(r.config)) process.exit(1);' "$work/peer.json" &&
        grep -q '^PrivateKey = ' "$work/client.conf"
      result $? "check created: peer.json is a successful create response and client.conf its config"
      ;;
    alive)
      local status
      status="$(list_status)"
      [ "$status" = ALIVE ]
      result $? "check alive: GET /api/peers lists the client's peer as ALIVE (got: $status)"
      ;;
    deleted)
      local status
      status="$(list_status)"
      [ "$status" = absent ]
      result $? "check deleted: GET /api/peers no longer lists the peer (got: $status)"
      ! ip netns exec client busybox ping -c 2 -W 2 10.8.0.1 >/dev/null 2>&1
      result $? "check deleted: the client's tunnel no longer passes traffic"
      ;;
    *) result 1 "unknown check '$1'" ;;
  esac
}

shown() { # runs a command and shows its output indented, so no line of it reads as a result
  local status
  "$@" >"$work/output" 2>&1
  status=$?
  sed 's/^/    /' "$work/output"
  if [ -n "$(tail -c 1 "$work/output")" ]; then echo; fi
  return "$status"
}

cd "$work"
for block in "${blocks[@]}"; do
  name="$(basename "$block" .sh)"
  kind="$(echo "$name" | cut -d. -f2)"
  check="$(echo "$name" | cut -d. -f3)"
  first="$(grep -m 1 -v '^\s*\(#.*\)\?$' "$block")"
  echo "--- README block ${name%%.*} ($kind): $first"
  case "$kind" in
    install)
      echo "    (run on the host by scripts/release/check.sh, with npm's prefix $prefix)"
      ;;
    server)
      shown bash -e "$block"
      result $? "block ${name%%.*} on the server: $first"
      ;;
    client)
      shown ip netns exec client bash -e "$block"
      result $? "block ${name%%.*} on the client: $first"
      ;;
    daemon)
      stop_daemon INT "Ctrl-C (SIGINT)"
      log="$work/daemon.$name.log" # each daemon's own, all read by the closing check
      daemon_logs+=("$log")
      bash -e "$block" >"$log" 2>&1 &
      daemon_pid=$!
      ready=1
      for _ in $(seq 1 180); do
        if curl -sf "$api/readyz" >/dev/null; then ready=0; break; fi
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 1
      done
      result $ready "block ${name%%.*} starts the daemon and it gets ready: $first"
      if [ "$ready" -ne 0 ]; then sed 's/^/    /' "$log"; fi
      ;;
    *) result 1 "block ${name%%.*}: unknown kind '$kind'" ;;
  esac
  if [ -n "$check" ]; then run_check "$check"; fi
done
stop_daemon TERM SIGTERM
! grep -q '"level":50\|"level":60' /dev/null "${daemon_logs[@]}"
result $? "the daemon logged no error (${#daemon_logs[@]} start(s))"
finish
