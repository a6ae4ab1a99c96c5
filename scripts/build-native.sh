#!/bin/sh
# Builds the native addon (npm's "install" script). node-gyp needs Node's headers: they sit beside
# the node that runs this, under <prefix>/include/node, in Debian's nodejs and in nodejs.org
# builds, so point node-gyp there instead of letting it download them (build machines reach the
# package registries only, and a non-root user has no npm nodedir setting).
set -e
prefix="$(node -p "require('path').resolve(process.execPath, '..', '..')")"
if [ -f "$prefix/include/node/node_api.h" ]; then
  exec node-gyp rebuild --nodedir="$prefix"
fi
exec node-gyp rebuild
