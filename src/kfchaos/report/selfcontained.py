"""What every self-contained page of kfchaos shares: the run report's (kfchaos.report.page), the sweep's
(kfchaos.tune.page) and the history's (kfchaos.history.render). One style, the JSON data block a page carries
for whoever reads it after, and the Content-Security-Policy that lets a page run its own scripts only, so that
a page opened as a file, offline or in the KFP UI's sandboxed viewer, neither reaches the network nor runs
text from outside.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html import escape
from typing import Any

# The pages' one style: the run report's and the pages built like it (kfchaos.tune.page).
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;
color:#222;line-height:1.4}
h1{margin:.2em 0;font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;width:100%;margin:.5em 0}
td,th{border:1px solid #ddd;padding:4px 8px;font-size:13px;vertical-align:top;text-align:left}
th{background:#f6f6f6}td.num{text-align:right;white-space:nowrap}
td.reason{white-space:normal;overflow-wrap:anywhere;word-break:break-word}
.PASS{color:#1a7f37}.FAIL{color:#c22}.INCONCLUSIVE{color:#9a6700}.SKIPPED{color:#777}
.badge{display:inline-block;padding:.1em .6em;border-radius:.3em;color:#fff;font-weight:600}
.badge.PASS{background:#1a7f37}.badge.FAIL{background:#c22}.badge.INCONCLUSIVE{background:#9a6700}
.header{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:2px 14px;font-size:13px;
background:#fafafa;border:1px solid #eee;padding:8px 12px;border-radius:6px}
.header b{color:#555;font-weight:600}.warn{background:#fff8e1;border-left:4px solid #e0a800;padding:4px 10px}
.stage{border:1px solid #eee;border-radius:6px;padding:6px 12px;margin:10px 0}
.mode{border-left:4px solid #c22;padding:2px 12px;margin:12px 0;background:#fffafa}
details{margin:1em 0}summary{cursor:pointer;color:#555}pre{font-size:11px;overflow:auto;max-height:30em}
.legend span{display:inline-block;width:14px;height:10px;margin:0 4px 0 10px;vertical-align:middle}
"""


def json_block(data: Any) -> str:
    # "</" would end the <script> element early; JSON allows "<\/" for it.
    return json.dumps(data, default=str).replace("</", "<\\/")


_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S | re.I)
_META_CHARSET = "<meta charset='utf-8'>"


def script_hashes(page: str) -> list[str]:
    """The CSP source of each script the page runs ('sha256-<base64>' of its text as written), data blocks left out."""
    found = {
        "'sha256-" + base64.b64encode(hashlib.sha256(m["body"].encode("utf-8")).digest()).decode() + "'"
        for m in _SCRIPT.finditer(page)
        if "application/json" not in m["attrs"]
    }
    return sorted(found)


def with_policy(page: str) -> str:
    """The page with a Content-Security-Policy that runs its own scripts only (each by its hash: plotly.js and the
    plots' calls), so that text from outside that ever escaped its escaping could not run: no other inline script,
    no script or anything else from elsewhere, no form, no base. Styles stay inline (plotly sets them); images and
    fonts only as data: URLs. A <meta> policy, since the page is opened as a file or inside the KFP UI's
    sandboxed viewer (srcdoc), where no header can carry it."""
    policy = "; ".join(
        [
            "default-src 'none'",
            "script-src " + " ".join(script_hashes(page)),
            "style-src 'unsafe-inline'",
            "img-src data: blob:",
            "font-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )
    meta = f'<meta http-equiv="Content-Security-Policy" content="{escape(policy)}">'
    return page.replace(_META_CHARSET, _META_CHARSET + meta, 1)
