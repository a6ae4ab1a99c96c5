#!/bin/bash
# readme-blocks.sh README DIR: writes each README block marked for the walkthrough to
# DIR/NNN.KIND[.CHECK].sh, in order. A marker is an HTML comment right above a code fence:
#   <!-- walkthrough: KIND[, check: NAME] -->
set -euo pipefail
readme="${1:?usage: readme-blocks.sh README DIR}"
dir="${2:?usage: readme-blocks.sh README DIR}"
mkdir -p "$dir"
count=0
kind=""
check=""
inside=0
marker='^<!-- walkthrough: *([a-z]+)(, *check: *([a-z]+))? *-->$'
while IFS= read -r line; do
  if [ "$inside" -eq 1 ]; then
    if [[ $line == '```'* ]]; then inside=0; kind=""; else printf '%s\n' "$line" >>"$file"; fi
  elif [[ $line =~ $marker ]]; then
    kind="${BASH_REMATCH[1]}"
    check="${BASH_REMATCH[3]}"
  elif [ -n "$kind" ] && [[ $line == '```'* ]]; then
    inside=1
    count=$((count + 1))
    file="$(printf '%s/%03d.%s%s.sh' "$dir" "$count" "$kind" "${check:+.$check}")"
    : >"$file"
  elif [ -n "$line" ]; then
    kind="" # a marker belongs to the fence right below it
  fi
done <"$readme"
