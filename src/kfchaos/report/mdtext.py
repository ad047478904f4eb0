"""Text from outside, made inert where it lands in GitHub Flavored Markdown: the one escaping function for every
Markdown that quotes a run folder, a KFP run or a verdict (`kfchaos history --compare`, posted as a pull request
comment by the gate that `kfchaos init --repo` writes).

The text is set on one line (line breaks and control characters become spaces, bidirectional and other invisible
format characters are dropped), so it can neither end a table row or a list item nor start a block of its own (a
heading, a quote, a closing code fence). On that line, `markdown_text` leaves nothing Markdown or GitHub reads as
syntax:
- links and images (`[x](http://...)`, `![x](...)`, `[x][ref]`, footnotes): every `[` and `]` is escaped;
- raw HTML and `<http://...>` autolinks: `<` is escaped, `&` too (so an entity stays the text it was);
- bare links GitHub makes by itself (`http://...`, `www....`): the `//` after a scheme's colon and the `.` after
  `www` are escaped, which the autolinker does not read through;
- `@mentions` (and team mentions, and e-mail links): a zero-width joiner (U+200D) follows every `@`, so GitHub sees
  no name after it and notifies no one; it shows as `@name`. The same after every `#`, so `#12` or `owner/repo#12`
  links to no issue (a cross-reference would show this comment in that issue);
- emphasis, strike-through, code spans and fences, math, table cells: `* _ ~ \\ ` $ |` and `#` are escaped.
Escaping with a backslash is CommonMark's own (any ASCII punctuation), so the text reads as it was.

`code=True` sets a plain identifier (a check name, a version, a run id) as a code span, in which nothing is read as
syntax; a value that cannot be one as is (a backtick, a `|`, which would end a table cell, an edge space) is escaped
as text instead. Every value is cut at `limit` characters: a comment has a size limit, and a planted name must not
push the verdict out of it.
"""

from __future__ import annotations

import re
import unicodedata

ZWJ = "\u200d"
# The cut for prose (a verdict's reason, a failure mode's paragraph, what an evidence item shows) rather than a name:
# longer than the default 300, still bounded, so a planted one cannot make report.md too long to paste anywhere.
PROSE_LIMIT = 2000
_SPECIAL = re.compile(r"([\\`*_~\[\]<&|#$])")
_SCHEME = re.compile(r"(?<=:)//", re.IGNORECASE)
_WWW = re.compile(r"(www)\.", re.IGNORECASE)
_CODE_SAFE = re.compile(r"[^`|\s](?:[^`|]*[^`|\s])?")


def _one_line(value: str) -> str:
    out = []
    for char in value:
        category = unicodedata.category(char)
        if category in ("Cc", "Zl", "Zp"):
            out.append(" ")
        elif category != "Cf":  # bidirectional overrides, zero-width characters, soft hyphens: dropped
            out.append(char)
    return "".join(out)


def markdown_text(value: object, *, code: bool = False, limit: int = 300) -> str:
    """`value` as inline Markdown text that renders as itself and does nothing else (module docstring); as a code
    span with `code` where it can be one."""
    text = _one_line(str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    if code and _CODE_SAFE.fullmatch(text):
        return f"`{text}`"
    text = _SPECIAL.sub(r"\\\1", text)
    text = _SCHEME.sub(r"\\/\\/", text)
    text = _WWW.sub(r"\1\\.", text)
    return text.replace("@", "@" + ZWJ).replace("#", "#" + ZWJ)
