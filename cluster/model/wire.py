"""Exact msgpack encoding for what the shard log stores: times as integer microseconds, code as paths.

Everything a job carries is written by one process and replayed by another, possibly a newer
one. So times travel as integers (no float rounding, no time zone surprises) and code travels
as an importable ``module:QualName`` path, never as a pickled object.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import msgpack

__all__ = [
    "pack",
    "unpack",
    "datetime_to_us",
    "us_to_datetime",
    "timedelta_to_us",
    "us_to_timedelta",
    "qualified_name",
    "check_code_path",
    "resolve_code_path",
    "memoized",
]

_T = TypeVar("_T")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def pack(obj: Any) -> bytes:
    """Return the msgpack bytes of ``obj`` as the shard log writes them (str and bytes kept apart)."""
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


def unpack(data: bytes) -> Any:
    """Return the value ``pack`` wrote; integer map keys are allowed because job data may use them."""
    # strict_map_key=False: the default (str/bytes keys only) guards against hash flooding from
    # untrusted peers; the shard log is written by our own silos, and user data may have int keys.
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def datetime_to_us(dt: datetime) -> int:
    """Return an aware datetime as integer microseconds since the Unix epoch (exact, any zone)."""
    return (dt - _EPOCH) // _MICROSECOND


def us_to_datetime(us: int) -> datetime:
    """Return the aware UTC datetime ``datetime_to_us`` encoded."""
    return _EPOCH + timedelta(microseconds=us)


def timedelta_to_us(td: timedelta) -> int:
    """Return a timedelta as integer microseconds (exact)."""
    return td // _MICROSECOND


def us_to_timedelta(us: int) -> timedelta:
    """Return the timedelta ``timedelta_to_us`` encoded."""
    return timedelta(microseconds=us)


def qualified_name(obj: Any) -> str | None:
    """Return ``module:QualName`` for a module-level class or function, else None.

    A Ray actor class (``@ray.remote class C``) counts as its underlying class. Lambdas,
    closures, bound methods, instances and anything defined in ``__main__`` give None: another
    process could not import them.
    """
    obj = getattr(obj, "__ray_actor_class__", obj)
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or inspect.ismethod(obj):
        return None
    if module == "__main__":
        return None  # a silo process imports a different __main__
    path = f"{module}:{qualname}"
    if not _is_code_path(path):
        return None  # "<lambda>" and "f.<locals>.g" are not identifiers
    return path


def check_code_path(path: object) -> str | None:
    """Return ``path`` in ``module:QualName`` form, or None when it has another shape.

    ``pkg.mod.Name`` (dots only) is read as module ``pkg.mod`` and name ``Name``; use the colon
    form for nested names.
    """
    if not isinstance(path, str):
        return None
    if ":" not in path:
        module, _, name = path.rpartition(".")
        path = f"{module}:{name}"
    return path if _is_code_path(path) else None


def resolve_code_path(path: str) -> Any:
    """Import ``module:QualName`` and return the object it names (ImportError/AttributeError if gone)."""
    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def memoized(memo: dict[Any, Any] | None, key: Any, build: Callable[..., _T], *args: Any) -> _T:
    """Return ``build(*args)``, computed once per ``key`` when a ``memo`` dict is given.

    Replay decodes the same schedule or policy for many jobs; a memo owned by the replaying
    caller (not a global cache) lets it parse each once. Only for immutable results.
    """
    if memo is None:
        return build(*args)
    value: _T | None = memo.get(key)
    if value is None:
        value = memo[key] = build(*args)
    return value


def _is_code_path(path: str) -> bool:
    module, sep, qualname = path.partition(":")
    if not sep:
        return False
    parts = module.split(".") + qualname.split(".")
    return all(part.isidentifier() for part in parts)
