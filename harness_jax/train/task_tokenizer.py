"""A small byte-level BPE tokenizer trained on an environment's *training* text (tiny CPU runs).

Why: the real Qwen3.5 vocabulary has 248k tokens; for a tiny policy (hidden 64-128) the LM head
then costs ~30x more FLOPs than the whole decoder, so a 2-core CPU spends almost all of its
time on logits. ``model.tokenizer="task_bpe"`` trains a byte-level BPE (``tokenizers``) of
``model.tokenizer_vocab`` tokens on text the training split exposes (the environment's
instructions, the base harness's fixed texts, the tasks' first observations, the oracle's
replies and the observations they produce), plus the Qwen chat special tokens as single tokens,
so the harness's chat format and the executor work unchanged. The byte alphabet is always
included: any text is encodable, and the token stream stays exact (the executor never
re-tokenises).

``model.tokenizer_pretokenizer`` picks how text is cut into words before BPE: ``"bytelevel"``
(GPT-2's regex: a word carries its leading space, punctuation runs stick together) or
``"isolate"`` (every whitespace and punctuation character is a pre-token of its own). With
``"isolate"`` a value such as ``Maria`` or ``250`` is the same token sequence after a space in a
question, inside SQL quotes or backticks (``'Maria'``) and in a result row (``('250',)``), so a
tiny policy copies it token for token; text costs more tokens (spaces are tokens of their own).

The tokenizer is written to ``<workdir>/tokenizer`` on first use and loaded from there on
resume, so a restarted run sees identical ids. Only train-split tasks are read (never
selection/test), so evaluation text does not shape the vocabulary.
"""
from __future__ import annotations

from typing import Iterable

from absl import logging
from etils import epath

from harness_jax.envs import registry
from harness_jax.harness import presets
from harness_jax.paths import resolve
from harness_jax.train import builders, sft_warmstart, workdir

PRETOKENIZERS = ("bytelevel", "isolate")   # model.tokenizer_pretokenizer (``pre_tokenizer``)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
CORPUS_TASKS = 300
ISOLATE_PATTERN = r"\s|[^\w\s]"    # one whitespace or one punctuation character per pre-token


def training_corpus(run, n_tasks: int = CORPUS_TASKS) -> Iterable[str]:
    """Text of the environment's training interactions: instruction, task prompts, oracle replies
    and the observations they produce (oracle episodes run in the real environment). ``run``:
    ``train.spec.RunSpec``."""
    e = run.env
    env = builders.env_factory(e)()
    yield str(getattr(env, "instruction", "") or "")
    for spec in env.tool_specs() or []:
        yield str(spec)
    tasks = builders.load_tasks(e, e.train_split, n=n_tasks, seed_offset=7919)
    has_demos = registry.spec(e.name).demos is not None
    for task in tasks:
        yield env.reset(task)
        if not has_demos:
            continue
        actions = sft_warmstart.demo_actions(e, task)      # once per task: rendered and stepped
        for text, action in zip(sft_warmstart.render_replies(actions), actions):
            yield text
            res = env.step(action)
            yield res.observation
            if res.done:
                break
    env.close()
    # the base harness's fixed texts (a custom H0's instruction, when config.harness.spec is set)
    h = presets.resolve(run.harness.spec, e.name, e.protocol)
    yield h.system_prompt
    for m in h.preamble:
        yield m["content"]
    # the harness's own fixed texts (turn notes, hints) and common formatting
    yield "Your reply could not be parsed. Action: Operation Action: Answer Final Answer: []"


def train(run, out_dir, vocab_size: int):
    """Trains the tokenizer on ``training_corpus(run)`` and saves it to ``out_dir`` (a path or
    URI)."""
    return train_bpe(list(training_corpus(run)), out_dir, vocab_size,
                     pretokenizer=str(run.model.tokenizer_pretokenizer))


def train_bpe(texts: Iterable[str], out_dir, vocab_size: int, *, max_token_bytes: int = 0,
              pretokenizer: str = "bytelevel"):
    """A byte-level BPE of ``vocab_size`` tokens (byte alphabet + Qwen chat specials included)
    trained on ``texts`` and saved to ``out_dir``. ``max_token_bytes=0``: word-level merges (the
    GPT-2 pre-tokenizer splits at spaces and punctuation); ``> 0``: merges may cross words, up to
    that many bytes per token (phrase-level tokens for highly repetitive text such as code).
    ``pretokenizer``: ``PRETOKENIZERS`` (module docstring); "isolate" ignores ``max_token_bytes``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer(pretokenizer, cross_words=bool(max_token_bytes))
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, max_token_length=int(max_token_bytes) or None)
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=[t for t in SPECIAL_TOKENS
                                                              if t not in ("<|im_end|>", "<|endoftext|>")])
    workdir.write_dir(epath.Path(str(out_dir)), fast.save_pretrained)
    logging.info("trained task BPE tokenizer: %d tokens -> %s", len(fast), out_dir)
    return fast


def pre_tokenizer(kind: str, cross_words: bool = False):
    """The ``tokenizers`` pre-tokenizer for ``model.tokenizer_pretokenizer`` (module docstring);
    ``cross_words`` (bytelevel only): no word splitting, merges may cross words."""
    from tokenizers import Regex, pre_tokenizers

    if kind == "bytelevel":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not cross_words)
    if kind == "isolate":
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(ISOLATE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    raise ValueError(f"model.tokenizer_pretokenizer={kind!r}: expected one of {PRETOKENIZERS}")


def load(path):
    from transformers import PreTrainedTokenizerFast

    return workdir.read_dir(epath.Path(str(path)), PreTrainedTokenizerFast.from_pretrained)


def load_or_train(run, tokenizer_dir):
    """The task tokenizer kept in ``tokenizer_dir`` (``<workdir>/tokenizer``). On first use it is
    copied from ``model.init_from``'s workdir when that run kept one (its weights index that
    vocabulary), else trained."""
    if tokenizer_dir is None:
        raise ValueError("model.tokenizer='task_bpe' needs a workdir to keep the trained tokenizer")
    path = epath.Path(str(tokenizer_dir))
    if (path / "tokenizer.json").exists():
        return load(path)
    src = _init_from_tokenizer(run.model.init_from)
    if src is not None:
        path.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file():
                (path / f.name).write_bytes(f.read_bytes())
        logging.info("task tokenizer copied from model.init_from (%s)", src)
        return load(path)
    return train(run, path, int(run.model.tokenizer_vocab))


def _init_from_tokenizer(init: str):
    """``<model.init_from>/tokenizer`` (a training workdir's task BPE), when it exists."""
    if not init:
        return None
    root = resolve(init)
    for cand in (root / "tokenizer", root.parent / "tokenizer"):   # a workdir, or its checkpoints/
        if (cand / "tokenizer.json").exists():
            return cand
    return None
