"""What an issue text says about code: code spans, identifiers, paths, dotted names, traceback frames."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

FENCE_RE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
INLINE_RE = re.compile(r"`([^`\n]+)`")
INDENTED_RE = re.compile(r"(?:^(?: {4}|\t).*\n?)+", re.MULTILINE)
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
PATH_RE = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*[\w.-]+\.py\b")
"""A path starts where a run of path characters starts (tried at every dot of a long dotted name, it backtracked
over the rest of the name each time: quadratic)."""
FRAME_RES = (
    re.compile(r'File "(?P<path>[^"]+\.py)", line (?P<line>\d+), in (?P<func>[\w<>.]+)'),
    re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+):(?: in (?P<func>[\w<>.]+))?", re.MULTILINE),
    re.compile(r"^[ \t]*File (?P<path>[^\s\"]+\.py):(?P<line>\d+), in (?P<func>[\w<>.]+)", re.MULTILINE),
)
"""`File "x.py", line 3, in f` (Python), `x.py:3: in f` (pytest), `File ~/x.py:3, in Class.f(self)` (IPython 8)."""
CAMEL_RE = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")
SNAKE_RE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
CALL_RE = re.compile(r"(?:(?<![\w.])|(?<=\.)(?<!\w\.))[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?=\()")
"""`Rational(` or `sympy.Rational(` in prose (a dotted name from its start, or a method after a `.` that follows no
name: `.replace(`, `x[0].sum(`; tried at every dot inside a long dotted name, it scanned the rest of the name each
time): code written without backticks, counted as code (19 of 169 dev issues call a name only in prose;
leave-one-repository-out, the same fold weights: file@5 87.6 -> 88.2 %, entity@10 68.5 -> 69.1 % against counting
them as prose)."""
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
IMPORT_RE = re.compile(
    r"^[ \t]*(?:>>>[ \t]*)?(?:from[ \t]+(?P<module>[\w.]+)[ \t]+)?import[ \t]+(?P<names>[\w., \t]+)$", re.MULTILINE
)
ASSIGNED_RE = re.compile(
    r"^[ \t]*(?:>>>[ \t]*)?(?P<names>[A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*=(?!=)", re.MULTILINE
)
PROMPT = r"^[ \t]*(?:>>>[ \t]*|\.\.\.[ \t]*)?"
DEFINED_RES = (
    re.compile(PROMPT + r"(?:async[ \t]+)?(?:class|def)[ \t]+(?P<name>[A-Za-z_]\w*)", re.MULTILINE),
    re.compile(PROMPT + r"self\.(?P<name>[A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)", re.MULTILINE),
    re.compile(r"^[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*:[ \t]*[A-Za-z_][\w\[\], .|]*(?:=.*)?$", re.MULTILINE),
)
"""`class Square:`, `def end(self)`, `self.width = width`, an indented `start: Point`: definitions in the issue's
code."""
BOUND_RE = re.compile(
    r"^[ \t]*(?:>>>[ \t]*)?(?P<name>[A-Za-z_]\w*)[ \t]*=[ \t]*(?P<call>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\(", re.MULTILINE
)
"""`s = requests.Session()`: the reporter's variable and the callable that built it (often a class)."""
HTML_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
VERSION_LINE_RE = re.compile(
    r"^[ \t>*-]*[\w.-]+[ \t]*(?::|==|>=|~=)[ \t]*(?:None|unknown|v?\d[\w.+-]*)\b.*\n?", re.MULTILINE | re.IGNORECASE
)
"""`numpy: 1.19.1`, `pytest==6.0`, `cftime: None`: a pasted environment report, not the bug."""
URL_RE = re.compile(r"\bhttps?://\S+")
PERMALINK_RE = re.compile(
    r"\bhttps?://[\w.-]+/(?:[\w.-]+/){1,8}?(?:-/)?blob/(?P<ref>[\w.-]+)/(?P<path>[\w./-]{1,400}?\.py)"
    r"#L(?P<first>\d{1,7})(?:-L?(?P<last>\d{1,7}))?"
)
"""A link to lines of a file at a revision: GitHub's `/blob/REF/PATH#L10-L12`, GitLab's `/-/blob/REF/PATH#L10-12` (a
ref with slashes leaves its tail at the head of PATH: the localizer looks for the file after it)."""
PERMALINK_CAP = 20
"""At most this many links are kept (the first, in order of appearance)."""
ISSUE_NUMBER_RE = re.compile(r"(?<![\w/&#])#(\d{2,6})\b")
"""An issue or pull request named by its number (`#7215`; not `#L20`, `&#123;` or `issue#5`), in an issue or in a
commit message (history.py)."""
REFERENCE_RES = (
    ISSUE_NUMBER_RE,
    re.compile(r"\bhttps?://[\w.-]+/[\w.-]+/[\w.-]+/(?:-/)?(?:pull|pulls|issues|merge_requests)/(\d{1,6})\b"),
)
"""An issue or pull request the issue refers to: `#7215`, or its URL (GitHub's `/pull/7215`, GitLab's
`/-/merge_requests/7215`)."""
REFERENCE_CAP = 10
COMMIT_URL_RE = re.compile(r"/commits?/([0-9a-f]{7,40})\b")
"""A commit the issue names by its URL (`github.com/o/r/commit/1a2b3c4`)."""
BARE_HASH_RE = re.compile(r"(?<![\w/#.:-])(?<!0x)([0-9a-f]{7,40})(?![\w-])")
"""... or by a bare hash in the text (`since 1a2b3c4d`), never after `0x`, `#` or a path; either needs a digit and a
letter (`deadbeef` and `1234567` are other things)."""
COMMIT_CAP = 5
TEMPLATE_HEADING_RE = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+[^\n]{1,60}|\*\*[^*\n]{1,60}\*\*:?)[ \t]*$\n?", re.MULTILINE)
"""A line that is only a heading (`### Expected behavior`, `**To Reproduce**`): an issue template's skeleton."""
ENVIRONMENT_LINE_RE = re.compile(
    r"^[ \t]*[-*+][ \t]+(?P<label>[A-Za-z][\w./()-]*(?:[ \t]+[\w./()-]+){0,3})[ \t]*:[ \t].*$\n?", re.MULTILINE
)
"""`- Python version: 3.9`, `- Sphinx extensions: [...]`, `* OS: Mac`: a list item `label: value` ..."""
ENVIRONMENT_LABEL_RE = re.compile(
    r"\b(?:versions?|os|python|platform|extensions?|tools|browser|system|installed|installation|environment|"
    r"machine|distribution|compiler|backend)\b",
    re.IGNORECASE,
)
"""... whose label names a part of the reporter's environment: a template's environment list, item by item."""
MARKUP_RE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)|<[A-Za-z/][^>\n]*>")
"""Images and HTML tags (`![image](...)`, `<img width=612 alt="Screen Shot">`, `<details>`)."""
STOCK_SENTENCES = (
    "A clear and concise description of what",
    "Steps to reproduce the behavior",
    "If applicable, add screenshots to help explain your problem",
    "Add any other context about the problem here",
    "Link to your",
    "[e.g.",
)
"""Prompts of the common issue templates that reporters leave in place (GitHub's default bug report among them)."""
MESSAGE_NAME = r"[\w.]*(?:Error|Exception|Warning)|WARNING|ERROR|CRITICAL"
"""What heads a message: an exception or warning class, or a log level."""
MESSAGE_RE = re.compile(
    rf"(?:^[ \t]*(?:{MESSAGE_NAME}|E)\b:?|(?<=: )(?:{MESSAGE_NAME}):)[ \t]*(?P<message>\S.*)$", re.MULTILINE
)
"""An error or warning line: its message often repeats a string literal of the code that raised it. The name may
follow a printed location (`conventions.py:492: SerializationWarning: ...`, `index.rst:30: WARNING: ...`)."""
VARIABLE_PART_RE = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|\b0x[0-9a-fA-F]+\b|\d+(?:\.\d+)?|[\[\]{}()<>|]")
"""The parts of a message that a format string fills in: quoted values, numbers, reprs."""
PROMPT_RE = re.compile(r"^(?:>>>|\.\.\.|\$|In \[\d+\]:)\s*")
MESSAGE_WINDOW = 4
"""Words per message run: few enough to fall between two filled-in values, enough to be rare in the code."""
NOT_QUOTES = ("Traceback (most recent", 'File "')
QUOTE_MIN_CHARS = 16
QUOTES_MAX = 80
WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")
STOPWORDS = frozenset(
    "a an and are as at be but by can could did do does for from had has have how i if in into is it its "
    "me my no not of on or our should so than that the their then there these this to too was we were what "
    "when where which while who why will with would you your def class self return import none true false "
    "py line file error get set".split()
)


