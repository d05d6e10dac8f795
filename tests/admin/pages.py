"""Read the admin's HTML the way an operator reads the page: rows, cells, links and form controls.

Django's admin markup is regular (one `field-<name>` cell per column), so small regular
expressions are enough; no HTML library is added for the tests.
"""

from __future__ import annotations

import html
import re
from typing import Any

CELL = re.compile(r'<(td|th) class="field-(\w+)"[^>]*>(.*?)</\1>', re.S)
TAG = re.compile(r"<[^>]+>")
CHANGE_LINK = re.compile(r'href="/admin/reliableq/job/([0-9a-f-]{36})/change/[?"]')


def body(response: Any) -> str:
    return response.content.decode()


def text(fragment: str) -> str:
    """The visible text of an HTML fragment, whitespace collapsed."""
    return " ".join(html.unescape(TAG.sub(" ", fragment)).split())


def section(page: str, start_marker: str, end_marker: str) -> str:
    """The HTML from `start_marker` to the first `end_marker` after it (AssertionError if absent)."""
    start = page.find(start_marker)
    assert start >= 0, f"{start_marker!r} is not on the page"
    end = page.find(end_marker, start)
    assert end >= 0, f"{end_marker!r} does not follow {start_marker!r}"
    return page[start:end]


def rows(page: str, table_marker: str) -> list[dict[str, str]]:
    """The body rows of the table after `table_marker`: one {column name: cell HTML} per row."""
    table = section(page, table_marker, "</table>")
    tbody = table.split("<tbody>", 1)[1] if "<tbody>" in table else table
    result = []
    for chunk in re.split(r"<tr[\s>]", tbody)[1:]:
        cells = {name: inner for _, name, inner in CELL.findall(chunk)}
        if cells:
            result.append(cells)
    return result


def job_rows(response: Any) -> list[dict[str, str]]:
    """The rows of the job changelist (table#result_list), in page order; [] when it shows no job."""
    page = body(response)
    if 'id="result_list"' not in page:
        return []
    return rows(page, 'id="result_list"')


def listed_ids(response: Any) -> list[str]:
    """Full ids of the jobs on the changelist page, in page order (from each row's change link)."""
    ids = []
    for row in job_rows(response):
        match = CHANGE_LINK.search(row["short_id"])
        assert match, row["short_id"]
        ids.append(match.group(1))
    return ids


def attempt_rows(response: Any) -> list[dict[str, str]]:
    """The attempt-history inline rows on a job's page, {column: visible text}."""
    return [{k: text(v) for k, v in row.items()} for row in rows(body(response), 'id="attempt_set-group"')]


def form_controls(fragment: str) -> list[str]:
    """Every <input>, <textarea>, <select> and <button> tag in the fragment, except hidden inputs."""
    controls = re.findall(r"<(?:input|textarea|select|button)\b[^>]*>", fragment)
    return [c for c in controls if not re.search(r'type="hidden"', c)]


def action_choices(response: Any) -> list[str]:
    """The values of the changelist's action dropdown ([] when the page offers no actions)."""
    page = body(response)
    match = re.search(r'<select name="action"[^>]*>(.*?)</select>', page, re.S)
    if not match:
        return []
    return [v for v in re.findall(r'<option value="([^"]*)"', match.group(1)) if v]


def messages_of(response: Any) -> list[str]:
    """The admin messages shown on the page (after following a redirect)."""
    page = body(response)
    if 'class="messagelist"' not in page:
        return []
    listing = section(page, 'class="messagelist"', "</ul>")
    return [text(m) for m in re.findall(r"<li[^>]*>(.*?)</li>", listing, re.S)]
