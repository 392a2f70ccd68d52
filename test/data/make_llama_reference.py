#!/usr/bin/env python3
# Independent numpy (float64) Llama forward from gguf-py's dequantised tensors, with llama.cpp's q/k row
# permutation undone and HF's rotate-half RoPE; writes llama_reference.json for test/test_llama.cpp.
# Usage: python3 make_llama_reference.py MODEL.gguf [OUT.json]   (needs: pip install gguf numpy)
import json, re, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

path = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else __file__.rsplit("/", 1)[0] + "/llama_reference.json"
r = GGUFReader(path)
meta = lambda k: r.fields[k].contents()
L, H, KV = meta("llama.block_count"), meta("llama.attention.head_count"), meta("llama.attention.head_count_kv")
D = meta("llama.embedding_length") // H
eps, base = meta("llama.attention.layer_norm_rms_epsilon"), meta("llama.rope.freq_base")
W = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
     for t in r.tensors}
tokens, merges = meta("tokenizer.ggml.tokens"), meta("tokenizer.ggml.merges")
tok_id, rank = {t: i for i, t in enumerate(tokens)}, {tuple(m.split(" ")): i for i, m in enumerate(merges)}

def unpermute(w, heads):  # inverse of llama.cpp convert's permute(): back to HF's rotate-half row order
    return w.reshape(heads, w.shape[0] // heads // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)

for i in range(L):
    W[f"blk.{i}.attn_q.weight"] = unpermute(W[f"blk.{i}.attn_q.weight"], H)
    W[f"blk.{i}.attn_k.weight"] = unpermute(W[f"blk.{i}.attn_k.weight"], KV)

byte_map = {}  # GPT-2 byte-level alphabet
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
extra = 0
for b in range(256):
    byte_map[b] = chr(b) if b in printable else chr(256 + extra)
    extra += b not in printable

def bpe(text):  # ASCII prompts only: letters, punctuation, single digits, whitespace
    ids = []
    for word in re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", text):
        parts = [byte_map[b] for b in word.encode()]
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda j: rank.get((parts[j], parts[j + 1]), 1 << 30))
            if (parts[best], parts[best + 1]) not in rank: break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        ids += [tok_id[p] for p in parts]
    return ids

def chatml(user):
    s, e, nl = tok_id["<|im_start|>"], tok_id["<|im_end|>"], bpe("\n")
    return ([s] + bpe("system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face") + [e] + nl +
            [s] + bpe("user\n" + user) + [e] + nl + [s] + bpe("assistant\n"))

def rms(x, w): return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

def forward(ids):  # full recomputation, no cache: logits of the last position
    n = len(ids)
    x = W["token_embd.weight"][ids]
    inv = base ** (-np.arange(0, D, 2) / D)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rope = lambda t: t * cos + np.concatenate([-t[..., D // 2:], t[..., :D // 2]], -1) * sin
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(L):
        p = f"blk.{i}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(n, H, D).transpose(1, 0, 2))
        k = rope((h @ W[p + "attn_k.weight"].T).reshape(n, KV, D).transpose(1, 0, 2))
        v = (h @ W[p + "attn_v.weight"].T).reshape(n, KV, D).transpose(1, 0, 2)
        k, v = np.repeat(k, H // KV, 0), np.repeat(v, H // KV, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        x = x + a.transpose(1, 0, 2).reshape(n, H * D) @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"])
        g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
    head = W.get("output.weight", W["token_embd.weight"])
    return head @ rms(x[-1], W["output_norm.weight"])

cases = []
for user in ["What is the capital of France?", "Write a short poem about the sea.",
             "Explain why the sky is blue in one sentence."]:
    prompt = chatml(user)
    logits = forward(prompt)
    seq, generated = list(prompt), []
    for step in range(32):
        t = int(np.argmax(logits if step == 0 else forward(seq)))
        generated.append(t)
        seq.append(t)
    m = logits.max()
    cases.append({"user": user, "prompt": prompt, "greedy": generated, "argmax": int(np.argmax(logits)),
                  "logsumexp": float(m + np.log(np.exp(logits - m).sum())), "logits_head": logits[:64].tolist(),
                  "text": "".join(tokens[t] for t in generated).replace("\u0120", " ").replace("\u010a", "\n")})
    print(user, "->", repr(cases[-1]["text"]), file=sys.stderr)
json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "precision": "float64", "greedy_tokens": 32,
           "cases": cases}, open(out, "w"), indent=1)
