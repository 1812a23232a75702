// Writes tests/fixtures/tokenizer/hf_cases.json: the ids Hugging Face's own
// tokenizers library (npm tokenizers, its Rust core) gives a varied sample
// of texts with each tokenizer.json of data/hf-tokenizers/
// (scripts/fetch_hf_tokenizers.sh). tests/io/tokenizer_hf_test.c checks that
// difftx encodes every case to the same ids. Run once, by hand (the fixture
// is committed; the tests need no node):
//
//   mkdir -p /tmp/hft && cd /tmp/hft && npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/hft/node_modules node tools/hf_tokenizer_fixtures.mjs [OUT]
//
// Texts: every case of tests/fixtures/tokenizer/cl100k_cases.json (prose,
// code, whitespace runs, every script, emoji, control characters, long
// repeats, random strings) and cases with each tokenizer's added tokens
// inside text. Per tokenizer and case: "special", the ids of
// encode(text, {addSpecialTokens: false}) (added tokens matched), and, where
// it differs, "ordinary": the ids with the special added tokens made
// unmatchable (tokenizers' split_special_tokens; difftx's
// DTX_ENCODE_ORDINARY): a special whose text is in the vocabulary is left out
// of added_tokens, any other gets a text no case holds, so that every other
// added token keeps its id (tokenizers numbers added tokens as it loads them).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
let version = "unknown";
for (let d = path.dirname(require.resolve("tokenizers")); d !== path.dirname(d); d = path.dirname(d)) {
  const pj = path.join(d, "package.json");
  if (existsSync(pj)) {
    const meta = JSON.parse(readFileSync(pj, "utf8"));
    if (meta.name === "tokenizers") { version = meta.version; break; }
  }
}
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = process.argv[2] ?? path.join(root, "tests/fixtures/tokenizer/hf_cases.json");
const names = ["gpt2", "gpt2-prefix", "llama3-style", "qwen2-style"];

const cases = JSON.parse(readFileSync(path.join(root, "tests/fixtures/tokenizer/cl100k_cases.json"), "utf8")).cases
  .map(({ name, bytes_b64 }) => ({ name, text: Buffer.from(bytes_b64, "base64").toString("utf8") }));
const add = (name, text) => cases.push({ name, text });
add("llama3 chat", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>");
add("llama3 reserved", "a<|reserved_special_token_5|>b<|reserved_special_token_39|><|reserved_special_token_3|>\n<|python_tag|>x=1<|eom_id|>");
add("qwen chat", "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nCall it<tool_call>{\"name\": \"f\"}</tool_call> [[cite]]x<|im_end|><|endoftext|>");
add("added lookalikes", "<|im_start <tool_call <|begin_of_text| [[cite] <|endoftext|><|endoftext|> <|fim_prefix|>");
add("added in words", "x<tool_call>y</tool_call>z [[cite]][[cite]] a<|im_end|>b");

const ids = (t, text) => t.encode(text, null, { addSpecialTokens: false }).then((e) => Array.from(e.getIds()));
const result = { generator: "tools/hf_tokenizer_fixtures.mjs", tokenizers: version, files: {}, cases: [] };
const toks = {};
for (const n of names) {
  const file = path.join(root, "data/hf-tokenizers", n, "tokenizer.json");
  const text = readFileSync(file, "utf8");
  const obj = JSON.parse(text);
  const plain = {
    ...obj,
    added_tokens: obj.added_tokens
      .filter((a) => !(a.special && a.content in obj.model.vocab))
      .map((a) => (a.special ? { ...a, content: `\u0001\u0002unmatched ${a.id}\u0003` } : a)),
  };
  toks[n] = { special: Tokenizer.fromString(text), ordinary: Tokenizer.fromString(JSON.stringify(plain)) };
  result.files[n] = (await import("node:crypto")).createHash("sha256").update(readFileSync(file)).digest("hex");
}
for (const { name, text } of cases) {
  const c = { name, bytes_b64: Buffer.from(text, "utf8").toString("base64"), ids: {} };
  for (const n of names) {
    const s = await ids(toks[n].special, text), o = await ids(toks[n].ordinary, text);
    c.ids[n] = JSON.stringify(s) === JSON.stringify(o) ? { special: s } : { special: s, ordinary: o };
  }
  result.cases.push(c);
}
writeFileSync(out, JSON.stringify(result).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
console.error(`wrote ${out}: ${cases.length} cases x ${names.length} tokenizers, tokenizers ${version}`);
