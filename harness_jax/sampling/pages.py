"""Page allocator of the paged KV cache (host side, no device code).

A pool of ``num_pages`` pages of ``page_size`` tokens; each slot owns an ordered list of pages
(its block table row). ``grow(slot, n)`` gives a slot pages for ``n`` tokens from the free list,
``release(slot)`` returns them. The block table mirror is uploaded to the device cache before a
step whenever it changed (``dirty``).
"""
from __future__ import annotations

import numpy as np


class PagePool:
    """Free list and per-slot pages of one paged cache."""

    def __init__(self, num_pages: int, page_size: int, max_slots: int, pages_per_slot: int):
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"PagePool: num_pages={num_pages} and page_size={page_size} must be >= 1")
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.pages_per_slot = int(pages_per_slot)
        self._free = list(range(self.num_pages - 1, -1, -1))    # a stack: low page ids first
        self.owned: list[list[int]] = [[] for _ in range(max_slots)]
        self.table = np.zeros((max_slots, self.pages_per_slot), np.int32)
        self.dirty = True
        self.peak_used = 0

    def pages_for(self, n_tokens: int) -> int:
        return -(-int(n_tokens) // self.page_size)

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_pages - len(self._free)

    def can_grow(self, slot: int, n_tokens: int) -> bool:
        return self.pages_for(n_tokens) - len(self.owned[slot]) <= len(self._free)

    def grow(self, slot: int, n_tokens: int) -> bool:
        """Pages for ``n_tokens`` tokens in ``slot`` (no-op if it has them); False if the free
        list is too short (nothing is taken then)."""
        need = min(self.pages_for(n_tokens), self.pages_per_slot) - len(self.owned[slot])
        if need <= 0:
            return True
        if need > len(self._free):
            return False
        own = self.owned[slot]
        for _ in range(need):
            self.table[slot, len(own)] = page = self._free.pop()
            own.append(page)
        self.dirty = True
        self.peak_used = max(self.peak_used, self.used)
        return True

    def release(self, slot: int) -> int:
        """Returns every page of ``slot`` to the free list; how many."""
        own = self.owned[slot]
        n = len(own)
        self._free.extend(reversed(own))
        self.owned[slot] = []
        return n