@dataclass(frozen=True)
class Frame:
    """One traceback frame: a file path as printed, a 1-based line, the function name."""

    path: str
    line: int
    function: str


@dataclass(frozen=True)
class Permalink:
    """Lines of a file the issue links to at a revision (a commit hash or a branch name, as the link wrote it)."""

    ref: str
    path: str
    first: int
    last: int


@dataclass(frozen=True)
class IssueFacts:
    """The code-shaped facts of an issue, in order of appearance."""

    code_identifiers: tuple[str, ...]
    prose_identifiers: tuple[str, ...]
    paths: tuple[str, ...]
    frames: tuple[Frame, ...]
    words: tuple[str, ...]
    quotes: tuple[str, ...] = ()
    """Verbatim text worth finding in the source: fixed parts of error messages, and lines of code."""
    imports: tuple[tuple[str, str], ...] = ()
    """(local name, module or module.name) bound by the import statements of the issue's code."""
    assigned: tuple[str, ...] = ()
    """Names the issue's code assigns: the reporter's variables, not the library's."""
    defined: tuple[str, ...] = ()
    """Names the issue's code defines (classes, functions, attributes; not dunders): mostly the reporter's own."""
    bound: tuple[tuple[str, str], ...] = ()
    """(variable, the last name of the callable whose call the issue's code assigned to it): `a = FiniteSet(1)`."""
    title_words: tuple[str, ...] = ()
    """The query words of the issue's first line: its title, where the reporter names the bug in a sentence."""
    title_identifiers: tuple[str, ...] = ()
    """The identifiers above (code or prose) that the title says."""
    permalinks: tuple[Permalink, ...] = ()
    """The links to lines of code (`PERMALINK_RE`): where the reporter points."""
    references: tuple[str, ...] = ()
    """The issue and pull request numbers the issue refers to (the first `REFERENCE_CAP`, in order)."""
    commits: tuple[str, ...] = ()
    """The commit hashes (full or abbreviated) the issue names (the first `COMMIT_CAP`, in order)."""


