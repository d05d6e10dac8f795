"""Constructors for the frozen records made for every job, setting their slots directly.

A frozen dataclass's __init__ sets each field through object.__setattr__, about 0.15 µs a field
on this project's machines: a ClaimedJob (19 fields) cost 2.8 µs, more than a no-op job's own
work. maker(cls) takes the same keyword arguments as cls(...), applies the same defaults and
default factories, and makes an equal object in about half the time. It is generated code, as
dataclasses' own __init__ is; tests/unit/test_makers.py compares the two on every field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def maker(cls: type[T]) -> Callable[..., T]:
    """A function taking cls's fields by keyword (defaults as in cls) that returns a cls without
    calling its __init__. Only for slotted dataclasses with no __post_init__."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in vars(cls) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass without __post_init__")
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_missing": dataclasses.MISSING}
    params: list[str] = []
    body = ["    obj = _new(_cls)"]
    fields = dataclasses.fields(cls)
    for n, f in enumerate(fields):
        namespace[f"_set{n}"] = vars(cls)[f.name].__set__  # the slot's member descriptor
        if f.default is not dataclasses.MISSING:
            namespace[f"_default{n}"] = f.default
            params.append(f"{f.name}=_default{n}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory{n}"] = f.default_factory
            params.append(f"{f.name}=_missing")
            body.append(f"    if {f.name} is _missing: {f.name} = _factory{n}()")
        else:
            params.append(f.name)
        body.append(f"    _set{n}(obj, {f.name})")
    # A parameter named like one of the generated code's names would shadow it inside make().
    for f in fields:
        if f.name in namespace or f.name == "obj":
            raise TypeError(f"{cls.__name__}.{f.name} would shadow a name of the generated code")
    source = f"def make(*, {', '.join(params)}):\n" + "\n".join(body) + "\n    return obj\n"
    exec(compile(source, f"<maker of {cls.__qualname__}>", "exec"), namespace)  # the text is ours, made above
    make: Callable[..., T] = namespace["make"]
    make.__qualname__ = f"maker({cls.__qualname__})"
    return make
