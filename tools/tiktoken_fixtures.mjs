// Writes tests/fixtures/tokenizer/cl100k_cases.json: a varied sample of texts
// and the ids that tiktoken itself (npm tiktoken, cl100k_base) gives them.
// tests/io/tokenizer_test.c checks that difftx encodes every case to the same
// ids. Run once, by hand (the fixture is committed; the tests need no node):
//
//   mkdir -p /tmp/tt && cd /tmp/tt && npm install tiktoken@1.0.22
//   NODE_PATH=/tmp/tt/node_modules node tools/tiktoken_fixtures.mjs [OUT]
//
// Each case has: name; text (for people to read); bytes_b64 (the UTF-8 bytes,
// what the test encodes: JSON strings cannot hold every byte string C sees);
// special (true: encode(text, "all"), special tokens become their ids;
// false: encode_ordinary(text)); ids.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const require = createRequire(import.meta.url);
const { get_encoding } = require("tiktoken");
// package.json is not in the package's exports: find it beside the entry point.
const tiktokenMain = require.resolve("tiktoken");
let tiktokenVersion = "unknown";
for (let d = path.dirname(tiktokenMain); d !== path.dirname(d); d = path.dirname(d)) {
  const pj = path.join(d, "package.json");
  if (existsSync(pj)) {
    const meta = JSON.parse(readFileSync(pj, "utf8"));
    if (meta.name === "tiktoken") { tiktokenVersion = meta.version; break; }
  }
}

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const out = process.argv[2] ?? path.join(root, "tests/fixtures/tokenizer/cl100k_cases.json");

const cases = [];
const add = (name, text, special = false) => cases.push({ name, text, special });

// ---- prose, code, numbers
add("empty", "");
add("single letter", "a");
add("english prose",
  "The Differential Transformer amplifies attention to the relevant context while cancelling noise. " +
  "Specifically, the differential attention mechanism calculates attention scores as the difference " +
  "between two separate softmax attention maps. The subtraction cancels noise, promoting the emergence " +
  "of sparse attention patterns.\n\nExperimental results on language modeling show that DIFF Transformer " +
  "outperforms Transformer in various settings of scaling up model size and training tokens.");
add("c code", "#include <stdio.h>\n\nint main(void) {\n    for (int i = 0; i < 10; i++) {\n\t\tprintf(\"%d\\n\", i * i);\n    }\n    return 0; // done\n}\n");
add("python code", "def f(x, *args, **kwargs):\n    \"\"\"Docstring.\"\"\"\n    if x >= 0x1F and not args:\n        return [y ** 2 for y in range(x)]  # comment\n    raise ValueError(f'bad {x!r}')\n");
add("json", "{\"name\": \"difftx\", \"layers\": [1, 2, 3], \"lambda\": 0.8, \"ok\": true, \"nested\": {\"a\": null}}");
add("markdown and urls", "## Heading\n\n- item *one*\n- item **two** with `code`\n\nSee https://example.com/path?q=1&r=two#frag or mail someone@example.org.\n");
add("numbers", "0 1 12 123 1234 12345 123456 1234567890 3.14159 -2.5e-10 1,000,000 0xDEADbeef 2024-01-31 12:34:56 v1.2.3 100% $5 #42");
add("digit runs", "1234567890123456789012345678901234567890 and 99999999999");
add("other numerals", "Roman Ⅻ ⅷ, fractions ½ ¾, powers x² y³, Arabic-Indic ٠١٢٣٤٥٦٧٨٩, Devanagari १२३, Bengali ৪৫, circled ①②");

// ---- whitespace
add("space runs", "a b  c   d    e     f      g");
add("tabs and spaces", "\tindented\n\t\tmore\n    four\n  \t mixed \t\nend");
add("trailing spaces", "hello world   ");
add("leading spaces", "    leading");
add("only spaces", "        ");
add("only newlines", "\n\n\n\n");
add("spaces before newline", "line   \n   next  \n\n  \n last");
add("crlf", "first line\r\nsecond line\r\n\r\nthird\r\r\n\rfourth\n\r\n");
add("lone cr", "a\rb\r\rc\r");
add("unicode spaces", "no\u00a0break em\u2003space ideo\u3000space thin\u2009space nel\u0085next ls\u2028ps\u2029end");
add("nel runs", "a\u0085\u0085b \u0085 c\u0085\n d\u0085");
add("zero width and bom", "zero\u200bwidth\u200cnon\u200djoiner \ufeffbom word\u2060joiner");
add("vertical tab form feed", "a\u000bb\u000cc \u000b\u000c d");
// U+180E is \s for PCRE2 but not Unicode White_Space (tiktoken's \s); U+001C..1F neither
add("mongolian vowel separator", "x\u180e! \u180e\u180e  y a \u180e\n word\u180e word !\u180e\u180e. \u180e");
add("file separators", "a\u001cb \u001d\u001e c\u001f\n");

