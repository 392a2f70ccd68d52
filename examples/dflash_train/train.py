#!/usr/bin/env python3
"""Trains a DFlash drafter (`dflash.model.DFlashDraftModel`, PyPI dflash 0.1.0) for SmolLM2-135M-Instruct
on the self-distilled data of make_data.py or make_continuations.py, on a CUDA device when there is one
(--device) and otherwise on the CPU, and writes it in the reference checkpoint layout
(config.json + model.safetensors) that include/blockpilot_workbench/models/dflash_drafter.hpp loads.

Architecture: hidden 576 (the target's; the drafter has no embedding or head of its own), --layers
Qwen3-style decoder layers shaped like the target's (9 heads, 3 KV heads, head_dim 64, intermediate
1536, rms_norm_eps 1e-5, rope_theta 100000), target layer ids by the reference formula
(build_target_layer_ids: [15] for one layer, [1, 27] for two), mask token 16 (<empty_output>).
The target is frozen: its hidden states (once per sequence, cached in the output folder), its embedding
table (embeds the noise block) and its tied output head (gives the logits).

Objective, per the public DFlash recipe: per step, --seqs-per-step sequences; per sequence up to
--anchors distinct random anchor positions a among the target-written tokens whose next token is also
target-written; block = [token a, MASK x (B-1)] at positions a .. a+B-1; the block attends to the
context features of positions j < a (strictly) and bidirectionally to its own B rows, never to another
block; slot k (1..B-1) is trained with cross-entropy against token a+k (same-position labels) when that
token exists and was written by the target, weighted by exp(-(k-1)/gamma), loss = weighted mean. With
--soft-labels K the slot's cross-entropy is against the target's own distribution after position a+k-1
(its top K, renormalised: knowledge distillation); validation always reports the cross-entropy against
the written token.
AdamW (lr 6e-4, weight decay 0), linear warm-up over 4% of the steps then cosine decay to 0, gradient
norm clipped at 1.0; --steps 0 sizes the schedule to --max-minutes. On a GPU a step's sequences are packed
into one forward (the same loss).

Outputs in --out: state.pt (checkpoint; a run resumes from it), loss_log.json, loss_curve.png,
training.json (settings and summary), and drafter/ (config.json + model.safetensors).

  python train.py --data DATA --out DIR --steps 1000 --threads 2
"""

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import common


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, nargs="+", default=[common.work_dir() / "data.safetensors"],
                   help="make_data.py or make_continuations.py output; several are joined in order")
    p.add_argument("--out", type=Path, default=common.work_dir() / "run", help="output folder (resumes from its state.pt)")
    p.add_argument("--gguf", type=Path, default=common.default_gguf(), help="the target's GGUF file")
    p.add_argument("--layers", type=int, default=2, choices=(1, 2), help="drafter decoder layers")
    p.add_argument("--target-layer-ids", type=str, default="", help="override, e.g. 8,20 (default: the reference formula)")
    p.add_argument("--block-size", type=int, default=8, help="training block size B_train (8: the model card's comparison)")
    p.add_argument("--gamma", type=float, default=0.0, help="loss decay (default: 7 for B=16, 5 for 10, 4 for 8, else 7B/16)")
    p.add_argument("--anchors", type=int, default=32, help="blocks per sequence and step")
    p.add_argument("--seqs-per-step", type=int, default=1, help="sequences per optimizer step")
    p.add_argument("--max-context", type=int, default=2048, help="context rows a block sees at most (the latest ones)")
    p.add_argument("--steps", type=int, default=1000,
                   help="optimizer steps (the schedule spans them); 0: as many as --max-minutes allows at the speed of the "
                        "first --size-steps steps, moved at each validation to what still fits")
    p.add_argument("--size-steps", type=int, default=30,
                   help="with --steps 0: the steps timed before the schedule is sized, which are its warm-up")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=float, default=0.04, help="warm-up share of the steps")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    p.add_argument("--holdout", type=float, default=0.05,
                   help="share of sequences held out for validation, chosen by a hash of their tokens (0 below 20 sequences)")
    p.add_argument("--eval-every", type=int, default=100, help="steps between validations")
    p.add_argument("--save-every", type=int, default=50, help="steps between checkpoints (and exports)")
    p.add_argument("--log-every", type=int, default=10, help="steps between progress lines")
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="stop (checkpoint and export) when the run has taken this long since it started, loading and "
                        "feature computation included (0: no limit)")
    p.add_argument("--feature-batch-tokens", type=int, default=0,
                   help="tokens per batched target pass when computing features (0: 65,536 on CUDA, one sequence at a time "
                        "on the CPU)")
    p.add_argument("--feature-dtype", choices=("float32", "float16"), default="float32",
                   help="cached target features: float32 (as the C++ runtime computes them) or float16 (half the memory; "
                        "SmolLM2's early layers carry activations above 10^4, where float16 rounds in steps of 8-16)")
    p.add_argument("--soft-labels", type=int, default=0, metavar="K",
                   help="learn the target's distribution, not only its token: each slot's loss is the cross-entropy "
                        "against the target's K most likely next tokens at the position before (renormalised; cached "
                        "beside the features). 0: hard labels, the written token")
    p.add_argument("--export-dtype", choices=("bfloat16", "float32"), default="bfloat16", help="dtype of model.safetensors")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--device", default="auto", help="auto (cuda when available, else cpu), cpu or cuda[:N]")
    p.add_argument("--init-from-target", action="store_true",
                   help="start the drafter's layers from the target's last layers (attention, MLP and norms)")
    p.add_argument("--init-from", type=Path, default=None,
                   help="start from an exported drafter (a folder with config.json and model.safetensors, e.g. the shipped "
                        "one): a new schedule continues its training on this run's data")
    p.add_argument("--max-sequences", type=int, default=0,
                   help="train on the data's first N sequences only (0: all): a CPU run computes features for fewer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fresh", action="store_true", help="ignore an existing state.pt")
    return p.parse_args(argv)


