#!/usr/bin/env bash
# Fetches the cl100k_base ranks (the tokenizer of the DIFF Transformer paper)
# into data/tiktoken/cl100k_base.tiktoken, the standard tiktoken rank format
# (base64 token, space, rank, one per line). Nothing happens when the file is
# already there and whole.
#
# Source: the npm package tiktoken (pinned below), fetched with `npm pack`
# (no install, no node_modules). It ships the ranks in
# package/encoders/cl100k_base.json as one string, "! 0 TOKEN TOKEN ...":
# a placeholder, the rank of the first token, then the base64 tokens in rank
# order. This script rewrites that as "TOKEN RANK" lines and checks the
# result against the SHA-256 that tiktoken itself pins for OpenAI's
# cl100k_base.tiktoken, so the file is byte-identical to OpenAI's.
set -euo pipefail
VERSION=1.0.22
SHA256=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
cd "$(dirname "$0")/.."
dir=data/tiktoken
out=$dir/cl100k_base.tiktoken

have_ok() { [ -s "$out" ] && echo "$SHA256  $out" | sha256sum --check --status; }
have_ok && exit 0

me=fetch_tiktoken
. scripts/npm_pack_lib.sh
npm_pack_start
mkdir -p "$dir"
npm_pack "tiktoken@$VERSION"
tar -xzf "$tmp/tiktoken-$VERSION.tgz" -C "$tmp" package/encoders/cl100k_base.json
node -e '
const fs = require("fs");
const d = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const out = [];
for (const line of d.bpe_ranks.split("\n")) {
    if (!line) continue;
    const [, offset, ...tokens] = line.split(" ");
    tokens.forEach((t, i) => out.push(t + " " + (Number(offset) + i) + "\n"));
}
fs.writeFileSync(process.argv[2], out.join(""));
' "$tmp/package/encoders/cl100k_base.json" "$tmp/cl100k_base.tiktoken"
got=$(sha256sum "$tmp/cl100k_base.tiktoken" | cut -d" " -f1)
if [ "$got" != "$SHA256" ]; then
    echo "fetch_tiktoken: the extracted ranks have SHA-256 $got, expected $SHA256" >&2
    exit 1
fi
mv "$tmp/cl100k_base.tiktoken" "$out.tmp.$$"
mv "$out.tmp.$$" "$out"
echo "fetch_tiktoken: wrote $out ($(wc -l <"$out") ranks)" >&2
