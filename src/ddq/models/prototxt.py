"""A reader for protobuf's text format, as Caffe's .prototxt files use it, keeping line numbers.

The protobuf library parses text format only against a compiled schema
(caffe.proto, which would have to be vendored and compiled) and does not
report where a message started; the importer needs both schema-free reading
of two Caffe generations and line numbers for its error messages. The
grammar is small: `name: scalar`, `name { ... }` (or `name: { ... }`, or
`< ... >`), `name: [a, b]`, `#` comments, optional `,`/`;` separators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

_TOKEN = re.compile(r"""
    (?P<skip>[ \t\r\f\v]+|\#[^\n]*)
  | (?P<newline>\n)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?(?![A-Za-z_]))
  | (?P<word>-?[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}<>:\[\],;])
""", re.VERBOSE)

_CLOSING = {"{": "}", "<": ">"}
# Caffe's messages nest four deep (layer, param, filler); the reader recurses once per level, so a
# file nested thousands deep would exhaust Python's stack (RecursionError) instead of failing on a line.
MAX_DEPTH = 64
# A net definition holds no weights: the largest Caffe ships (ResNet-152's) is about 300 kB. The reader
# keeps a tuple per token, so a far larger text would cost memory for nothing a Q-network needs.
MAX_CHARS = 2**20
_WORDS = {"true": True, "True": True, "false": False, "False": False,
          "inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


class PrototxtError(ValueError):
    """A file that is not valid text format, or that ddq cannot map; names the line."""

    def __init__(self, message: str, line: int | None = None, source: str = "prototxt"):
        where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(where + message)


Value = Union[str, int, float, bool, "Message"]


@dataclass
class Field:
    name: str
    value: Value
    line: int


@dataclass
class Message:
    """The fields of one message, in file order (repeated fields appear once per value)."""

    line: int = 1
    fields: list[Field] = field(default_factory=list)

    def all(self, name: str) -> list[Any]:
        return [f.value for f in self.fields if f.name == name]

    def get(self, name: str, default: Any = None) -> Any:
        values = self.all(name)
        return values[-1] if values else default  # text format: the last singular value wins

    def has(self, name: str) -> bool:
        return any(f.name == name for f in self.fields)

    def messages(self, name: str) -> list[Message]:
        return [v for v in self.all(name) if isinstance(v, Message)]


def _unquote(token: str) -> str:
    body = token[1:-1]
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in body else body


def _number(token: str) -> int | float:
    token = token.rstrip("fF")
    if re.fullmatch(r"[-+]?\d+", token):
        return int(token)
    return float(token)


class _Parser:
    def __init__(self, text: str, source: str):
        self.source = source
        self.tokens: list[tuple[str, str, int]] = []
        line, pos = 1, 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match:
                raise PrototxtError(f"unexpected character {text[pos]!r}", line, source)
            kind = str(match.lastgroup)
            if kind == "newline":
                line += 1
            elif kind != "skip":
                self.tokens.append((kind, match.group(), line))
            pos = match.end()
        self.tokens.append(("end", "", line))
        self.index = 0
        self.depth = 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.index]

    def take(self) -> tuple[str, str, int]:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def fail(self, message: str) -> PrototxtError:
        kind, text, line = self.peek()
        return PrototxtError(f"{message}, found {text!r}" if kind != "end" else f"{message}, found the end",
                             line, self.source)

    def message(self, closing: str | None, line: int) -> Message:
        if self.depth > MAX_DEPTH:  # depth counts the top level too: 64 messages may nest inside it
            raise PrototxtError(f"messages nested more than {MAX_DEPTH} deep (a Caffe net nests 4)", line, self.source)
        self.depth += 1
        message = Message(line)
        while True:
            kind, text, _ = self.peek()
            if closing is not None and text == closing:
                self.take()
                self.depth -= 1
                return message
            if kind == "end":
                if closing is None:
                    return message
                raise self.fail(f"expected {closing!r} to close the message opened on line {line}")
            if kind != "word":
                raise self.fail("expected a field name")
            _, name, field_line = self.take()
            colon = self.peek()[1] == ":"
            if colon:
                self.take()
            for value in self.values(colon):
                message.fields.append(Field(name, value, field_line))
            if self.peek()[1] in (",", ";"):
                self.take()

    def values(self, after_colon: bool) -> list[Value]:
        kind, text, line = self.peek()
        if text in _CLOSING:
            self.take()
            return [self.message(_CLOSING[text], line)]
        if not after_colon:
            raise self.fail("expected ':' or '{' after a field name")
        if text == "[":
            self.take()
            items: list[Value] = []
            while self.peek()[1] != "]":
                if self.peek()[1] == "[":  # text format has no lists of lists; recursing here has no bound
                    raise self.fail("expected a value or a message in a list")
                items.extend(self.values(True))
                if self.peek()[1] == ",":
                    self.take()
            self.take()
            return items
        return [self.scalar()]

    def scalar(self) -> Value:
        kind, text, _ = self.peek()
        if kind == "string":
            self.take()
            parts = [_unquote(text)]
            while self.peek()[0] == "string":  # adjacent strings concatenate, as in C
                parts.append(_unquote(self.take()[1]))
            return "".join(parts)
        if kind == "number":
            self.take()
            return _number(text)
        if kind == "word":
            self.take()
            return _WORDS.get(text, text)
        raise self.fail("expected a value")


def parse(text: str, source: str = "prototxt") -> Message:
    """The top-level message of a text-format document; `source` names it in errors."""
    if not isinstance(text, str):
        raise PrototxtError(f"expected the text of a definition, got {type(text).__name__}", None, source)
    if len(text) > MAX_CHARS:
        raise PrototxtError(f"{len(text):,} characters; ddq reads definitions of up to {MAX_CHARS:,}", None, source)
    return _Parser(text, source).message(None, 1)


def read_definition(path: str | Path) -> str:
    """The text of a definition file, refused before reading when it is over MAX_CHARS bytes."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as error:  # named as a refusal names it, not as "[Errno 2] ..."
        raise PrototxtError(error.strerror or str(error), None, str(path)) from None
    if size > MAX_CHARS:
        raise PrototxtError(f"{size:,} bytes; ddq reads definitions of up to {MAX_CHARS:,}", None, str(path))
    try:
        return path.read_text()
    except UnicodeDecodeError as error:
        raise PrototxtError(f"not UTF-8 text (byte {error.start})", None, str(path)) from None
    except OSError as error:  # a folder, a file this user cannot read
        raise PrototxtError(error.strerror or str(error), None, str(path)) from None