def parse_issue(text: str, strip_template: bool = False) -> IssueFacts:
    """Extract identifiers (from code spans, and CamelCase/snake_case prose), paths, frames and query words;
    with `strip_template`, from the text `without_template`."""
    text = strip_noise(text)
    if strip_template:
        text = without_template(text)
    paths = _unique(PATH_RE.findall(text))
    links = permalinks(text)
    numbers = issue_references(text)
    hashes = commit_hashes(text)
    text = URL_RE.sub(" ", text)
    spans = code_spans(text)
    code_ids = _unique(i for span in spans for i in IDENT_RE.findall(span) if len(i) > 2)
    prose = INLINE_RE.sub(" ", FENCE_RE.sub(" ", text))
    calls = [c for c in CALL_RE.findall(prose) if len(c) > 2 and c.lower() not in STOPWORDS]
    prose_ids = _unique([*CAMEL_RE.findall(prose), *SNAKE_RE.findall(prose), *calls])
    code_ids = _unique([*code_ids, *calls])  # a call is code, backticks or not
    code_identifiers = tuple(i for i in code_ids if i.lower() not in STOPWORDS)
    prose_identifiers = tuple(i for i in prose_ids if i not in code_ids)
    head = title(text)
    said = set(IDENT_RE.findall(head))
    return IssueFacts(
        code_identifiers=code_identifiers,
        prose_identifiers=prose_identifiers,
        paths=paths,
        frames=frames(text),
        words=tuple(tokenize(text)),
        quotes=quotes(text, spans),
        imports=tuple((name, module) for span in spans for name, module in imports(span)),
        assigned=_unique(n.strip() for s in spans for m in ASSIGNED_RE.finditer(s) for n in m["names"].split(",")),
        defined=_unique(
            m["name"] for s in spans for r in DEFINED_RES for m in r.finditer(s) if not m["name"].startswith("__")
        ),
        bound=tuple(
            dict.fromkeys((m["name"], m["call"].rsplit(".", 1)[-1]) for s in spans for m in BOUND_RE.finditer(s))
        ),
        title_words=tuple(tokenize(head)),
        title_identifiers=tuple(i for i in (*code_identifiers, *prose_ids) if i in said),
        permalinks=links,
        references=numbers,
        commits=hashes,
    )


