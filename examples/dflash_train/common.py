"""Shared pieces of the DFlash training scripts: paths, SmolLM2's tokenizer and chat template, the target
loaded from its GGUF file as a Hugging Face model, the prompt files, and the drafter's default choices.

The tokenizer and the chat template are test/data/smollm2_tokenizer.py's (the reference the C++ tokenizer
is tested against), so the token ids stored in the training data are the ids the C++ runtime produces
for the same text.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "test" / "data"))
sys.path.insert(0, str(REPO / "examples" / "python"))
import smollm2_tokenizer  # noqa: E402
from prompt_lines import file_lines as read_lines  # noqa: E402,F401 (a prompt file's lines, numbered as the C++ tools do)

DEFAULT_SYSTEM = smollm2_tokenizer.DEFAULT_SYSTEM
IM_START, IM_END, ENDOFTEXT = 1, 2, 0
STOP_IDS = (IM_END,)
# The mask token: a real row of the target's embedding table that is an unused special token.
# SmolLM2 has no spare rows (49,152 tokens = 49,152 rows); ids 3-16 are StarCoder-heritage code and
# notebook markers that chat text never produces. 16 is <empty_output> (a notebook-cell marker), the
# same id test/data/dflash_tiny uses; make_data.py checks that it never occurs in the training data.
MASK_TOKEN_ID = 16
MASK_TOKEN_TEXT = "<empty_output>"
TARGET_LAYERS = 30
HIDDEN = 576

# ShareGPT lines 41-60 are the evaluation prompts: never used for training.
TRAIN_SHAREGPT_LINES = range(1, 41)
EVAL_SHAREGPT_LINES = range(41, 61)


def cache_dir() -> Path:
    """$BLOCKPILOT_CACHE, else ~/.cache/blockpilot (as scripts/fetch-smollm2.sh uses)."""
    return Path(os.environ.get("BLOCKPILOT_CACHE", Path.home() / ".cache/blockpilot"))


def default_gguf() -> Path:
    return Path(os.environ.get("BLOCKPILOT_SMOLLM2_GGUF", cache_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def default_prompts_dir() -> Path:
    return REPO / "examples/data/prompts"


def work_dir() -> Path:
    return cache_dir() / "dflash-train"


def chat_text(user: str) -> str:
    """SmolLM2's ChatML template with its default system turn and the generation prompt."""
    return smollm2_tokenizer.chat_template(user)


def build_tokenizer(gguf_path: Path):
    """SmolLM2's tokenizer from the GGUF, as the tokenizer tests rebuild it (test/data/smollm2_tokenizer.py)."""
    tok = smollm2_tokenizer.gguf_tokenizer(gguf_path)
    assert tok.token_to_id("<|im_end|>") == IM_END and tok.token_to_id(MASK_TOKEN_TEXT) == MASK_TOKEN_ID
    return tok


def load_target(gguf_path: Path):
    """SmolLM2-135M-Instruct as a float32 LlamaForCausalLM, dequantised from the GGUF by transformers,
    frozen. Its output head is the (tied) embedding table."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 dtype=torch.float32).eval()
    model.requires_grad_(False)
    assert model.config.num_hidden_layers == TARGET_LAYERS and model.config.hidden_size == HIDDEN
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight), "expected tied embeddings"
    return model


def continue_batched(target, prompts, config, batch: int, device="cpu", after_batch=None):
    """The target's continuations of `prompts` (lists of token ids) by Hugging Face `generate` with
    `config`, prompts batched by length with left padding, each cut after its first <|im_end|> (kept).
    after_batch(done, width, tokens), if given, is called after each batch: prompts done so far, the
    batch's padded prompt length, tokens it generated."""
    import torch

    by_length = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    out_ids = [None] * len(prompts)
    for start in range(0, len(by_length), batch):
        part = by_length[start:start + batch]
        width = max(len(prompts[i]) for i in part)
        ids = torch.full((len(part), width), ENDOFTEXT, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, i in enumerate(part):
            ids[r, width - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[r, width - len(prompts[i]):] = 1
        with torch.inference_mode():
            out = target.generate(ids.to(device), attention_mask=mask.to(device), generation_config=config).cpu()
        for r, i in enumerate(part):
            cont = out[r, width:].tolist()
            out_ids[i] = cont[:cont.index(IM_END) + 1] if IM_END in cont else cont  # (then no padding)
        if after_batch:
            after_batch(start + len(part), width, sum(len(out_ids[i]) for i in part))
    return out_ids


def default_gamma(block_size: int) -> float:
    """The loss decay w_k = exp(-(k-1)/gamma): 7 for B = 16, 5 for 10, 4 for 8 (the values the public
    recipe suggests), else 7 B / 16."""
    return {8: 4.0, 10: 5.0, 16: 7.0}.get(block_size, 7.0 * block_size / 16)


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int):
    """dflash.model.build_target_layer_ids (and the C++ dflash_target_layer_ids)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 3 - 1
    return [round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]
