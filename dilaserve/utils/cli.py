"""``--help`` generated from config dataclasses (vLLM style).

Each field becomes a ``--kebab-case`` flag; its help text is the field's
``metadata["help"]`` and its default is shown. Lists take several values.
Validation stays in the dataclass (``__post_init__``), so the same errors
reach CLI and Python users; the parser turns them into a clean usage error.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Optional, Type, TypeVar

T = TypeVar("T")


def option(default, help: str):
    """A config dataclass field with its ``--help`` text (lists get a fresh copy per instance)."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def _base_type(tp: Any) -> tuple[Any, bool]:
    """(element type, is_list) for annotations like int, Optional[str], list[float]."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0])
    if origin in (list, tuple):
        return typing.get_args(tp)[0], True
    return tp, False


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: Type) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("cli") is False:
            continue
        tp, is_list = _base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        kwargs: dict[str, Any] = {"default": default, "help": f"{f.metadata.get('help', '')} (default: {default})"}
        if tp is bool and not is_list:
            kwargs["type"] = _bool
            kwargs["metavar"] = "{true,false}"
        else:
            kwargs["type"] = tp
        if is_list:
            kwargs["nargs"] = "+"
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, **kwargs)


def parse_dataclass(cls: Type[T], argv: Optional[list[str]] = None, description: str = "", prog: Optional[str] = None) -> T:
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_arguments(parser, cls)
    ns = vars(parser.parse_args(argv))
    try:
        return cls(**ns)
    except (ValueError, TypeError) as e:
        parser.error(str(e))
        raise  # unreachable: parser.error exits
