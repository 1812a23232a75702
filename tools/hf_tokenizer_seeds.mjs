// Small seeds for the tokenizer fuzz targets (scripts/fuzz.sh): each
// tokenizer.json of data/hf-tokenizers cut to the 256 byte tokens and its
// first 150 merges (GPT-2 numbers merge i's token 256 + i, so the ids stay
// dense), its added tokens renumbered after them as tokenizers would; and
// Llama 2's tokenizer.model cut to its first 600 pieces with its specs.
//   node tools/hf_tokenizer_seeds.mjs DATA_DIR JSON_OUT_DIR MODEL_OUT_DIR
import { readFileSync, writeFileSync, readdirSync, existsSync } from "node:fs";
import path from "node:path";

const [data, jsonOut, modelOut] = process.argv.slice(2);
for (const name of readdirSync(data)) {
  const file = path.join(data, name, "tokenizer.json");
  if (!existsSync(file)) continue;
  const t = JSON.parse(readFileSync(file, "utf8"));
  const ids = Object.entries(t.model.vocab);
  const keep = Object.fromEntries(ids.filter(([, id]) => id < 256 + 150));
  const size = Object.keys(keep).length;
  let next = size;
  t.model.vocab = keep;
  t.model.merges = t.model.merges.slice(0, 150);
  t.added_tokens = t.added_tokens.map((a) => ({ ...a, id: a.content in keep ? keep[a.content] : next++ }));
  writeFileSync(path.join(jsonOut, `${name}.json`), JSON.stringify(t));
}
// protobuf: copy the first 600 pieces (field 1) and the specs (fields 2, 3) as they are
const model = readFileSync(path.join(data, "llama2", "tokenizer.model"));
const varint = (b, p) => { let v = 0, s = 0, c; do { c = b[p++]; v += (c & 0x7f) * 2 ** s; s += 7; } while (c & 0x80); return [v, p]; };
const parts = [];
let pieces = 0;
for (let p = 0; p < model.length;) {
  const start = p;
  let tag, len;
  [tag, p] = varint(model, p);
  if ((tag & 7) !== 2) throw new Error("unexpected wire type in tokenizer.model");
  [len, p] = varint(model, p);
  p += len;
  const field = Math.floor(tag / 8);
  if ((field === 1 && pieces++ < 600) || field === 2 || field === 3) parts.push(model.subarray(start, p));
}
writeFileSync(path.join(modelOut, "llama2-600.model"), Buffer.concat(parts));
