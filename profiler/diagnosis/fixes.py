"""The fixes knowledge base (one TOML file per fix in resources/fixes/), and which fixes fit a run.

Fixes are data, not strings in code, so they can be reviewed and extended without touching a
rule; rules refer to them by id and a test keeps every referenced id present.

A fix may also say what it needs and how it reads on the CPU:

    requires = ["cuda"]          # only for runs that used CUDA; "dataloader": only for runs
                                 # that iterated a torch DataLoader
    [cpu]                        # the same fix for a run that never used CUDA: any of title,
    before = "..."               # summary, why, before, after, tradeoff and [[cpu.docs]],
    after = "..."                # replacing the top-level ones (then the CUDA variant)

Rules name fixes for the pattern they saw, most likely to help first. `choose_fixes` then fits
that list to the run (`RunContext`): it drops fixes whose requirement the run does not meet and
picks the CPU variant on a run without CUDA. diagnose() applies it to every finding, so the
`memsight report` text, `report --json`, the app's Findings panel and the HTML report show the
same fixes with the same snippets. A chosen variant travels in the fix reference as
`ID@VARIANT` (e.g. `smaller-batch@cpu`); `get_fix` reads either form.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from memsight.profiler import resources
from memsight.profiler.profile.model import Profile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

FIELDS = ("id", "title", "summary", "why", "before", "after", "tradeoff", "docs")
# The text a variant may replace.
VARIANT_FIELDS = ("title", "summary", "why", "before", "after", "tradeoff")
# What a fix may require of the run.
CUDA = "cuda"
DATALOADER = "dataloader"
REQUIREMENTS = (CUDA, DATALOADER)
# Variants a fix may carry besides its top-level text (the CUDA one when a [cpu] table exists).
CPU = "cpu"
VARIANTS = (CPU,)
REF_SEPARATOR = "@"


class FixError(ValueError):
    """A fix file is missing, unreadable or incomplete."""


@dataclass(frozen=True)
class DocLink:
    title: str
    url: str


@dataclass(frozen=True)
class Variant:
    """What a variant replaces: some of the text fields, and the links when it has its own."""

    text: Mapping[str, str]
    docs: tuple[DocLink, ...] | None = None


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
    requires: frozenset[str] = frozenset()
    # Which text this is: "cpu", "cuda" (the top-level text of a fix that also has a CPU
    # variant), or None for a fix whose one text fits every run.
    variant: str | None = None
    variants: Mapping[str, Variant] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ref(self) -> str:
        """How a finding names this fix in this variant: "smaller-batch@cpu"."""
        return f"{self.id}{REF_SEPARATOR}{self.variant}" if self.variant == CPU else self.id

    def as_variant(self, name: str) -> Fix:
        if name not in self.variants:
            raise FixError(f"fix {self.id!r} has no {name!r} variant")
        variant = self.variants[name]
        text = {**{k: getattr(self, k) for k in VARIANT_FIELDS}, **variant.text}
        return replace(
            self,
            variant=name,
            docs=self.docs if variant.docs is None else variant.docs,
            **{field: text[field] for field in VARIANT_FIELDS},
        )

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
            "variant": self.variant,
        }


def fixes_dir() -> Path:
    return resources.path("fixes")


def _texts(path: Path, data: Mapping[str, object], names: Iterable[str]) -> dict[str, str]:
    texts = {name: data[name] for name in names if name in data}
    if not all(isinstance(value, str) and value.strip() for value in texts.values()):
        raise FixError(f"{path}: every field must be non-empty text")
    out: dict[str, str] = {}
    for name, value in texts.items():
        assert isinstance(value, str)
        out[name] = value.strip("\n") if name in ("before", "after") else value.strip()
    return out


def _links(path: Path, docs: object) -> tuple[DocLink, ...]:
    if not isinstance(docs, list) or not docs:
        raise FixError(f"{path}: docs must list at least one page")
    try:
        return tuple(DocLink(str(d["title"]), str(d["url"])) for d in docs)
    except (KeyError, TypeError):
        raise FixError(f"{path}: each docs entry needs a title and a url") from None


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
    texts = _texts(path, data, [name for name in FIELDS if name != "docs"])
    links = _links(path, data["docs"])
    requires = data.get("requires", [])
    if not isinstance(requires, list) or not set(requires) <= set(REQUIREMENTS):
        raise FixError(f"{path}: requires must list some of {', '.join(REQUIREMENTS)}")
    variants: dict[str, Variant] = {}
    for name in VARIANTS:
        table = data.get(name)
        if table is None:
            continue
        allowed = (*VARIANT_FIELDS, "docs")
        if not isinstance(table, dict) or not table or set(table) - set(allowed):
            raise FixError(f"{path}: [{name}] may set only {', '.join(allowed)}")
        docs = _links(path, table["docs"]) if "docs" in table else None
        variants[name] = Variant(_texts(path, table, VARIANT_FIELDS), docs)
    if CPU in variants and CUDA in requires:
        raise FixError(f"{path}: a fix that requires cuda has no [cpu] variant")
    return Fix(
        id=texts["id"],
        title=texts["title"],
        summary=texts["summary"],
        why=texts["why"],
        before=texts["before"],
        after=texts["after"],
        tradeoff=texts["tradeoff"],
        docs=links,
        requires=frozenset(requires),
        variant=CUDA if CPU in variants else None,
        variants=variants,
    )


@functools.cache
def all_fixes() -> dict[str, Fix]:
    return {path.stem: parse_fix(path) for path in sorted(fixes_dir().glob("*.toml"))}


def get_fix(ref: str) -> Fix:
    """The fix named by an id ("smaller-batch") or an id with its variant ("smaller-batch@cpu")."""
    fix_id, _, variant = ref.partition(REF_SEPARATOR)
    try:
        fix = all_fixes()[fix_id]
    except KeyError:
        raise FixError(f"no fix {fix_id!r} in {fixes_dir()}") from None
    return fix.as_variant(variant) if variant else fix


def get_fixes(refs: Iterable[str]) -> list[Fix]:
    return [get_fix(ref) for ref in refs]


# -- which fixes fit a run ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunContext:
    """What about the run decides which fixes apply and how their snippets read."""

    cuda: bool  # the script used CUDA
    dataloader: bool | None  # it iterated a torch DataLoader; None: cannot tell (hooks off)

    def meets(self, requirement: str) -> bool:
        if requirement == CUDA:
            return self.cuda
        if requirement == DATALOADER:
            return self.dataloader is not False  # unknown is not a reason to hide a fix
        return True


def run_context(profile: Profile) -> RunContext:
    """CUDA: the agent sampled the caching allocator, or saw CUDA come up, or NVML ran (which
    it does only after that). DataLoader: the instrumentation records every new iterator over
    one as an `epoch` event; without hooks nothing tells, so it is unknown."""
    nvml = profile.table("nvml")
    cuda = (
        profile.gpu is not None
        or (nvml is not None and len(nvml) > 0)
        or bool(profile.info.devices)
        or any(True for _ in profile.events_of("cuda_init"))
    )
    if any(True for _ in profile.events_of("epoch")):
        dataloader: bool | None = True
    else:
        dataloader = False if profile.info.hooks else None
    return RunContext(cuda=cuda, dataloader=dataloader)


def choose_fixes(refs: Iterable[str], context: RunContext) -> tuple[str, ...]:
    """The fixes of a finding that fit the run, in the rule's order, each in its variant.

    A fix whose requirement the run does not meet is left out; on a run without CUDA a fix
    with a CPU variant is named in it. Should that leave nothing, the rule's own list is kept
    (with CPU variants where they apply): a finding always carries at least one fix.
    """
    named = [get_fix(ref.partition(REF_SEPARATOR)[0]) for ref in refs]

    def pick(fix: Fix) -> str:
        return fix.as_variant(CPU).ref if not context.cuda and CPU in fix.variants else fix.ref

    kept = [pick(fix) for fix in named if all(context.meets(r) for r in fix.requires)]
    if not kept:
        kept = [pick(fix) for fix in named]
    return tuple(dict.fromkeys(kept))
