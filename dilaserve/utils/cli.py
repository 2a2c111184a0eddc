"""Command-line flags generated from config dataclasses (vLLM style).

Each field becomes a ``--kebab-case`` flag. Its help text is the field's
``metadata["help"]`` (see :func:`option`) or, for the per-concern configs that document
their fields in an ``Attributes:`` docstring section, that entry, as plain text (Sphinx
roles and literals lose their markup); its default is shown once, unless the text already
says it ("(default: ...)").
Lists and tuples take several values; ``Optional`` numbers also take ``none``; a bool
field is a pair of flags (``--quick`` / ``--no-quick``).

A flag the parser already has is left as it was declared: a program may declare one by
hand (its own help, choices or default) beside the generated ones, and new fields of
its options get flags without a change to the program.

A field made with :func:`nested` holds a whole per-concern config (``ControlConfig``,
``ReconfigConfig``, ...): its fields become flags of their own, in one argument group,
optionally behind a prefix (``prefix="reconfig"`` turns ``interval_s`` into
``--reconfig-interval-s``). The concern keeps its defaults, its documentation and its
validation; the composing config only says which of its fields are set at run time
rather than on the command line.

Validation stays in the dataclasses (``__post_init__``), so CLI and Python users get the
same errors; :func:`parse_dataclass` turns them into a usage error that names the flag
(``ControlConfig.quality_budget=2`` reads ``--quality-budget=2``).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_SCALARS = (int, float, str, bool, Path)


def option(default, help: str, **metadata):
    """A config dataclass field with its ``--help`` text (lists get a fresh copy per
    instance). Extra metadata: ``choices=[...]`` restricts the flag's values,
    ``cli=False`` keeps the field off the command line."""
    meta = {"help": help, **metadata}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Nested:
    """How a composing config exposes one per-concern config (see :func:`nested`)."""

    cls: type
    prefix: str = ""
    exclude: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    build: Callable[..., Any] | None = None

    def make(self, **values: Any) -> Any:
        kwargs = {**self.defaults, **values}
        return self.build(**kwargs) if self.build is not None else self.cls(**kwargs)

    def dest(self, name: str) -> str:
        return f"{self.prefix}_{name}" if self.prefix else name


def nested(
    cls: type,
    *,
    prefix: str = "",
    exclude: tuple[str, ...] = (),
    defaults: Mapping[str, Any] | None = None,
    build: Callable[..., Any] | None = None,
    help: str = "",
):
    """A field holding a per-concern config whose fields become flags.

    Args:
        cls: the per-concern config dataclass.
        prefix: flag prefix (``reconfig`` -> ``--reconfig-interval-s``); empty for none.
        exclude: fields filled at run time (from artifacts, or derived from other
            settings), not from flags; they keep the class's defaults here.
        defaults: this program's defaults where they differ from the class's.
        build: ``build(**fields)`` makes the value (default ``cls(**fields)``); it may
            return None, e.g. when a setting switches the concern off.
        help: the argument group's description (default: the class's first docstring line).
    """
    spec = Nested(cls, prefix.replace("-", "_"), tuple(exclude), dict(defaults or {}), build)
    return dataclasses.field(default_factory=spec.make, metadata={"nested": spec, "help": help})


# ------------------------------------------------------------------ documentation
def field_docs(cls: type) -> dict[str, str]:
    """Field -> text of the ``Attributes:`` section of ``cls``'s docstring (Google style)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return {}
    out: dict[str, list[str]] = {}
    indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        m = re.match(r"(\w+)(?: \([^)]*\))?:\s*(.*)", line.strip())
        if depth == indent and m:
            current = m.group(1)
            out[current] = [m.group(2)]
        elif current is not None:
            out[current].append(line.strip())
    return {k: " ".join(v).strip() for k, v in out.items()}


