"""The fixes knowledge base: one TOML file per fix in resources/fixes/.

Fixes are data, not strings in code, so they can be reviewed and extended without touching a
rule; rules refer to them by id and a test keeps every referenced id present.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

from profiler import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

FIELDS = ("id", "title", "summary", "why", "before", "after", "tradeoff", "docs")


class FixError(ValueError):
    """A fix file is missing, unreadable or incomplete."""


@dataclass(frozen=True)
class DocLink:
    title: str
    url: str


@dataclass(frozen=True)
class Fix:
    id: str
    title: str
    summary: str
    why: str
    before: str
    after: str
    tradeoff: str
    docs: tuple[DocLink, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "title": self.title,
            "summary": self.summary,
            "why": self.why,
            "before": self.before,
            "after": self.after,
            "tradeoff": self.tradeoff,
            "docs": [{"title": d.title, "url": d.url} for d in self.docs],
        }


def fixes_dir() -> Path:
    return resources.path("fixes")


def parse_fix(path: Path) -> Fix:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise FixError(f"{path}: {exc}") from None
    missing = [name for name in FIELDS if name not in data]
    if missing:
        raise FixError(f"{path}: missing {', '.join(missing)}")
    if data["id"] != path.stem:
        raise FixError(f"{path}: id {data['id']!r} does not match the file name")
    texts = {name: data[name] for name in FIELDS if name != "docs"}
    if not all(isinstance(value, str) and value.strip() for value in texts.values()):
        raise FixError(f"{path}: every field must be non-empty text")
    docs = data["docs"]
    if not isinstance(docs, list) or not docs:
        raise FixError(f"{path}: docs must list at least one page")
    try:
        links = tuple(DocLink(str(d["title"]), str(d["url"])) for d in docs)
    except (KeyError, TypeError):
        raise FixError(f"{path}: each docs entry needs a title and a url") from None
    return Fix(
        id=texts["id"],
        title=texts["title"].strip(),
        summary=texts["summary"].strip(),
        why=texts["why"].strip(),
        before=texts["before"].strip("\n"),
        after=texts["after"].strip("\n"),
        tradeoff=texts["tradeoff"].strip(),
        docs=links,
    )


@functools.cache
def all_fixes() -> dict[str, Fix]:
    return {path.stem: parse_fix(path) for path in sorted(fixes_dir().glob("*.toml"))}


def get_fix(fix_id: str) -> Fix:
    try:
        return all_fixes()[fix_id]
    except KeyError:
        raise FixError(f"no fix {fix_id!r} in {fixes_dir()}") from None