def make_config(layers, block_size, layer_ids):
    from transformers import Qwen3Config

    config = Qwen3Config(
        hidden_size=common.HIDDEN, intermediate_size=1536, num_hidden_layers=layers, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=8192,
        vocab_size=49152, tie_word_embeddings=False, attention_bias=False, hidden_act="silu")
    config.num_target_layers = common.TARGET_LAYERS
    config.block_size = block_size
    config.dflash_config = {"mask_token_id": common.MASK_TOKEN_ID, "target_layer_ids": list(layer_ids)}
    config.architectures = ["DFlashDraftModel"]
    return config


def load_data(paths):
    """The sequences of every data file in order, and each file's summary."""
    from safetensors.numpy import load_file
    from safetensors import safe_open

    seqs, summaries = [], {}
    for path in paths:
        t = load_file(str(path))
        with safe_open(str(path), "np") as f:
            summaries[path.name] = json.loads((f.metadata() or {}).get("summary", "{}"))
        offsets = t["offsets"].tolist()
        seqs += [(t["tokens"][a:b].astype("int64"), t["generated"][a:b].astype(bool)) for a, b in zip(offsets, offsets[1:])]
    return seqs, summaries


def sequence_key(ids):
    """A sequence's name in the caches and for the held-out choice: a hash of its tokens."""
    import hashlib

    return hashlib.sha256(ids.astype("int32").tobytes()).hexdigest()[:24]


def prompt_tokens(ids, generated):
    """A sequence's prompt: its tokens before the first one the target wrote."""
    first = generated.argmax() if generated.any() else len(ids)
    return ids[:first]


def cache_sources(path, pattern):
    """The caches to read entries from: this run's own first, then the others matching `pattern`."""
    return sorted(path.parent.glob(pattern), key=lambda p: (p != path, p))


def target_identity(gguf):
    """What a cache records of the target that made it: the GGUF's name and a hash of its bytes."""
    import hashlib
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return f"{Path(gguf).name}:{digest.hexdigest()[:16]}"


def from_this_target(metadata, target):
    """A cache entry made by another target is skipped; caches written before they recorded one are trusted."""
    return (metadata or {}).get("target", target) == target


