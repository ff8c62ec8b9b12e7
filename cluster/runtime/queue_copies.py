"""The copies of a key waiting aside in the timer queue, behind the copy that holds its place.

Two shards of one silo may each hold a live *copy* of a job under one id; the queue keeps one
place per key (see cluster.runtime.queue). ``Aside`` keeps the others: at most one item per copy
(``copy_of``: which copy an item is), never the copy queued under the key, and hands them back
earliest first when the key's place is free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Aside(Generic[T]):
    """Per key, ``(due, item)`` of the copies not holding its place."""

    __slots__ = ("_copy_of", "waiting")

    def __init__(self, copy_of: Callable[[T], object]) -> None:
        self._copy_of = copy_of
        self.waiting: dict[str, list[tuple[int, T]]] = {}

    def takes_place(self, key: str, current: tuple[int, T] | None, due: int, item: T) -> bool:
        """Whether ``item``, due at ``due``, takes ``key``'s place from ``current`` (what is queued
        there, or None); if not, it is set aside. Another copy queued there is set aside in its
        turn, unless it is due no later. One item per copy waits aside: a newer one replaces it."""
        copy_of = self._copy_of
        mine = copy_of(item)
        aside = self.waiting.get(key)
        if aside:
            aside[:] = [kept for kept in aside if copy_of(kept[1]) != mine]
        takes = True
        if current is not None and current[1] is not item and copy_of(current[1]) != mine:
            takes = current[0] > due  # the copy due first holds the place: none waits behind a later one
            waiting = current if takes else (due, item)
            if aside is None:
                aside = self.waiting[key] = []
            aside.append(waiting)
        if aside is not None and not aside:
            del self.waiting[key]
        return takes

    def earlier_than(self, key: str, due: int) -> bool:
        """Whether a copy waits under ``key`` that is due before ``due``."""
        aside = self.waiting.get(key)
        return bool(aside) and min(kept[0] for kept in aside) < due  # type: ignore[union-attr]

    def next_turn(self, key: str, may_run: Callable[[str, T], bool]) -> tuple[int, T] | None:
        """The earliest copy under ``key`` that ``may_run``, taken out; the earlier ones it refuses are dropped."""
        aside = self.waiting.get(key)
        if not aside:
            return None
        aside.sort(key=lambda kept: kept[0])
        found = None
        while aside and found is None:
            due, item = aside.pop(0)
            if may_run(key, item):
                found = due, item
        if not aside:
            del self.waiting[key]
        return found

    def take(self, key: str, which: Callable[[T], bool]) -> tuple[int, T] | None:
        """The item under ``key`` that ``which`` picks, taken out; None if none waits."""
        aside = self.waiting.get(key, [])
        for i, kept in enumerate(aside):
            if which(kept[1]):
                del aside[i]
                if not aside:
                    del self.waiting[key]
                return kept
        return None

    def forget(self, owned: Callable[[T], bool]) -> None:
        """Drop every item that is ``owned``."""
        for key, aside in list(self.waiting.items()):
            aside[:] = [kept for kept in aside if not owned(kept[1])]
            if not aside:
                del self.waiting[key]
