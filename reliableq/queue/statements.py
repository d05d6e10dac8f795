"""Every named statement of the queue layer, with its text: `manage.py reliableq_statements [NAME ...]`.

Two kinds are listed. Each module-level statement, a str named `*_SQL` in a module of this
package (named `<module>.<NAME>`). And each statement made per shape (a finish with or without
workflow members, a claim for its queues...), in the shapes listed in SHAPES, named after what it
does. Every statement that changes a job's status is one of the door's (reliableq.queue.door) and
begins with `/* reliableq:<name> */`; tests/test_statement_index.py fails if the door makes
one that no listed statement shows.

No function of the layer sends a statement written inline: tests/test_statement_index.py fails
on a literal handed to execute() and its kin, but for the few whose text is not a statement of
ours (an ANALYZE of a table named by the caller, the EXPLAIN of a caller's statement).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable

from django.contrib.auth import get_user_model

from ..registry import Rate
from . import db, door, enqueue, fairness, finishes, limits, pick, prune, rescues, tokens

# Each statement made per shape, by name: how to make it in a representative shape.
SHAPES: dict[str, Callable[[], str]] = {
    "claim": lambda: pick.take_sql(("default",), 10, (), None)[0],
    "claim.queues": lambda: pick.take_sql(("default", "mail"), 10, (), None)[0],
    "claim.floored": lambda: pick.take_sql(("default",), 10, (), None, floored=True)[0],
    "claim.floored.head": lambda: pick.take_sql(("default",), 10, (), None, floored=True, walk=False)[0],
    "claim.fair": lambda: pick.take_sql(("default",), 10, (), None, fair=("fair.kind",))[0],
    "claim.rated": lambda: limits.rated_sql(("default",), 10, "rated.kind", Rate(10, 1.0))[0],
    "claim.capped": lambda: pick.take_sql(("default",), 10, (), "capped.kind")[0],
    "claim.keyed": lambda: limits.keyed_sql(("default",), 10, "keyed.kind", 2)[0],
    "finish": lambda: finishes._finish_sql(True),
    "finish.parks": lambda: finishes._finish_sql(True, True),
    "finish.succeeded": lambda: finishes._finish_sql(True, succeeded=True),
    "finish.zeroed": lambda: door.ZEROED_SQL,
    "finish_jobs": lambda: finishes._finish_sql(False),
    "finish_jobs.parks": lambda: finishes._finish_sql(False, True),
    "rescue": lambda: rescues.rescue_sql(("default",))[0],
    "rescue_floored": lambda: rescues.rescue_sql(("default",), True)[0],
    "enqueue": lambda: enqueue._submit_sql(None, keys=False),
    "enqueue.keyed": lambda: enqueue._submit_sql(None),
    "enqueue.fair": lambda: enqueue._submit_sql(True),
    "enqueue.bounded": lambda: enqueue._bounded_submit_sql(None),
    "enqueue.debounce": lambda: enqueue._debounce_sql(None),
    "enqueue.of_kind": lambda: enqueue._of_kind_sql(None),
    "enqueue.of_kind.fair": lambda: enqueue._of_kind_sql(True),
    "fair_heads": lambda: fairness.heads_sql(),
    "prune.delete": lambda: prune._delete_sql(prune._PRUNE_BATCH_SQL),
    "purge.delete": lambda: prune._delete_sql(prune._MEMBERS_KEPT),
    "tokens.held": lambda: tokens.fetch_held_sql(("view_job",), get_user_model()),
    "tokens.lookup": lambda: tokens.lookup_sql(get_user_model(), "authtoken_token", ("view_job",))[0],
    "tokens.call": lambda: tokens.call_sql(("view_job",)),
    "tokens.function": lambda: tokens.create_function_sql(get_user_model(), "authtoken_token"),
    "tokens.drop_function": tokens.drop_function_sql,
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
