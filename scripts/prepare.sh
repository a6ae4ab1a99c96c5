#!/bin/sh
# npm's "prepare" (run by `npm ci`, `npm install` and `npm pack` in a checkout): builds dist/ with
# TypeScript. `npm ci --omit=dev` has no TypeScript (a dev dependency): it installs the runtime
# dependencies and keeps a dist/ that is already built instead of failing.
set -e
if [ -x node_modules/.bin/tsc ]; then
  exec npm run build
fi
if [ -f dist/src/main.js ]; then
  echo "wg-peerd: TypeScript is not installed (--omit=dev): keeping the built dist/"
else
  echo "wg-peerd: TypeScript is not installed (--omit=dev) and dist/ is not built:" \
    "build it with \`npm ci && npm run build\`, or install the release tarball (README, Install)" >&2
fi
