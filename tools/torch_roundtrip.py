"""Load a difftx model into PyTorch, score a sequence, and write the model back.

    /usr/bin/python3 tools/torch_roundtrip.py MODEL.safetensors TOKENS.txt OUT.safetensors

Prints the same JSON line as `difftx score --model MODEL --tokens TOKENS`:
{"loss": <mean next-token cross-entropy in nats>, "tokens": <predicted tokens>}
where TOKENS.txt holds whitespace-separated token ids scored as one sequence
(the first token is context only). OUT.safetensors gets the same tensor names,
values (as F32) and metadata strings, so a model trained by difftx goes into
PyTorch and back. Scoring runs in float64 on the stored weights.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402


def read_tokens(path, cfg):
    with open(path) as f:
        words = f.read().split()
    try:
        ids = [int(w) for w in words]
    except ValueError:
        sys.exit("%s: token ids must be integers" % path)
    if not 2 <= len(ids) <= cfg["max_seq_len"]:
        sys.exit("%s: need 2 to max_seq_len (%d) tokens, got %d" % (path, cfg["max_seq_len"], len(ids)))
    if min(ids) < 0 or max(ids) >= cfg["vocab_size"]:
        sys.exit("%s: token id out of range [0, %d)" % (path, cfg["vocab_size"]))
    return torch.tensor([ids], dtype=torch.long)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: torch_roundtrip.py MODEL.safetensors TOKENS.txt OUT.safetensors")
    model_path, tokens_path, out_path = sys.argv[1:]
    try:
        model, meta = ref.load_model(model_path, torch.float64)
    except (ValueError, KeyError, json.JSONDecodeError) as e:
        sys.exit(str(e))
    tokens = read_tokens(tokens_path, model.cfg)
    with torch.no_grad():
        loss = model.loss(tokens).item()
    print(json.dumps({"loss": loss, "tokens": tokens.shape[1] - 1}))
    ref.save_model(out_path, model, meta)


if __name__ == "__main__":
    main()
