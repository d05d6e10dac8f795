"""Every named statement of the queue layer, with its text: `manage.py reliableq_statements [NAME ...]`.

Two kinds are listed. Each module-level statement, a str named `*_SQL` in a module of this
package (named `<module>.<NAME>`). And each statement made per shape (a finish with or without
workflow members, a claim for its queues...), in the shapes listed in SHAPES, named after what it
does. Every statement that changes a job's status is one of the door's (reliableq.queue.door) and
begins with `/* reliableq:<name> */`; tests/test_statement_index.py fails if the door makes
one that no listed statement shows. Statements that a function sends inline (the reads of the
dashboard's figures, say) are not listed yet.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable

from ..registry import Rate
from . import db, enqueue, finishes, limits, pick, rescues

# Each statement made per shape, by name: how to make it in a representative shape.
SHAPES: dict[str, Callable[[], str]] = {
    "claim": lambda: pick.take_sql(("default",), 10, (), None)[0],
    "claim.queues": lambda: pick.take_sql(("default", "mail"), 10, (), None)[0],
    "claim.floored": lambda: pick.take_sql(("default",), 10, (), None, floored=True)[0],
    "claim.fair": lambda: pick.take_sql(("default",), 10, (), None, fair=("fair.kind",))[0],
    "claim.rated": lambda: limits.rated_sql(("default",), 10, "rated.kind", Rate(10, 1.0))[0],
    "finish": lambda: finishes._finish_sql(True),
    "finish.parks": lambda: finishes._finish_sql(True, True),
    "finish_jobs": lambda: finishes._finish_sql(False),
    "finish_jobs.parks": lambda: finishes._finish_sql(False, True),
    "rescue": lambda: rescues.rescue_sql(("default",))[0],
    "rescue_floored": lambda: rescues.rescue_sql(("default",), True)[0],
    "enqueue": lambda: enqueue._submit_sql(None),
    "enqueue.fair": lambda: enqueue._submit_sql(True),
    "enqueue.bounded": lambda: enqueue._bounded_submit_sql(None),
}


def index() -> dict[str, str]:
    """Every listed statement's name and text: the module-level ones, then the shaped ones."""
    found: dict[str, str] = {}
    listed: set[str] = set()
    for info in sorted(pkgutil.iter_modules(sys.modules[__package__].__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{__package__}.{info.name}")
        for name, value in sorted(vars(module).items()):
            # Listed once, under the first module that has it (another may import it).
            if name.lstrip("_").endswith("SQL") and isinstance(value, str) and value not in listed:
                found[f"{info.name}.{name}"] = value
                listed.add(value)
    with db.atomic():  # the ORM compiles a pick's FOR UPDATE only inside a transaction; nothing is sent
        for name, make in SHAPES.items():
            found[name] = make()
    return found
