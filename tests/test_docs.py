"""The documentation: the site builds with warnings as errors, and the README's links lead somewhere."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import markdown

ROOT = Path(__file__).resolve().parent.parent


class _Links(HTMLParser):
    """Every href and src of a rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def relative_links(markdown_file: Path) -> list[str]:
    """The links of a Markdown file that point into the repository (no scheme, no host, not an anchor).

    Rendered first, so that text in code blocks and code spans never reads as a link.
    """
    parser = _Links()
    parser.feed(markdown.markdown(markdown_file.read_text(encoding="utf-8")))
    relative = []
    for target in parser.targets:
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not parts.path:
            continue  # http(s), mailto, or an anchor within the page
        relative.append(unquote(parts.path))
    return relative


def test_the_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"
    for page in (
        "index.html",
        "tutorial/index.html",
        "reference/settings/index.html",
        "explanation/guarantee/index.html",
        "benchmarks/index.html",
        "internals/benchmark-record/index.html",
    ):
        assert (site / page).is_file(), page


def test_every_relative_link_in_the_readme_points_to_an_existing_file() -> None:
    links = relative_links(ROOT / "README.md")
    assert any(link.startswith("docs/") for link in links), "the README links into docs/"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"


def test_the_benchmarks_page_reads_in_five_minutes_and_links_the_record() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert len(page.splitlines()) < 250, "docs/benchmarks.md is a summary: runs go to the record"
    assert "internals/benchmark-record.md" in page


def test_the_settings_reference_lists_every_key_of_reliableq_and_charges() -> None:
    from charges.conf import DEFAULTS as CHARGES_DEFAULTS
    from reliableq.conf import DEFAULTS as RELIABLEQ_DEFAULTS

    page = (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    undocumented = [key for key in [*RELIABLEQ_DEFAULTS, *CHARGES_DEFAULTS] if f"| `{key}` |" not in page]
    assert undocumented == [], f"docs/reference/settings.md has no table row for: {undocumented}"
