"""Reading a sweep's page as a browser gets it: its table rows, what it would fetch, and the frontier figure's traces
as the page hands them to plotly.js."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any


class Page(HTMLParser):
    """The page's table rows (configuration -> class) and everything it would fetch (src/href)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}
        self.fetches: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        found = dict(attrs)
        if tag == "tr" and found.get("data-configuration"):
            self.rows[str(found["data-configuration"])] = found.get("class") or ""
        for name in ("src", "href"):
            if found.get(name) and not str(found[name]).startswith("#"):
                self.fetches.append(str(found[name]))


def parsed(page: str) -> Page:
    reader = Page()
    reader.feed(page)
    return reader


def traces(page: str) -> dict[str, dict[str, Any]]:
    """The frontier figure's traces by name, as the page hands them to plotly.js."""
    start = page.index("[", page.index("Plotly.newPlot("))
    data, _ = json.JSONDecoder().raw_decode(page, start)
    return {trace["name"]: trace for trace in data}
