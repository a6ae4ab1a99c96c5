#!/bin/sh
# Makes the prebuilt addon a release tarball carries (part of npm's "prepack", so `npm pack` runs
# it): prebuilds/<platform>-<arch>/wg-peerd.glibc.node, found at run time by node-gyp-build.
# --napi: one build serves every Node.js with Node-API 8 (binding.gyp's NAPI_VERSION);
# --tag-libc: a musl system does not take a glibc build and builds from source instead;
# --strip: no debug symbols in the package. It builds in a copy of the sources, so the
# checkout's own build/ stays. The headers are this node's own (see build-native.sh);
# prebuildify would otherwise download those of the newest Node.js.
set -e
rm -rf prebuilds
work="$(mktemp -d "${TMPDIR:-/tmp}/wg-peerd-prebuild.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -R package.json binding.gyp native "$work/"
prefix="$(node -p "require('path').resolve(process.execPath, '..', '..')")"
if [ -f "$prefix/include/node/node_api.h" ]; then
  export npm_config_nodedir="$prefix"
fi
prebuildify --cwd "$work" --napi --tag-libc --strip --target "$(node -p process.versions.node)"
mv "$work/prebuilds" prebuilds
ls prebuilds/*/*
