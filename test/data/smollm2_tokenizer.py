"""SmolLM2's tokenizer rebuilt from its GGUF file with the `tokenizers` package (BPE, individual digits,
byte level, the file's control tokens as special tokens), and its ChatML chat template with the default
system turn: the independent reference the C++ `bpe_tokenizer` is tested against, also used by the
DFlash training scripts (examples/dflash_train/common.py)."""
from pathlib import Path

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat_template(user: str) -> str:
    """The chat template with its default system turn and the generation prompt."""
    return (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def gguf_tokenizer(gguf_path: Path):
    """The tokenizer of a GGUF file whose pre-tokenizer is 'smollm'."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = gguf.GGUFReader(str(gguf_path))

    def strings(key):
        f = reader.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    pre = bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    f = reader.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ", 1)) for m in merges], dropout=None, unk_token=None,
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False,
                                       single_word=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok
