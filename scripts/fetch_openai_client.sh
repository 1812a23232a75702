#!/usr/bin/env bash
# Fetches OpenAI's official TypeScript/JavaScript client, the npm package
# openai (pinned below; no dependencies of its own), into data/npm/openai/,
# for the serving tests (tests/scripts/serve_test.sh drive difftx serve with
# it). Nothing happens when it is there already.
#
# `npm pack` (no install, no node_modules); the tarball is checked against
# the SHA-256 pinned here before it is unpacked.
set -euo pipefail
VERSION=6.30.1
SHA256=175f3e017a9bc14d36dc0f57d2596ee1c7134d7fa181b7d83b2716f69076b03e
cd "$(dirname "$0")/.."
dir=data/npm/openai
[ -s "$dir/VERSION" ] && [ "$(cat "$dir/VERSION")" = "$VERSION" ] && exit 0
me=fetch_openai_client
. scripts/npm_pack_lib.sh
npm_pack_start
npm_pack "openai@$VERSION"
if ! echo "$SHA256  $tmp/openai-$VERSION.tgz" | sha256sum --check --status; then
    echo "fetch_openai_client: openai-$VERSION.tgz does not have the pinned SHA-256 $SHA256" >&2
    exit 1
fi
tar -xzf "$tmp/openai-$VERSION.tgz" -C "$tmp"
echo "$VERSION" > "$tmp/package/VERSION"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
mv "$tmp/package" "$dir"
echo "fetch_openai_client: unpacked openai $VERSION into $dir" >&2
