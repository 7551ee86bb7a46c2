"""The user guides the web page links to (docs/check-specs.md, docs/ci.md), rendered to HTML at
``/guide/NAME``: the page's "every field of a check spec" is one click away, served by the app
itself (no network). Markdown is rendered without raw HTML; the pages load only the app's CSS."""

from __future__ import annotations

import functools
import html
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from markdown_it import MarkdownIt

from api.problems import not_found

DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"
GUIDES = {"check-specs": "Check specs", "ci": "CI and the command-line client"}
GUIDE_CSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'"

router = APIRouter(include_in_schema=False)


@functools.cache
def _render(name: str) -> str:
    text = (DOCS_DIR / f"{name}.md").read_text(encoding="utf-8")
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(GUIDES[name])} · onnx-reducer</title>"
        '<link rel="stylesheet" href="/ui/app.css"></head>'
        f'<body class="guide"><main id="guide">{body}</main></body></html>'
    )


@router.get("/guide/{name}")
def guide(name: str) -> HTMLResponse:
    """docs/NAME.md as a page; 404 for any other name (or a checkout without docs/)."""
    if name not in GUIDES or not (DOCS_DIR / f"{name}.md").is_file():
        raise not_found(f"Guide '{name[:50]}'")
    return HTMLResponse(_render(name), headers={"Content-Security-Policy": GUIDE_CSP, "Cache-Control": "no-cache"})