def large_blocks_to_the_system():
    """Makes the C allocator map every block of 1 MiB or more on its own and return it when freed. The
    pass visits sequences by rising length, so each batch's vocabulary-wide logits outgrow the holes the
    last batch left between the rows it cached: with the allocator's default (adaptive) threshold the
    teacher pass held 24 GB after 150 K tokens and was killed; with this, under 3 GB through 656 K."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (glibc); the call is absent elsewhere
    except (OSError, AttributeError):
        pass


def target_features(args, seqs, keys, layer_ids):
    """Hidden states of the target layers `layer_ids` (outputs of those decoder layers, HF's
    hidden_states[id + 1]) for every position of every sequence, teacher-forced, --feature-dtype, concatenated
    along the feature axis. Cached beside the first data file, keyed by the data files' names, the layer ids
    and the dtype, one entry per sequence under its key (sequence_key): a run on more of the same data (a larger
    --max-sequences, continuations added) computes only the sequences the cache lacks, and adds them. Sequences
    found in the caches of other data combinations (same layers and dtype) are taken from there.
    With --soft-labels K also the teacher: the target's K most likely next tokens and their probabilities
    after every position (int32 ids, float16 probabilities), cached the same way (teacher-*-topK).
    Returns the features, the teachers (None without --soft-labels) and the target when it was loaded."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    dtype = getattr(torch, args.feature_dtype)
    stems = "+".join(p.stem for p in args.data)
    path = args.data[0].parent / f"features-{stems}-{'-'.join(map(str, layer_ids))}-{args.feature_dtype}.safetensors"
    K = args.soft_labels
    teacher_path = path.parent / f"teacher-{stems}-top{K}.safetensors"
    target_id = target_identity(args.gguf)
    cached, taught = {}, {}
    for source in cache_sources(path, f"features-*-{'-'.join(map(str, layer_ids))}-{args.feature_dtype}.safetensors"):
        with safe_open(str(source), "pt") as f:
            if (json.loads((f.metadata() or {}).get("layer_ids", "[]")) != list(layer_ids)
                    or not from_this_target(f.metadata(), target_id)):
                continue
            found = (set(f.keys()) & set(keys)) - set(cached)
            cached.update({k: f.get_tensor(k) for k in found})
        if found and source != path:
            print(f"features: {len(found)} sequences from {source.name}", file=sys.stderr)
    for source in cache_sources(teacher_path, f"teacher-*-top{K}.safetensors") if K else []:
        with safe_open(str(source), "pt") as f:
            if not from_this_target(f.metadata(), target_id):
                continue
            names = set(f.keys())
            found = {k for k in keys if f"{k}.ids" in names} - set(taught)
            taught.update({k: (f.get_tensor(f"{k}.ids"), f.get_tensor(f"{k}.p")) for k in found})
    missing = [i for i, k in enumerate(keys) if k not in cached or (K and k not in taught)]
    print(f"features: {len(seqs) - len(missing)} of {len(seqs)} sequences cached in {path.name}"
          + (f" (with the teacher's top {K})" if K else ""), file=sys.stderr)
    if not missing:
        return [cached[k] for k in keys], [taught[k] for k in keys] if K else None, None
    large_blocks_to_the_system()
    target = common.load_target(args.gguf).to(args.device)
    layers = target.model.layers
    captured = {}
    hooks = [layers[i].register_forward_hook(lambda m, inp, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
             for i in layer_ids]
    if not K:
        target.model.layers = layers[:max(layer_ids) + 1]  # later layers do not feed the drafter
    head = target.model.embed_tokens.weight  # tied
    budget = args.feature_batch_tokens or (65536 if torch.device(args.device).type == "cuda" else 1)
    order = sorted(missing, key=lambda i: len(seqs[i][0]))
    total, done, t0, shown = sum(len(seqs[i][0]) for i in missing), 0, time.time(), 0.0
    with torch.no_grad():  # not inference_mode: the features are inputs of the drafter's autograd graph later
        while order:
            # Sequences of similar length, right-padded: causal attention keeps every real row exact.
            part = [order.pop(0)]
            while order and (len(part) + 1) * len(seqs[order[0]][0]) <= budget:
                part.append(order.pop(0))
            width = len(seqs[part[-1]][0])  # the longest: sorted by length
            ids = torch.zeros((len(part), width), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, i in enumerate(part):
                ids[r, :len(seqs[i][0])] = torch.from_numpy(seqs[i][0])
                mask[r, :len(seqs[i][0])] = 1
            out = target.model(ids.to(args.device), attention_mask=mask.to(args.device) if len(part) > 1 else None,
                               use_cache=False)
            rows = torch.cat([captured[l] for l in layer_ids], dim=-1).to("cpu", dtype)
            if not torch.isfinite(rows).all():  # float16 ends at 65504; SmolLM2's early layers reach 10^4
                sys.exit(f"features: a target activation does not fit {args.feature_dtype}: use --feature-dtype float32")
            for r, i in enumerate(part):
                n = len(seqs[i][0])
                cached[keys[i]] = rows[r, :n].clone()  # not a view that would keep the padded batch
                if K:
                    logp, top_ids = zip(*(torch.log_softmax(h @ head.T, dim=-1).topk(K, dim=-1)  # 1,024 rows at a time
                                          for h in out.last_hidden_state[r, :n].split(1024)))
                    taught[keys[i]] = (torch.cat(top_ids).to("cpu", torch.int32), torch.cat(logp).exp().to("cpu", torch.float16))
                done += n
            el = time.time() - t0
            if el - shown < 5 and order:
                continue
            shown = el
            print(f"features [{len(missing) - len(order)}/{len(missing)}] {done}/{total} tokens, {done / el:.0f} tokens/s, "
                  f"ETA {el / done * (total - done) / 60:.1f} min", file=sys.stderr, flush=True)
    for h in hooks:
        h.remove()
    target.model.layers = layers
    if path.is_file():  # keep what the cache holds for sequences this run does not use (if this target's)
        with safe_open(str(path), "pt") as f:
            if from_this_target(f.metadata(), target_id):
                cached.update({k: f.get_tensor(k) for k in set(f.keys()) - set(cached)})
    tmp = path.with_suffix(".tmp")
    save_file(cached, str(tmp), metadata={"layer_ids": json.dumps(layer_ids), "target": target_id})
    tmp.replace(path)
    if not K:
        return [cached[k] for k in keys], None, target
    if teacher_path.is_file():
        with safe_open(str(teacher_path), "pt") as f:
            kept = {name.split(".")[0] for name in f.keys()} - set(taught) if from_this_target(f.metadata(), target_id) else ()
            taught.update({k: (f.get_tensor(f"{k}.ids"), f.get_tensor(f"{k}.p")) for k in kept})
    tmp = teacher_path.with_suffix(".tmp")
    save_file({f"{k}.{part}": t for k, pair in taught.items() for part, t in zip(("ids", "p"), pair)}, str(tmp),
              metadata={"target": target_id})
    tmp.replace(teacher_path)
    return [cached[k] for k in keys], [taught[k] for k in keys], target


def block_batch(ids, gen, feats, teacher, n_anchors, B, gamma, max_context, generator, mask_id):
    """One sequence's training blocks: returns the drafter inputs (context features, noise ids,
    position ids, attention mask), the labels and weights of every block slot, the context length, and
    with a teacher (its top-K ids and probabilities per position) each slot's teacher rows [N][B][K] (else
    None, None); or None when the sequence has no valid anchor."""
    import torch

    S = len(ids)
    ids_t, gen_t = torch.from_numpy(ids), torch.from_numpy(gen)
    valid = torch.nonzero(gen_t[:-1] & gen_t[1:]).flatten()
    if len(valid) == 0:
        return None
    pick = valid[torch.randperm(len(valid), generator=generator)[:n_anchors]].sort().values
    N = len(pick)
    hi = int(pick[-1])                       # context rows needed: j < largest anchor,
    lo = max(0, int(pick[0]) - max_context)  # and j >= smallest anchor - max_context
    C = hi - lo
    offs = torch.arange(B)
    pos = pick[:, None] + offs[None, :]      # [N][B] absolute positions
    inside = pos < S
    labels = torch.where(inside, ids_t[pos.clamp(max=S - 1)], torch.zeros_like(pos))
    weights = (offs[None, :] >= 1) & inside & gen_t[pos.clamp(max=S - 1)]
    weights = weights.float() * torch.exp(-(offs.clamp(min=1) - 1).float() / gamma)[None, :]
    noise = torch.full((N, B), mask_id, dtype=torch.long)
    noise[:, 0] = ids_t[pick]
    ctx_pos = torch.arange(lo, hi)
    position_ids = torch.cat([ctx_pos, pos.flatten()])
    block_of = torch.arange(N).repeat_interleave(B)
    anchor_of = pick.repeat_interleave(B)[:, None]
    ctx_visible = (ctx_pos[None, :] < anchor_of) & (ctx_pos[None, :] >= anchor_of - max_context)  # [N B][C]
    own_block = block_of[:, None] == block_of[None, :]                          # [N B][N B]
    mask = torch.cat([ctx_visible, own_block], dim=1)[None, None]
    ctx = feats[lo:hi].float()
    soft_ids = soft_p = None
    if teacher is not None:  # slot k's teacher: the target's distribution after position anchor + k - 1
        before = (pos - 1).clamp(min=0, max=S - 1)
        soft_ids, soft_p = teacher[0][before].long(), teacher[1][before].float()
    return ctx, noise, position_ids, mask, labels, weights, C, soft_ids, soft_p


def on_device(batch, device):
    """block_batch's tensors on the training device (its count C stays a number)."""
    return tuple(x.to(device, non_blocking=True) if hasattr(x, "to") else x for x in batch)


def packed(parts):
    """Several sequences' block_batch results as one drafter input: the contexts back to back, then all
    blocks, each block seeing only its own sequence's context (as its mask says) and its own block. One
    forward instead of one per sequence: on a GPU a step is launch-bound otherwise."""
    import torch

    if len(parts) == 1:
        return parts[0]
    ctx, noise, position_ids, masks, labels, weights, C, soft_ids, soft_p = zip(*parts)
    rows = [n.numel() for n in noise]
    total_c, total_r = sum(C), sum(rows)
    mask = torch.zeros((total_r, total_c + total_r), dtype=torch.bool, device=masks[0].device)
    r0 = c0 = 0
    for m, c, r in zip(masks, C, rows):
        mask[r0:r0 + r, c0:c0 + c] = m[0, 0, :, :c]
        mask[r0:r0 + r, total_c + r0:total_c + r0 + r] = m[0, 0, :, c:]
        r0, c0 = r0 + r, c0 + c
    positions = torch.cat([p[:c] for p, c in zip(position_ids, C)] + [p[c:] for p, c in zip(position_ids, C)])
    soft = (torch.cat(soft_ids), torch.cat(soft_p)) if soft_ids[0] is not None else (None, None)
    return (torch.cat(ctx), torch.cat(noise), positions, mask[None, None], torch.cat(labels), torch.cat(weights), total_c,
            *soft)


def init_from_target(model, target):
    """The drafter's layers start as the target's last layers: the attention projections, the MLP and
    both norms of layer -L+i go to drafter layer i (the per-head q/k norms the target lacks stay at one),
    and its final norm is the target's."""
    import torch

    drafter_layers, target_layers = model.layers, target.model.layers
    with torch.no_grad():
        for mine, theirs in zip(drafter_layers, target_layers[len(target_layers) - len(drafter_layers):]):
            src = theirs.state_dict()
            own = mine.state_dict()
            copied = {k: v for k, v in src.items() if k in own and own[k].shape == v.shape}
            mine.load_state_dict(copied, strict=False)
        model.norm.load_state_dict(target.model.norm.state_dict())  # the head reads what the target's final norm gives
    print(f"drafter layers initialised from the target's last {len(drafter_layers)} ({len(copied)} tensors each)",
          file=sys.stderr)


def init_from_export(model, folder):
    """The weights of an exported drafter of the same shape (its bf16 values, widened to float32)."""
    from dflash.model import DFlashDraftModel

    earlier = DFlashDraftModel.from_pretrained(folder).float()
    if earlier.target_layer_ids != model.target_layer_ids or len(earlier.layers) != len(model.layers):
        sys.exit(f"{folder}: layers {len(earlier.layers)}, target layer ids {earlier.target_layer_ids}; "
                 f"this run has {len(model.layers)} and {model.target_layer_ids}")
    model.load_state_dict(earlier.state_dict())
    print(f"drafter initialised from {folder} (block size {earlier.block_size})", file=sys.stderr)


def step_loss(model, embed, batch, B, soft=False):
    """Weighted CE of one sequence's blocks, against the written tokens or (soft, when the batch has a
    teacher) against the teacher's renormalised top-K; also the sums for accuracy and simulated acceptance."""
    import torch
    import torch.nn.functional as F

    ctx, noise, position_ids, mask, labels, weights, C, soft_ids, soft_p = batch
    N = noise.shape[0]
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=ctx.is_cuda):  # bf16 on a GPU
        hidden = model(position_ids=position_ids[None], attention_mask=mask,
                       noise_embedding=F.embedding(noise.flatten(), embed)[None], target_hidden=ctx[None])[0]  # [N B][hidden]
        w = weights.flatten()
        keep = w > 0
        logits = model.compute_logits(hidden[keep], lambda h: h @ embed.T).float()
    if soft and soft_ids is not None:
        K = soft_ids.shape[-1]
        p = soft_p.view(-1, K)[keep]
        ce = -(p / p.sum(-1, keepdim=True) * torch.log_softmax(logits, -1).gather(1, soft_ids.view(-1, K)[keep])).sum(-1)
    else:
        ce = F.cross_entropy(logits, labels.flatten()[keep], reduction="none")
    with torch.no_grad():
        correct = torch.zeros(N * B, dtype=torch.bool, device=logits.device)
        correct[keep] = logits.argmax(-1) == labels.flatten()[keep]
        correct = correct.view(N, B)[:, 1:]
        # Simulated acceptance per block at b = B: 1 + the run of correct slots from slot 1 (slots
        # without a label end the run).
        accept = 1 + correct.int().cumprod(dim=1).sum(dim=1)
    return (ce * w[keep]).sum(), w[keep].sum(), correct.sum().item(), int(keep.sum()), accept.float().sum().item(), N


class Schedule:
    """Linear warm-up, then a cosine to 0 over the steps up to `total`. A time-sized run (--steps 0) sets
    `total` once the warm-up steps are timed and moves it as the time left changes (replan); the cosine
    then spreads the rest of its progress over the new remaining steps, so the rate never jumps. Its
    state goes into the checkpoint, so a resumed run continues the same curve."""

    def __init__(self, warm, total):
        self.warm, self.total, self.s0, self.p0 = max(1, warm), total, max(1, warm), 0.0

    def progress(self, s):
        return min(1.0, self.p0 + (1 - self.p0) * max(0, s - self.s0) / max(1, self.total - self.s0))

    def factor(self, s):
        if s < self.warm:
            return (s + 1) / self.warm
        if self.total <= 0:  # not sized yet: the warm-up's end rate
            return 1.0
        return 0.5 * (1 + math.cos(math.pi * self.progress(s)))

    def replan(self, s, total):
        if self.total > 0 and s >= self.s0:
            self.p0, self.s0 = self.progress(s), s
        else:
            self.s0 = max(s, self.warm)
        self.total = max(total, s + 1)

    def state_dict(self):
        return dict(vars(self))

    def load_state_dict(self, d):
        vars(self).update(d)


def layer_ids_of(args):
    return ([int(x) for x in args["target_layer_ids"].split(",")] if args["target_layer_ids"]
            else common.build_target_layer_ids(common.TARGET_LAYERS, args["layers"]))


def check_resume(saved, args, layer_ids, gamma):
    """A resumed run keeps the model its state was trained as: the same tapped layers and block size (the
    state loads either way, so a change would train on other features unnoticed). A changed loss or
    held-out split is allowed but said, since the validation curve is no longer one curve."""
    if not saved:
        return
    if layer_ids_of(saved) != layer_ids or saved["block_size"] != args.block_size:
        sys.exit(f"{args.out}/state.pt was trained with target layers {layer_ids_of(saved)} and B_train "
                 f"{saved['block_size']}, not {layer_ids} and {args.block_size}: resume with those, or --fresh")
    old_gamma = saved["gamma"] or common.default_gamma(saved["block_size"])
    changed = [name for name, old, new in (
        ("gamma", old_gamma, gamma), ("--soft-labels", saved.get("soft_labels", 0), args.soft_labels),
        ("--holdout", saved.get("holdout"), args.holdout), ("--max-sequences", saved.get("max_sequences", 0), args.max_sequences),
        ("--data (file names)", [Path(d).name for d in saved["data"]], [Path(d).name for d in args.data])) if old != new]
    if changed:
        print(f"resuming with another {', '.join(changed)} than the saved run: its loss or held-out set differ "
              "from here on", file=sys.stderr)


def main(argv=None):
    t_start = time.time()
    args = parse_args(argv)
    if args.steps == 0 and args.max_minutes <= 0:
        sys.exit("--steps 0 sizes the schedule to --max-minutes: give both")
    import numpy as np
    import torch
    from dflash.model import DFlashDraftModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    layer_ids = layer_ids_of(vars(args))
    gamma = args.gamma or common.default_gamma(args.block_size)
    B = args.block_size

    seqs, data_summaries = load_data(args.data)
    if args.max_sequences > 0:
        seqs = seqs[:args.max_sequences]
    assert not any((ids == common.MASK_TOKEN_ID).any() for ids, _ in seqs), "the mask token occurs in the data"
    # Held out by prompt (the hash of its tokens), so that every run on any mix of the same files holds out the
    # same sequences, and a prompt's greedy and sampled continuations fall on the same side.
    share = args.holdout if len(seqs) >= 20 else 0
    keys = [sequence_key(ids) for ids, _ in seqs]
    holdout = [i for i, (ids, generated) in enumerate(seqs)
               if int(sequence_key(prompt_tokens(ids, generated)), 16) % 10000 < share * 10000]
    held = set(holdout)
    train_ids = [i for i in range(len(seqs)) if i not in held]
    print(f"data {', '.join(map(str, args.data))}: {len(seqs)} sequences ({len(train_ids)} train, {len(holdout)} held out), "
          f"{sum(len(s[0]) for s in seqs)} tokens, {sum(int(s[1].sum()) for s in seqs)} target-written; "
          f"layers {args.layers}, target layer ids {layer_ids}, B_train {B}, gamma {gamma}", file=sys.stderr)

    feats, teachers, target = target_features(args, seqs, keys, layer_ids)
    if device.type == "cuda":  # every step slices them there (float16, two target layers: 2.3 kB a token)
        feats = [f.to(device) for f in feats]
    if target is None:
        target = common.load_target(args.gguf)
    embed = target.model.embed_tokens.weight.detach().to(device)  # [vocab][hidden], frozen; also the tied head

    config = make_config(args.layers, B, layer_ids)
    model = DFlashDraftModel(config).float()
    assert model.target_layer_ids == layer_ids and model.mask_token_id == common.MASK_TOKEN_ID
    if args.init_from_target and args.init_from:
        sys.exit("--init-from-target and --init-from exclude each other")
    if args.fresh or not (args.out / "state.pt").is_file():
        if args.init_from_target:
            init_from_target(model, target)
        if args.init_from:
            init_from_export(model, args.init_from)
    del target
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    time_sized = args.steps == 0  # planned after the first --size-steps steps (the warm-up), then kept to the time left
    schedule = Schedule(args.size_steps if time_sized else round(args.warmup * args.steps), args.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.factor)
    step, log, spent = 0, {"train": [], "eval": []}, 0.0
    state_path = args.out / "state.pt"
    if state_path.is_file() and not args.fresh:
        state = torch.load(state_path, weights_only=False, map_location=device)
        check_resume(state.get("args", {}), args, layer_ids, gamma)
        model.load_state_dict(state["model"])
        if state["optimizer"] is not None:  # a state carried without the moments (device_train.sh) starts them again
            opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        if "schedule" in state:  # the curve it was on; given --steps N, a new end at N from here
            schedule.load_state_dict(state["schedule"])
            if not time_sized:
                schedule.replan(state["step"], args.steps)
            args.steps = schedule.total
        step, log, spent = state["step"], state["log"], state.get("seconds", 0.0)
        print(f"resumed from {state_path} at step {step}", file=sys.stderr)

    def order_for(epoch):
        g = torch.Generator().manual_seed(args.seed * 1000003 + epoch)
        return [train_ids[i] for i in torch.randperm(len(train_ids), generator=g).tolist()]

    def sequences_of(s):
        """The sequences of step s: the epoch permutation continued across steps."""
        first = s * args.seqs_per_step
        return [order_for((first + k) // len(train_ids))[(first + k) % len(train_ids)] for k in range(args.seqs_per_step)]

    def batches(indices, g):
        """The drafter inputs of these sequences on the device: packed into one on a GPU, else one each."""
        parts = [block_batch(*seqs[i], feats[i], teachers[i] if teachers else None, args.anchors, B, gamma, args.max_context,
                             g, common.MASK_TOKEN_ID)
                 for i in indices]
        parts = [on_device(p, device) for p in parts if p is not None]
        return [packed(parts)] if parts and device.type == "cuda" else parts

    def evaluate():
        model.eval()
        tot = dict(loss=0.0, w=0.0, correct=0, slots=0, accept=0.0, blocks=0)
        g = torch.Generator().manual_seed(12345)
        with torch.no_grad():
            for k in range(0, len(holdout), args.seqs_per_step):
                for batch in batches(holdout[k:k + args.seqs_per_step], g):
                    l, w, c, n, a, nb = step_loss(model, embed, batch, B)
                    tot["loss"] += l.item(); tot["w"] += w.item(); tot["correct"] += c; tot["slots"] += n
                    tot["accept"] += a; tot["blocks"] += nb
        model.train()
        return {"step": step, "loss": tot["loss"] / max(tot["w"], 1e-9), "acc": tot["correct"] / max(tot["slots"], 1),
                "tau_sim": tot["accept"] / max(tot["blocks"], 1)}

    def save():
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "schedule": schedule.state_dict(),
                    "step": step, "log": log, "seconds": spent, "args": vars(args)}, str(state_path) + ".tmp")
        Path(str(state_path) + ".tmp").replace(state_path)
        export = copy.deepcopy(model).to("cpu", getattr(torch, args.export_dtype))
        export.save_pretrained(args.out / "drafter")
        (args.out / "loss_log.json").write_text(json.dumps(log, indent=1))
        summary = {"step": step, "steps": args.steps, "seconds": round(spent, 1),
                   "seconds_per_step": round(spent / step, 3) if step else None,
                   "parameters": sum(p.numel() for p in model.parameters()), "target_layer_ids": layer_ids,
                   "mask_token_id": common.MASK_TOKEN_ID, "mask_token": common.MASK_TOKEN_TEXT, "block_size": B,
                   "gamma": gamma, "data": [str(p) for p in args.data], "data_summary": data_summaries,
                   "holdout_sequences": holdout, "torch": torch.__version__, "device": str(device),
                   "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                   "transformers": __import__("transformers").__version__}
        settings = {k: str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, list) else v
                    for k, v in vars(args).items()}
        (args.out / "training.json").write_text(json.dumps({"settings": settings, "summary": summary}, indent=1))
        plot(log, args.out / "loss_curve.png", B, args.soft_labels)

    seconds = {"eval": 0.0, "save": 0.0}  # the latest validation's and checkpoint's

    def timed(what, f):
        t = time.time()
        result = f()
        seconds[what] = time.time() - t
        return result

    def steps_that_fit(window):
        """Steps that fit the time left at the recent step time, with a validation and a checkpoint due every
        --eval-every / --save-every steps and once more at the end."""
        left = 60 * args.max_minutes - (time.time() - t_start) - seconds["eval"] - seconds["save"]
        per_step = sum(window) / len(window) + seconds["eval"] / args.eval_every + seconds["save"] / args.save_every
        return max(0, int(left / per_step))

    model.train()
    start_step, window = step, []
    sized = schedule.total > 0
    while not sized or step < schedule.total:
        t0 = time.time()
        g = torch.Generator().manual_seed(args.seed * 7919 + step)
        opt.zero_grad(set_to_none=True)
        parts = batches(sequences_of(step), g)
        total_w = sum(float(p[5].sum()) for p in parts)
        stats = np.zeros(5)
        for p in parts:
            l, w, c, n, a, nb = step_loss(model, embed, p, B, soft=args.soft_labels > 0)
            (l / total_w).backward()
            stats += [l.item(), c, n, a, nb]
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip).item()
        opt.step()
        sched.step()
        step += 1
        dt = time.time() - t0
        spent += dt
        entry = {"step": step, "loss": stats[0] / total_w, "acc": stats[1] / max(stats[2], 1),
                 "tau_sim": stats[3] / max(stats[4], 1), "slots": int(stats[2]), "lr": opt.param_groups[0]["lr"], "grad_norm": norm,
                 "seconds": round(dt, 3)}
        log["train"].append(entry)
        window = (window + [dt])[-100:]
        last = step == schedule.total
        if step % args.log_every == 0 or last or step == start_step + 1:
            recent = log["train"][-args.log_every:]
            eta = f"ETA {(schedule.total - step) * sum(window) / len(window) / 60:.1f} min" if sized else "(sizing the schedule)"
            print(f"step {step}/{schedule.total if sized else '?'} loss {sum(e['loss'] for e in recent) / len(recent):.4f} "
                  f"acc {sum(e['acc'] for e in recent) / len(recent):.3f} tau_sim(B) {sum(e['tau_sim'] for e in recent) / len(recent):.2f} "
                  f"lr {entry['lr']:.2e} {dt:.2f} s/step {eta}", file=sys.stderr, flush=True)
        sizing = not sized and step - start_step >= args.size_steps
        if holdout and (step % args.eval_every == 0 or last or sizing):
            e = timed("eval", evaluate)
            log["eval"].append(e)
            print(f"validation at step {step}: loss {e['loss']:.4f} acc {e['acc']:.3f} tau_sim(B) {e['tau_sim']:.2f}",
                  file=sys.stderr, flush=True)
        if sizing:
            timed("save", save)  # to know what a checkpoint costs
        if time_sized and (sizing or (sized and step % args.eval_every == 0 and not last)):
            total = schedule.total
            schedule.replan(step, step + steps_that_fit(window))
            args.steps = schedule.total
            if sizing:
                print(f"schedule sized to {args.max_minutes} minutes: {args.steps} steps", file=sys.stderr, flush=True)
            elif abs(args.steps - total) > 0.01 * total:
                print(f"schedule moved to {args.steps} steps (the time left at the recent step time)", file=sys.stderr, flush=True)
            sized = True
        out_of_time = args.max_minutes > 0 and time.time() - t_start > 60 * args.max_minutes
        if step % args.save_every == 0 or step == schedule.total or out_of_time:
            timed("save", save)
        if out_of_time:
            print(f"stopped after {args.max_minutes} minutes at step {step}", file=sys.stderr)
            break
    if step == start_step:
        save()
    print(f"wrote {args.out / 'drafter'} (config.json, model.safetensors) at step {step}", file=sys.stderr)


