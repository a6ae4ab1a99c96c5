#!/usr/bin/env bash
# npm run record-transcripts [-- ARGS...]
#
# Builds, prepares the VM and runs `node dist/scripts/record-transcripts.js ARGS...` in it as root
# with OUT_DIR set; the recorder writes $OUT_DIR/transcripts/*.json, which are then copied into
# test/fixtures/transcripts/ (same names overwritten, others left alone). The committed
# transcripts come from this command, never from hand-written bytes.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

build_for record-transcripts dist/scripts/record-transcripts.js

out="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-transcripts.XXXXXX")"
trap 'rm -rf "$out"' EXIT

cmd='exec node dist/scripts/record-transcripts.js'
for a in "$@"; do cmd+=" $(q "$a")"; done
"$HERE/run.sh" --out "$out" -- "$cmd"

shopt -s nullglob
files=("$out"/transcripts/*.json)
if [ "${#files[@]}" -eq 0 ]; then
  echo "record-transcripts: the recorder wrote no \$OUT_DIR/transcripts/*.json" >&2
  exit 1
fi
dest="$REPO/test/fixtures/transcripts"
mkdir -p "$dest"
for f in "${files[@]}"; do
  cp "$f" "$dest/"
  echo "recorded test/fixtures/transcripts/$(basename "$f")"
done
