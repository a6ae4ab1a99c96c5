#!/bin/sh
# The native addon (npm's "install" script). A release tarball carries a prebuilt addon in
# prebuilds/linux-x64/ (made by `npm pack`, see scripts/prebuild.sh): when one loads on this
# machine (same platform, CPU and libc; Node-API 8, so any Node.js >= 20), nothing is compiled and
# no compiler is needed. Otherwise (a checkout, another CPU, musl, or
# `npm_config_build_from_source=true`) node-gyp builds it from native/ into build/Release/.
#
# node-gyp needs Node's headers: they sit beside the node that runs this, under
# <prefix>/include/node, in Debian's nodejs and in nodejs.org builds, so point node-gyp there
# instead of letting it download them (build machines reach the package registries only, and a
# non-root user has no npm nodedir setting).
set -e
if [ "${npm_config_build_from_source:-}" != "true" ] && [ -d prebuilds ] &&
  PREBUILDS_ONLY=1 node-gyp-build-test >/dev/null 2>&1; then
  # A build/ left by an earlier source build would come first at run time (node-gyp-build looks
  # there before prebuilds/): the prebuild that loads is the one to use.
  rm -rf build
  echo "wg-peerd: using the prebuilt netlink addon of prebuilds/ (nothing to compile)"
  exit 0
fi
prefix="$(node -p "require('path').resolve(process.execPath, '..', '..')")"
if [ -f "$prefix/include/node/node_api.h" ]; then
  exec node-gyp rebuild --nodedir="$prefix"
fi
exec node-gyp rebuild
