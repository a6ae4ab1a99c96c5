#!/bin/sh
# npm's "prepare" (run by `npm ci`, `npm install` and `npm pack` in a checkout): builds dist/ with
# TypeScript. `npm ci --omit=dev` has no TypeScript (a dev dependency): it keeps a dist/ that is
# already built; without one it stops the install with one line that says what to run (issue 32:
# it used to exit 0, and `npm start` then died with MODULE_NOT_FOUND).
set -e
if [ -x node_modules/.bin/tsc ]; then
  exec npm run build
fi
if [ -f dist/src/main.js ]; then
  echo "wg-peerd: TypeScript is not installed (--omit=dev): keeping the built dist/"
  exit 0
fi
echo "wg-peerd: dist/ is not built and TypeScript, a dev dependency, is not installed (--omit=dev):" \
  "run \`npm ci\` (with the dev dependencies), or install the release tarball (README, Install)" >&2
exit 1