def plot(log, path, B, soft_labels=0):
    """Loss and simulated tau, train against held-out. With soft labels the training loss is against the
    target's top-K distribution (never below its entropy) and the held-out loss against the written token."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not log["train"]:
        return
    steps = [e["step"] for e in log["train"]]
    loss = [e["loss"] for e in log["train"]]
    k = max(1, len(loss) // 50)
    smooth = [sum(loss[max(0, i - k + 1):i + 1]) / len(loss[max(0, i - k + 1):i + 1]) for i in range(len(loss))]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    train = f"train, against the target's top {soft_labels}" if soft_labels else "train"
    ax[0].plot(steps, loss, alpha=0.3, label=f"{train} (per step)")
    ax[0].plot(steps, smooth, label=f"{train} (mean of {k})")
    if log["eval"]:
        ax[0].plot([e["step"] for e in log["eval"]], [e["loss"] for e in log["eval"]], "o-", label="held-out, against the written token")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("step"); ax[0].set_ylabel("weighted cross-entropy"); ax[0].legend(); ax[0].grid(alpha=0.3)
    tau = [e["tau_sim"] for e in log["train"]]
    ax[1].plot(steps, [sum(tau[max(0, i - k + 1):i + 1]) / len(tau[max(0, i - k + 1):i + 1]) for i in range(len(tau))],
               label="train")
    if log["eval"]:
        ax[1].plot([e["step"] for e in log["eval"]], [e["tau_sim"] for e in log["eval"]], "o-", label="held-out")
    ax[1].set_xlabel("step"); ax[1].set_ylabel(f"simulated acceptance length at b = {B}"); ax[1].legend(); ax[1].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