def issue_references(text: str) -> tuple[str, ...]:
    """The first `REFERENCE_CAP` distinct issue and pull request numbers the text refers to (`REFERENCE_RES`: each
    pattern's matches in order of appearance, `#N` first, then URLs)."""
    return tuple(dict.fromkeys(m[1] for pattern in REFERENCE_RES for m in pattern.finditer(text)))[:REFERENCE_CAP]


def commit_hashes(text: str) -> tuple[str, ...]:
    """The first `COMMIT_CAP` commit hashes the text names (URLs first, then bare hashes; a permalink's revision is
    where a line was, not a change, and is left out)."""
    found = [*COMMIT_URL_RE.findall(text), *BARE_HASH_RE.findall(URL_RE.sub(" ", text))]
    hashes = (h for h in found if any(c.isdigit() for c in h) and any(c.isalpha() for c in h))
    return tuple(dict.fromkeys(hashes))[:COMMIT_CAP]


def permalinks(text: str) -> tuple[Permalink, ...]:
    """The first `PERMALINK_CAP` distinct links to lines of a Python file, in order of appearance (a range's lines
    in order; one line when it has no end)."""
    found: dict[Permalink, None] = {}
    for match in PERMALINK_RE.finditer(text):
        first = int(match["first"])
        last = int(match["last"]) if match["last"] else first
        found.setdefault(Permalink(match["ref"], match["path"], min(first, last), max(first, last)), None)
        if len(found) == PERMALINK_CAP:
            break
    return tuple(found)


def title(text: str) -> str:
    """The first line that holds a word, without a Markdown heading's marks (`# Title`, `**Title**`)."""
    for line in text.splitlines():
        if IDENTIFIER_RE.search(line):
            return line.strip().lstrip("#").strip().strip("*").strip()
    return ""


def strip_noise(text: str) -> str:
    """Line breaks made `\n` (half of the dev set's issues came with `\r\n`, where a pattern's `$` never matched),
    then drop template comments and pasted environment reports (`package: version` lines)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return VERSION_LINE_RE.sub("", HTML_COMMENT_RE.sub(" ", text))


def without_template(text: str) -> str:
    """The text outside fenced code without template headings, environment list items, images, HTML tags and the
    lines holding a template's stock sentence: the words a reporter did not write about this bug."""
    pieces = re.split(r"(```.*?```)", text, flags=re.DOTALL)
    return "".join(piece if piece.startswith("```") else _template_free(piece) for piece in pieces)


