"""BM25 product search with ``bm25s`` (WebShop uses a pyserini/Lucene BM25 index).

* Documents: WebShop's indexed text (``generator.search_document``: title, description, first
  bullet point, option text; lower-cased).
* Analyzer, as Anserini's default English analyzer: word tokens (letters/digits with inner
  ``.``/``'`` kept together, so ``6.7`` and ``l'eau`` stay one token), a trailing ``'s``
  dropped, Lucene's 33 English stop words removed, Porter stemming (PyStemmer's ``porter``).
* Scoring: Lucene BM25 (``bm25s`` method ``"lucene"``) with pyserini's defaults k1=0.9, b=0.4;
  a repeated query term counts once per occurrence (Anserini's bag-of-words query).
* Results: documents with a positive score, best first, ties by catalog position (Lucene's doc
  id order), at most ``k`` (WebShop: 50).

Building streams the catalog once: each document is analysed, its token ids appended to one
flat int32 array, and ``bm25s`` indexes that through a read-only sequence view (no per-document
Python lists kept). One ``SearchIndex`` is shared by every episode of a world; ``search`` is
read-only and thread-safe. ``save``/``load`` use ``bm25s``' own format (``load(mmap=True)``
memory-maps the arrays, so several processes share one copy through the page cache).
"""
from __future__ import annotations

import array
import json
import os
import re
import time
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
STOPWORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such "
                      "that the their then there these they this to was will with".split())
_TOKEN = re.compile(r"\w+(?:[.'’]\w+)*")
K1, B = 0.9, 0.4
SEARCH_RETURN_N = 50


class Analyzer:
    """Text -> stemmed terms (module docstring). Caches each surface token's stem."""

    def __init__(self):
        import Stemmer
        self._stem = Stemmer.Stemmer("porter").stemWord
        self._cache: dict = {}

    def term(self, tok: str) -> Optional[str]:
        t = self._cache.get(tok)
        if t is None:
            w = tok[:-2] if tok.endswith(("'s", "’s")) else tok
            t = "" if (not w or w in STOPWORDS) else self._stem(w)
            if len(self._cache) < 2_000_000:
                self._cache[tok] = t
        return t or None

    def __call__(self, text: str) -> list:
        out = []
        for tok in _TOKEN.findall(text.lower()):
            t = self.term(tok)
            if t:
                out.append(t)
        return out


class _FlatDocs:
    """A read-only sequence of per-document token-id lists over one flat int32 array."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat = flat
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self) -> Iterator[list]:
        flat, off = self.flat, self.offsets
        for d in range(len(off) - 1):
            yield flat[off[d]:off[d + 1]].tolist()


class SearchIndex:
    """BM25 over a product catalog; ``search(keywords) -> [catalog index, ...]``."""

    def __init__(self, retriever, analyzer: Optional[Analyzer] = None, stats: Optional[dict] = None):
        self.retriever = retriever
        self.analyzer = analyzer or Analyzer()
        self.vocab: dict = retriever.vocab_dict
        self.n_docs = int(retriever.scores["num_docs"])
        self.stats = dict(stats or {})

    # -- building -----------------------------------------------------------------------------
    @classmethod
    def build(cls, documents: Iterable[str], progress: Optional[Callable[[int], None]] = None,
              k1: float = K1, b: float = B) -> "SearchIndex":
        """Indexes ``documents`` (an iterable of texts in catalog order)."""
        import bm25s
        t0 = time.perf_counter()
        analyzer = Analyzer()
        vocab: dict = {}
        flat = array.array("i")
        offsets = array.array("q", [0])
        for n, text in enumerate(documents, 1):
            for term in analyzer(text):
                tid = vocab.get(term)
                if tid is None:
                    tid = vocab[term] = len(vocab)
                flat.append(tid)
            offsets.append(len(flat))
            if progress is not None and n % 10000 == 0:
                progress(n)
        if len(offsets) == 1:
            raise ValueError("SearchIndex.build: no documents to index")
        t1 = time.perf_counter()
        docs = _FlatDocs(np.frombuffer(flat, dtype=np.int32), np.frombuffer(offsets, np.int64))
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        retriever.index(bm25s.tokenization.Tokenized(ids=docs, vocab=vocab), show_progress=False)
        t2 = time.perf_counter()
        stats = {"n_docs": len(docs), "n_tokens": len(flat), "n_terms": len(vocab),
                 "nnz": int(retriever.scores["data"].shape[0]), "analyze_s": t1 - t0,
                 "bm25s_index_s": t2 - t1}
        return cls(retriever, analyzer, stats)

    # -- searching ----------------------------------------------------------------------------
    def query_ids(self, text: str) -> list:
        return [self.vocab[t] for t in self.analyzer(text) if t in self.vocab]

    def search(self, text: str, k: int = SEARCH_RETURN_N) -> list:
        """Catalog indices of the top ``k`` matches of ``text`` (module docstring)."""
        ids = self.query_ids(text)
        if not ids or k <= 0:
            return []
        scores = self.retriever.get_scores_from_ids(ids)    # >= 0 (Lucene's idf > 0)
        n_pos = int(np.count_nonzero(scores))     # documents sharing a term with the query
        if n_pos == 0:
            return []
        k = min(k, n_pos)
        # the k-th best score; everything above it sorted by (-score, doc id), then as many
        # documents tied at it as fit, lowest doc ids first (Lucene's order). np.partition is
        # slow on arrays of many equal values, so a short query (few matching documents)
        # partitions only the matching ones.
        if 4 * n_pos >= len(scores):
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            above = np.flatnonzero(scores > kth)
            tied = np.flatnonzero(scores == kth)
        else:
            pos = np.flatnonzero(scores)
            vals = scores[pos]
            kth = np.partition(vals, len(vals) - k)[len(vals) - k]
            above, tied = pos[vals > kth], pos[vals == kth]
        above = above[np.lexsort((above, -scores[above]))]
        return [int(d) for d in above] + [int(d) for d in tied[:k - len(above)]]

    @property
    def nbytes(self) -> int:
        s = self.retriever.scores
        return int(s["data"].nbytes + s["indices"].nbytes + s["indptr"].nbytes)

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.retriever.save(path)
        with open(os.path.join(path, "harness_jax_stats.json"), "w") as f:
            json.dump(self.stats, f)

    @classmethod
    def load(cls, path: str, mmap: bool = True) -> "SearchIndex":
        import bm25s
        if not os.path.isdir(path):
            raise FileNotFoundError(f"search index directory {path!r} does not exist")
        retriever = bm25s.BM25.load(path, mmap=mmap)
        stats = {}
        sp = os.path.join(path, "harness_jax_stats.json")
        if os.path.exists(sp):
            with open(sp) as f:
                stats = json.load(f)
        return cls(retriever, Analyzer(), stats)
