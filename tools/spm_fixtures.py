#!/usr/bin/python3
"""Writes tests/fixtures/tokenizer/spm_cases.json: the ids SentencePiece itself
(Debian's python3-sentencepiece) gives a varied sample of texts with Llama 2's
tokenizer.model (data/hf-tokenizers/llama2, scripts/fetch_hf_tokenizers.sh).
tests/io/tokenizer_hf_test.c checks that difftx encodes every case to the same
ids. Run once, by hand (the fixture is committed; the tests need no Python):

    apt-get install python3-sentencepiece
    /usr/bin/python3 tools/spm_fixtures.py [OUT]

Texts: the cases of tests/fixtures/tokenizer/hf_cases.json (themselves those
of cl100k_cases.json and more) and a few for SentencePiece's own rules.
Per case: "ordinary", sp.encode(text); "special", the text cut at <s>, </s>
and <unk> (leftmost, longest), each piece between encoded by sp.encode on its
own and the cut tokens' ids between them (difftx's DTX_ENCODE_SPECIAL for a
SentencePiece model, as Hugging Face's Llama tokenizers match those tokens).
"""
import base64
import hashlib
import json
import os
import sys

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "data/hf-tokenizers/llama2/tokenizer.model")
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/fixtures/tokenizer/spm_cases.json")

sp = spm.SentencePieceProcessor(model_file=MODEL)
specials = {sp.id_to_piece(i): i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)}

cases = []
with open(os.path.join(ROOT, "tests/fixtures/tokenizer/hf_cases.json"), encoding="utf-8") as f:
    for c in json.load(f)["cases"]:
        cases.append((c["name"], base64.b64decode(c["bytes_b64"]).decode("utf-8")))
cases += [
    ("llama2 chat", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello!</s><s>[INST] again [/INST]"),
    ("unk and controls", "<unk>x</s> <s><s>y <unk></s>"),
    ("leading spaces", "   three leading and    inner   runs   "),
    ("dummy prefix digits", "2024 is 12345 and 3.14"),
    ("u2581 in text", "a\u2581b \u2581\u2581 c"),
    ("rare characters", "\U0001D400\U0001F9E0 \u2603\ufe0f \u0f00 \U00020000"),
]


def special_ids(text):
    ids, pos = [], 0
    while True:
        best = None
        for name, i in specials.items():
            at = text.find(name, pos)
            if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(name) > len(best[1]))):
                best = (at, name, i)
        seg = text[pos:] if best is None else text[pos:best[0]]
        if seg:
            ids += sp.encode(seg)
        if best is None:
            return ids
        ids.append(best[2])
        pos = best[0] + len(best[1])


with open(MODEL, "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
result = {"generator": "tools/spm_fixtures.py", "sentencepiece": spm.__version__, "model_sha256": sha, "cases": []}
for name, text in cases:
    o, s = sp.encode(text), special_ids(text)
    c = {"name": name, "bytes_b64": base64.b64encode(text.encode("utf-8")).decode(), "ordinary": o}
    if s != o:
        c["special"] = s
    result["cases"].append(c)
text = json.dumps(result, separators=(",", ":")).replace('},{"name"', '},\n{"name"')
with open(OUT, "w", encoding="utf-8") as f:
    f.write(text + "\n")
print(f"wrote {OUT}: {len(cases)} cases, sentencepiece {spm.__version__}", file=sys.stderr)