// ---- scripts
add("emoji", "I 👍🏽 this! Family: 👨‍👩‍👧‍👦, flags 🇫🇷🇯🇵, faces 😀😃😄😁, hearts ❤️💙, keycap 1️⃣");
add("chinese", "差分注意力机制通过计算两个softmax注意力图之间的差值来消除噪声。这是一个测试。");
add("japanese", "ひらがなとカタカナと漢字を混ぜた文章です。トランスフォーマーは注意機構を使います。");
add("korean", "안녕하세요, 세계! 차등 트랜스포머는 잡음을 줄입니다.");
add("arabic", "مرحبا بالعالم! هذا نص عربي مع أرقام ١٢٣ و 456.");
add("hebrew", "שלום עולם, זהו טקסט בעברית.");
add("hindi", "नमस्ते दुनिया। यह हिंदी में एक वाक्य है।");
add("thai", "สวัสดีชาวโลก นี่คือภาษาไทย");
add("cyrillic greek", "Привет, мир! Γειά σου Κόσμε! ΑΒΓ αβγ");
add("combining marks", "e\u0301 a\u0308 n\u0303 o\u0302\u0323 Z\u0351\u0325a\u0350l\u0354g\u0347o\u0362 \u0301lead");
add("accented latin", "Café naïve façade résumé Ångström Øre Ærø straße İstanbul ǅ");
add("math and symbols", "∀x ∈ ℝ: x² ≥ 0 ⇒ √x ∈ ℝ; ∑ᵢ aᵢ ≈ ∫ f(x) dx ± ε, ∞ ≠ ∅ © ® ™ € £ ¥ ₹ °C");
add("box drawing", "┌──┬──┐\n│ab│cd│\n└──┴──┘");

// ---- contractions and case
add("contractions", "I'm you're they'll we've he's she'd it's can't won't 'tis y'all");
add("contractions mixed case", "I'M YOU'RE They'Ll WE'VE HE'S She'D IT's DON'T 'S 'T 'Re 'vE 'm 'LL 'd");
add("contraction long s", "it\u017f x'\u017f y'\u017fs");
add("apostrophe punctuation", "'''quoted''' ' ' 'x '' ''s end'");
add("right single quote", "it\u2019s they\u2019re");

// ---- punctuation
add("punctuation runs", "Wait... what?!?! (really) [yes] {no} <maybe> --- *** ___ ~~~ ``` ;;; ::: ,,, !!!\n!!!\n\n");
add("punct then newlines", "x!\n\n\ny?\r\n\r\nz.\n");
add("mixed punct letters", "a.b,c;d:e!f?g-h_i/j\\k|l@m#n$o%p^q&r*s(t)u+v=w");

// ---- long repeats
add("repeat a", "a".repeat(2000));
add("repeat space", " ".repeat(1000) + "x");
add("repeat exclamation", "!".repeat(500));
add("repeat digit", "7".repeat(100));
add("repeat ab", "ab".repeat(500));
add("repeat newline", "\n".repeat(300));
add("repeat cjk", "字".repeat(400));
add("repeat emoji", "😀".repeat(200));
add("repeat word", "hello ".repeat(300));

// ---- control bytes (JSON escapes; the test reads bytes_b64)
add("control chars", "nul\u0000in\u0000text \u0001\u0002\u001f\u007f end");

// ---- special tokens
const specialText = "<|endoftext|>Hello<|fim_prefix|>def f(<|fim_suffix|>):<|fim_middle|> pass<|endofprompt|>bye<|endoftext|>";
add("specials allowed", specialText, true);
add("specials as text", specialText, false);
add("special adjacent", "a<|endoftext|><|endoftext|>b <|endoftext|> \n<|endoftext|>\n", true);
add("special lookalikes", "<|endoftext| <|endoftex|> <|unknown|> <|EndOfText|>", true);
add("special in word", "x<|endoftext|>y", true);

// ---- real documents
for (const [name, file] of [["readme", path.join(root, "README.md")], ["gpl3", "/usr/share/common-licenses/GPL-3"]]) {
  if (existsSync(file)) add(name, readFileSync(file, "utf8"));
}

// ---- random strings from a pool that exercises every branch of the pattern
let seed = 0x9e3779b9;
const rnd = (n) => {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
};
const pool = [
  ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", ..."0123456789", ..."     ", ..."\n\n\r\t",
  ..."'''", ..."!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`\"", "s", "t", "re", "ve", "ll", "d", "m", "S", "T", "LL",
  "é", "ß", "ñ", "Ø", "ſ", "\u0301", "\u0308", "\u00a0", "\u0085", "\u180e", "\u2003", "\u3000", "\u2028", "\u200b",
  "中", "文", "字", "ひ", "カ", "한", "ب", "ש", "न", "\u093f", "ก", "Ж", "λ", "٣", "½", "²", "Ⅻ",
  "😀", "👍", "🏽", "\u200d", "🇫", "€", "∑", "—", "\u2019", "\u0000", "\u007f", "<|endoftext|>",
];
for (let i = 0; i < 300; i++) {
  const len = 1 + rnd(i < 250 ? 40 : 400);
  let s = "";
  for (let k = 0; k < len; k++) s += pool[rnd(pool.length)];
  add(`random ${i}`, s, i % 3 === 0);
}

const enc = get_encoding("cl100k_base");
const result = {
  generator: "tools/tiktoken_fixtures.mjs",
  tiktoken: tiktokenVersion,
  encoding: "cl100k_base",
  cases: cases.map(({ name, text, special }) => ({
    name,
    text,
    bytes_b64: Buffer.from(text, "utf8").toString("base64"),
    special,
    ids: Array.from(special ? enc.encode(text, "all") : enc.encode_ordinary(text)),
  })),
};
enc.free();
writeFileSync(out, JSON.stringify(result, null, 0).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
console.error(`wrote ${out}: ${cases.length} cases, tiktoken ${tiktokenVersion}`);
