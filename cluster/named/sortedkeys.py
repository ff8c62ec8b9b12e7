"""The keys of a registry bucket in order, cheap to change one at a time (issue 25 point 4).

A bucket's owner answers a page from the keys in order and a count from a key's rank. One sorted
list did both, but a key added or removed moves every key after it: at 250,000 names a bucket
(1,000,000 in four) that is 18-85 µs a put or delete (quiet to loaded machine), paid on the put
path once anything was listed. Here the keys are kept in sorted chunks of at most ``2 * CHUNK``, found by each chunk's
last key, so a change moves at most a chunk, a page starts after two bisections, and a rank sums
the lengths of the chunks before it (a few hundred at a million keys). Measured at 250,000 keys in
one process: an add 1.7 µs against the list's 18-20 µs, a remove 1.3-1.5 µs against 11-12 µs, a
rank 5 µs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

__all__ = ["CHUNK", "SortedKeys"]

CHUNK = 1000


class SortedKeys:
    """Distinct strings in order: add, remove, rank, and iterate from a key."""

    def __init__(self, keys: Iterable[str] = (), chunk: int = CHUNK) -> None:
        ordered = sorted(keys)
        self._chunk = chunk
        self._chunks = [ordered[i:i + chunk] for i in range(0, len(ordered), chunk)]
        self._maxes = [c[-1] for c in self._chunks]  # the last key of each chunk, to find a key's chunk
        self._len = len(ordered)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            yield from chunk

    def add(self, key: str) -> None:
        """Add ``key``, which is not here."""
        if not self._chunks:
            self._chunks, self._maxes = [[key]], [key]
        else:
            i = min(bisect.bisect_left(self._maxes, key), len(self._chunks) - 1)
            chunk = self._chunks[i]
            bisect.insort(chunk, key)
            self._maxes[i] = chunk[-1]
            if len(chunk) > 2 * self._chunk:  # split: no chunk grows with the bucket
                half = len(chunk) // 2
                self._chunks[i:i + 1] = [chunk[:half], chunk[half:]]
                self._maxes[i:i + 1] = [chunk[half - 1], chunk[-1]]
        self._len += 1

    def remove(self, key: str) -> None:
        """Remove ``key``; ``KeyError`` if it is not here."""
        i = bisect.bisect_left(self._maxes, key)
        chunk = self._chunks[i] if i < len(self._chunks) else []
        j = bisect.bisect_left(chunk, key)
        if j == len(chunk) or chunk[j] != key:
            raise KeyError(key)
        del chunk[j]
        if chunk:
            self._maxes[i] = chunk[-1]
        else:
            del self._chunks[i], self._maxes[i]
        self._len -= 1

    def rank(self, key: str) -> int:
        """How many keys sort before ``key``."""
        i = bisect.bisect_left(self._maxes, key)
        before = sum(len(c) for c in self._chunks[:i])
        return before if i == len(self._chunks) else before + bisect.bisect_left(self._chunks[i], key)

    def since(self, key: str, *, inclusive: bool) -> Iterator[str]:
        """The keys after ``key`` in order (and ``key`` itself if here and ``inclusive``)."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        i = find(self._maxes, key)
        if i == len(self._chunks):
            return
        yield from self._chunks[i][find(self._chunks[i], key):]
        for chunk in self._chunks[i + 1:]:
            yield from chunk
