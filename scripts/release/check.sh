#!/bin/bash
# check.sh [SUMMARY_FILE]: the release check of .ci/run, as root on a Debian host.
#   1. `npm pack` makes the release tarball (built JavaScript + prebuilt addon);
#   2. scripts/release/install-without-compiler.sh installs it with `npm install -g` on a clean
#      Debian without a compiler and asks `wg-peerd --version` (issue 21, done-when 1);
#   3. the README's install block as written, in the tarball's directory, with npm's prefix
#      (npm_config_prefix) a clean directory instead of /usr; then DIR/bin/wg-peerd --version;
#   4. the tarball's prebuilt addon asks for no glibc symbol newer than 2.28 (objdump -T), and a
#      copy installed without a fitting prebuild fails to start with a line naming a command
#      that, run as written, builds an addon that loads (issue 32);
#   5. in the VM (stock kernel), scripts/release/readme-walkthrough.sh runs the README's blocks with
#      that installed copy: set-up, start, create, a client passing traffic through the tunnel,
#      list, delete.
# Every check prints "ok N - ..." or "not ok N - ..."; SUMMARY_FILE gets {"passed", "failed",
# "skipped"} as the mocha suites write it, for .ci/run's closing line. Exit status 1 when a check
# failed.
set -uo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
summary="${1:-}"
work="$(mktemp -d /var/tmp/wg-peerd-release.XXXXXX)" # /var/tmp: the VM sees the host's, not /tmp
trap 'rm -rf "$work"' EXIT
cd "$repo"

passed=0
failed=0
skipped=0
count() { # count FILE: adds up its "ok" / "not ok" lines
  local line
  while IFS= read -r line; do
    case "$line" in
      "ok "*"# SKIP"*) skipped=$((skipped + 1)) ;;
      "ok "*) passed=$((passed + 1)) ;;
      "not ok "*) failed=$((failed + 1)) ;;
    esac
  done <"$1"
}
one() { # one STATUS DESCRIPTION
  if [ "$1" -eq 0 ]; then echo "ok - $2"; passed=$((passed + 1)); else echo "not ok - $2"; failed=$((failed + 1)); fi
}
run_checks() { # run_checks WHAT COMMAND...: streams its output, counts its checks, and fails
  # once more when the command failed without saying "not ok" (it did not reach its end)
  local what="$1" before=$failed status
  shift
  "$@" 2>&1 | tee "$work/checks.log"
  status=${PIPESTATUS[0]}
  count "$work/checks.log"
  if [ "$status" -ne 0 ] && [ "$failed" -eq "$before" ]; then one 1 "$what ran to its end (status $status)"; fi
}
write_summary() {
  echo "release: $passed passed, $failed failed, $skipped skipped"
  if [ -n "$summary" ]; then
    printf '{"passed":%d,"failed":%d,"skipped":%d}\n' "$passed" "$failed" "$skipped" >"$summary"
  fi
  [ "$failed" -eq 0 ]
}

echo "--- npm pack"
npm pack --pack-destination "$work" >"$work/pack.log" 2>&1
status=$?
tarball="$(ls "$work"/wg-peerd-*.tgz 2>/dev/null | head -n 1)"
prebuild="$( [ -n "$tarball" ] && tar -tzf "$tarball" | grep '^package/prebuilds/linux-x64/.*\.node$')"
if [ "$status" -eq 0 ] && [ -n "$prebuild" ]; then
  one 0 "npm pack: $(basename "$tarball") with $prebuild"
else
  tail -n 30 "$work/pack.log"
  one 1 "npm pack makes a tarball with a prebuilt linux-x64 addon"
  write_summary
  exit 1
fi

echo "--- npm install -g on a Debian without a compiler"
run_checks install-without-compiler.sh scripts/release/install-without-compiler.sh "$tarball"

echo "--- the README's install block, with npm's prefix a clean directory (for the VM)"
prefix="$work/prefix"
scripts/release/readme-blocks.sh README.md "$work/blocks"
installs=("$work"/blocks/*.install.sh)
if [ -e "${installs[0]}" ]; then
  for block in "${installs[@]}"; do
    sed 's/^/    /' "$block"
    # As written, in the directory that holds the tarball; npm_config_prefix keeps it off /usr.
    (cd "$work" && npm_config_prefix="$prefix" PATH="$prefix/bin:$PATH" bash -e "$block") >"$work/install.log" 2>&1
    status=$?
    sed 's/^/    /' "$work/install.log" | tail -n 30
    one "$status" "the README's install block, npm's prefix $prefix"
  done
else
  one 1 "the README marks its install block (<!-- walkthrough: install -->)"
fi
version="$("$prefix/bin/wg-peerd" --version 2>&1)"
[ "$version" = "wg-peerd $(node -p 'require("./package.json").version')" ]
one $? "the installed wg-peerd --version answers: $version"

echo "--- the addon on older glibc, and the command its load failure names"
newest="$(tar -xzOf "$tarball" "$prebuild" >"$work/prebuild.node" &&
  objdump -T "$work/prebuild.node" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)"
[ -n "$newest" ] && [ "$(printf '%s\n2.28\n' "$newest" | sort -V | tail -n 1)" = 2.28 ]
one $? "the prebuilt addon asks for glibc ${newest:-?} at most (the oldest supported: 2.28)"
rebuild="$work/rebuild-prefix"
npm_config_prefix="$rebuild" npm install -g "$tarball" >"$work/rebuild.log" 2>&1
installed="$rebuild/lib/node_modules/wg-peerd"
rm -rf "$installed/prebuilds" "$installed/build" # as on a machine no prebuild fits
# The addon loads before anything else is opened; should it load after all, the state directory
# others may read stops the start before the kernel is touched.
mkdir -m 0755 "$work/exposed-state"
said="$("$rebuild/bin/wg-peerd" --state-dir "$work/exposed-state" 2>&1 >/dev/null | tail -n 1)"
command="$(sed -n 's/.*build it with `\([^`]*\)`.*/\1/p' <<<"$said")"
echo "    $said"
[ -n "$command" ] && (cd / && bash -c "$command") >>"$work/rebuild.log" 2>&1 &&
  node -e 'const { NativeTransport } = require(process.argv[1]); new NativeTransport(0).close()' \
    "$installed/dist/src/netlink/native.js"
status=$?
[ "$status" -eq 0 ] || tail -n 20 "$work/rebuild.log" | sed 's/^/    /'
one "$status" "without a fitting prebuild, the command the start names (${command:-none}) builds an addon that loads"

echo "--- the README, block by block, in the VM, with the installed copy"
if scripts/vm/prepare.sh >"$work/prepare.log" 2>&1; then
  run_checks "the walkthrough VM" scripts/vm/run.sh --timeout 900 -e "WG_PEERD_PREFIX=$prefix" \
    -- bash scripts/release/readme-walkthrough.sh
else
  tail -n 30 "$work/prepare.log"
  one 1 "scripts/vm/prepare.sh prepares the VM"
fi

write_summary