def _help(f: dataclasses.Field, docs: Mapping[str, str]) -> str:
    return plain(f.metadata.get("help") or docs.get(f.name, ""))


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`")


def plain(text: str) -> str:
    """Docstring markup as a terminal shows it: a Sphinx role keeps its target (``~``: the
    last name only, as Sphinx prints it) and literals lose their backticks."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)


#: A help text that states its default itself ("(default: the folder's name)") gets no
#: second one from the field.
_STATES_DEFAULT = re.compile(r"\(default\b", re.IGNORECASE)


# ------------------------------------------------------------------ types
def _base_type(tp: Any) -> tuple[Any, bool, bool]:
    """(element type, is_list, is_optional) for annotations like int, Optional[str], list[float]."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or isinstance(tp, types.UnionType):  # Optional[X] and X | None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        elem, is_list, _ = _base_type(args[0])
        return elem, is_list, True
    if origin in (list, tuple):
        return typing.get_args(tp)[0], True, False
    return tp, False, False


def _coerce(tp: Any, value: Any) -> Any:
    """A flag's value as its field's type: argparse gives lists, tuple fields get tuples."""
    if isinstance(value, list):
        origin = typing.get_origin(tp)
        if origin is typing.Union or isinstance(tp, types.UnionType):
            origin = next((typing.get_origin(a) for a in typing.get_args(tp) if a is not type(None)), None)
        if origin is tuple:
            return tuple(value)
    return value


def _or_none(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.lower() == "none" else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its errors
    return parse


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def _add_field(
    parser, f: dataclasses.Field, tp: Any, dest: str, default: Any, help_text: str, overrides_only: bool = False
) -> None:
    elem, is_list, optional = _base_type(tp)
    if elem not in _SCALARS:
        raise TypeError(
            f"field {f.name!r} has type {tp!r}, which has no flag: exclude it (cli=False, or "
            "nested(..., exclude=...)) and set it at run time"
        )
    flag = "--" + dest.replace("_", "-")
    if flag in parser._option_string_actions:  # declared by hand: the program's own flag wins
        return
    shown = list(default) if isinstance(default, tuple) else default
    if default is None:
        shown = "none"  # what the flag takes to set it back
    kwargs: dict[str, Any] = {"dest": dest, "help": f"{help_text} (default: {shown})".replace("%", "%%")}
    if default is dataclasses.MISSING or _STATES_DEFAULT.search(help_text):
        kwargs["help"] = help_text.replace("%", "%%")
    if default is dataclasses.MISSING:
        kwargs["required"] = True
    else:
        kwargs["default"] = argparse.SUPPRESS if overrides_only else default
    if elem is bool and not is_list:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs["type"] = _or_none(elem) if optional and elem is not str else elem
        if is_list:
            kwargs["nargs"] = "+"
    if "choices" in f.metadata:
        kwargs["choices"] = list(f.metadata["choices"])
    parser.add_argument(flag, **kwargs)


def _walk(cls: type, spec: Nested | None = None):
    """(field, type, dest, default, help) of every flag of ``cls``, and (field, spec) of its
    nested configs, in declaration order."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("cli") is False or (spec is not None and f.name in spec.exclude):
            continue
        sub = f.metadata.get("nested")
        if sub is not None:
            yield f, sub, None, None, None
            continue
        default = _default_of(f)
        if spec is not None and f.name in spec.defaults:
            default = spec.defaults[f.name]
        yield f, hints[f.name], spec.dest(f.name) if spec else f.name, default, _help(f, docs)


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type, overrides_only: bool = False) -> None:
    """Add a flag for every field of ``cls`` and of its :func:`nested` configs (each in its
    own argument group), except those the parser already has.

    With ``overrides_only`` a flag not given is absent from the parsed namespace (its help
    still shows the class's default), so the values given can be applied to a base
    config other than the class's defaults (``dataclasses.replace(QUICK, **given)``)."""
    seen: dict[str, str] = {}

    def claim(dest: str, owner: str) -> None:
        if dest in seen:
            raise TypeError(
                f"flag --{dest.replace('_', '-')} is declared by both {seen[dest]} and {owner}: "
                "give one of the nested configs a prefix"
            )
        seen[dest] = owner

    for f, tp, dest, default, help_text in _walk(cls):
        if isinstance(tp, Nested):
            title = f.metadata.get("help") or inspect.cleandoc(tp.cls.__doc__ or tp.cls.__name__).splitlines()[0]
            group = parser.add_argument_group(f"{tp.cls.__name__} ({f.name})", plain(title).replace("%", "%%"))
            for sf, stp, sdest, sdefault, shelp in _walk(tp.cls, tp):
                claim(sdest, f"{tp.cls.__name__}.{sf.name}")
                _add_field(group, sf, stp, sdest, sdefault, shelp, overrides_only)
        else:
            claim(dest, f"{cls.__name__}.{f.name}")
            _add_field(parser, f, tp, dest, default, help_text, overrides_only)


def build_dataclass(cls: type[T], values: Mapping[str, Any]) -> T:
    """``cls`` from flat values keyed by flag destination (``reconfig_interval_s``,
    ``thresholds``): what the parser produces, and a handy way to override a few settings
    in Python by their flag names. Fields not given keep their defaults; a nested
    config given whole (``control=ControlConfig(...)``) is taken as is."""
    values = dict(values)
    kwargs: dict[str, Any] = {}
    for f, tp, dest, _, _ in _walk(cls):
        if isinstance(tp, Nested):
            if f.name in values:
                kwargs[f.name] = values.pop(f.name)
                continue
            sub = {
                sf.name: _coerce(stp, values.pop(sdest))
                for sf, stp, sdest, _, _ in _walk(tp.cls, tp)
                if sdest in values
            }
            kwargs[f.name] = tp.make(**sub)
        elif dest in values:
            kwargs[f.name] = _coerce(tp, values.pop(dest))
    if values:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(sorted(values))}; see --help for the flags")
    return cls(**kwargs)


def values_for(cls: type, namespace: Mapping[str, Any] | argparse.Namespace) -> dict[str, Any]:
    """The entries of a parsed namespace that are settings of ``cls`` (by flag destination),
    leaving out the program's other flags (``--json``, a positional experiment)."""
    values = vars(namespace) if isinstance(namespace, argparse.Namespace) else dict(namespace)
    dests = set()
    for f, tp, dest, _, _ in _walk(cls):
        if isinstance(tp, Nested):
            dests.add(f.name)
            dests.update(sdest for _, _, sdest, _, _ in _walk(tp.cls, tp))
        else:
            dests.add(dest)
    return {k: v for k, v in values.items() if k in dests}


def _flag_names(cls: type) -> dict[str, str]:
    """``Class.field`` -> ``--flag`` for every flag of ``cls`` (to name flags in errors)."""
    out: dict[str, str] = {}
    for f, tp, dest, _, _ in _walk(cls):
        if isinstance(tp, Nested):
            for sf, _, sdest, _, _ in _walk(tp.cls, tp):
                out[f"{tp.cls.__name__}.{sf.name}"] = "--" + sdest.replace("_", "-")
        else:
            out[f"{cls.__name__}.{f.name}"] = "--" + dest.replace("_", "-")
    return out


def flag_error(cls: type, exc: Exception) -> str:
    """``exc``'s message with config field names replaced by the flags that set them."""
    text = str(exc)
    for name, flag in sorted(_flag_names(cls).items(), key=lambda kv: -len(kv[0])):
        text = re.sub(re.escape(name) + r"\b", flag, text)
    return text


def parse_dataclass(cls: type[T], argv: list[str] | None = None, description: str = "", prog: str | None = None) -> T:
    parser = argparse.ArgumentParser(
        prog=prog, description=plain(description), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_dataclass_arguments(parser, cls)
    ns = vars(parser.parse_args(argv))
    try:
        return build_dataclass(cls, ns)
    except (ValueError, TypeError) as e:
        parser.error(flag_error(cls, e))
        raise  # unreachable: parser.error exits