def _template_free(prose: str) -> str:
    lines = (line for line in prose.splitlines(keepends=True) if not any(s in line for s in STOCK_SENTENCES))
    kept = ENVIRONMENT_LINE_RE.sub(_environment_item, TEMPLATE_HEADING_RE.sub("", "".join(lines)))
    return MARKUP_RE.sub(" ", kept)


def _environment_item(match: re.Match[str]) -> str:
    return "" if ENVIRONMENT_LABEL_RE.search(match["label"]) else match[0]


def imports(code: str) -> list[tuple[str, str]]:
    """`import a.b as c` gives (c, a.b); `import a.b` gives (a, a); `from a import b as c` gives (c, a.b)."""
    bound: list[tuple[str, str]] = []
    for match in IMPORT_RE.finditer(code):
        for clause in match["names"].split(","):
            name, _, alias = clause.strip().partition(" as ")
            if not name:
                continue
            if match["module"]:
                bound.append((alias.strip() or name, f"{match['module']}.{name}"))
            else:
                bound.append((alias.strip() or name.split(".")[0], name if alias else name.split(".")[0]))
    return bound


def quotes(text: str, spans: list[str]) -> tuple[str, ...]:
    """Runs of `MESSAGE_WINDOW` words from the fixed parts of error messages, then stripped lines of code. A code
    span is read as lines of its own too: a message quoted mid-sentence (`ValueError: ...`) is a message."""
    lines = "\n".join([text, *spans])
    pieces = [p.split() for m in MESSAGE_RE.finditer(lines) for p in VARIABLE_PART_RE.split(m["message"])]
    found = [
        " ".join(words[i : i + MESSAGE_WINDOW]) for words in pieces for i in range(len(words) - MESSAGE_WINDOW + 1)
    ]
    found += [" ".join(words) for words in pieces if len(words) == MESSAGE_WINDOW - 1]
    found += [PROMPT_RE.sub("", line.strip()) for span in spans for line in span.splitlines()]
    kept = [q.strip(" .:,;") for q in found if not q.startswith(NOT_QUOTES)]
    return _unique(q for q in kept if len(q) >= QUOTE_MIN_CHARS and len(q.split()) >= MESSAGE_WINDOW - 1)[:QUOTES_MAX]


def code_spans(text: str) -> list[str]:
    """Fenced blocks, inline backticks and indented blocks."""
    return [*FENCE_RE.findall(text), *INLINE_RE.findall(text), *INDENTED_RE.findall(text)]


def frames(text: str) -> tuple[Frame, ...]:
    """Traceback frames in the order printed (outermost first), Python, pytest and IPython styles."""
    found: list[tuple[int, Frame]] = []
    for pattern in FRAME_RES:
        for match in pattern.finditer(text):
            found.append((match.start(), Frame(match["path"], int(match["line"]), match["func"] or "")))
    return tuple(frame for _, frame in sorted(found, key=lambda pair: pair[0]))


def tokenize(text: str) -> list[str]:
    """Lower-case word pieces: identifiers split on `_`, `.` and camelCase; stopwords and 1-letter pieces dropped."""
    pieces: list[str] = []
    for identifier in IDENTIFIER_RE.findall(text):
        pieces.extend(identifier_pieces(identifier))
    return pieces


@lru_cache(maxsize=200_000)
def identifier_pieces(identifier: str) -> tuple[str, ...]:
    """The word pieces of one identifier (cached: code repeats its names)."""
    parts = [p.lower() for p in WORD_RE.findall(identifier)]
    kept = [p for p in parts if len(p) > 1 and p not in STOPWORDS]
    whole = identifier.lower().strip("_")
    if len(parts) > 1 and whole not in STOPWORDS:
        kept.append(whole)
    return tuple(kept)


def _unique(items: object) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:  # type: ignore[attr-defined]
        seen.setdefault(str(item), None)
    return tuple(seen)
