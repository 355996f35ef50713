"""Python spellings of schema types, signatures and docstrings (used by ops.py and the stub
generator, so the functions and ops.pyi agree)."""

from __future__ import annotations

import inspect

# Schema type (schema syntax, see schema_type) -> Python annotation.
_TYPES = {
    "Tensor": "Tensor",
    "Tensor?": "Tensor | None",
    "Tensor[]": "list[Tensor]",
    "int": "int",
    "int?": "int | None",
    "float": "float",
    "float?": "float | None",
    "bool": "bool",
    "bool?": "bool | None",
    "str": "str",
    "str?": "str | None",
    "int[]": "list[int]",
    "float[]": "list[float]",
    "bool[]": "list[bool]",
    "Scalar": "int | float | bool",
    "ScalarType": "torch.dtype",
    "ScalarType?": "torch.dtype | None",
}


def annotation(type_) -> str:
    return _TYPES.get(schema_type(type_), "object")


def returns_annotation(schema) -> str:
    types = [annotation(r.type) for r in schema.returns]
    if not types:  # `-> ()`: an op that writes its arguments
        return "None"
    if len(types) == 1:
        return types[0]
    return "tuple[" + ", ".join(types) + "]"


def default_repr(arg) -> str:
    """The default as Python writes it: 1e-06, not torch's 9.9999999999999995e-07."""
    return repr(arg.default_value)


def _schema_default(arg) -> str:
    value = arg.default_value
    if isinstance(value, str):
        return '"' + value + '"'
    return repr(value)


def schema_type(schema_type) -> str:
    """torch's Python spelling of a schema type (Optional[Tensor], List[int]) in schema
    syntax (Tensor?, int[])."""
    text = str(schema_type)
    if text.startswith("Optional[") and text.endswith("]"):
        return schema_type_text(text[len("Optional["):-1]) + "?"
    return schema_type_text(text)


def schema_type_text(text: str) -> str:
    if text.startswith("Optional[") and text.endswith("]"):
        return schema_type_text(text[len("Optional["):-1]) + "?"
    if text.startswith("List[") and text.endswith("]"):
        return schema_type_text(text[len("List["):-1]) + "[]"
    return text


def spell_arguments(schema, spell) -> list[str]:
    """spell(arg) for each argument, with "*" before the first keyword-only one."""
    out = []
    for a in schema.arguments:
        if a.kwarg_only and "*" not in out:
            out.append("*")
        out.append(spell(a))
    return out


def _alias(arg) -> str:
    """`(a!)` for an argument the op writes (its alias set, unqualified), else ''."""
    info = arg.alias_info
    if info is None:
        return ""
    sets = "|".join(sorted(str(x).split("::")[-1] for x in info.before_set))
    return f"({sets}{'!' if info.is_write else ''})"


def argument_types(schema_text: str) -> list[str]:
    """The type of each argument of a schema's text, in order ("Tensor", "SymInt[]", ...).
    torch's Python Argument objects spell SymInt as int, so the schema's text is read: the
    argument list split at the commas outside brackets and quotes."""
    start = schema_text.find("(")
    depth, quote, parts, cur = 0, None, [], ""
    for ch in schema_text[start + 1:]:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.split()[0] for p in (p.strip() for p in parts) if p and p != "*"]


def _spelled_types(schema) -> list[str]:
    """schema_type of each argument, with SymInt where the schema has it (SymInt, SymInt?,
    SymInt[]): torch's Python Argument reports those as int, int?, int[]."""
    texts = argument_types(str(schema))
    out = []
    for i, a in enumerate(schema.arguments):
        spelled = schema_type(a.type)
        if i < len(texts) and texts[i].startswith("SymInt"):
            spelled = spelled.replace("int", "SymInt", 1)
        out.append(spelled)
    return out


def schema_text(schema) -> str:
    """The schema with defaults spelled as written (float eps=1e-06), as `customop-gradcheck
    --list` prints it."""
    types = dict(zip((a.name for a in schema.arguments), _spelled_types(schema)))
    args = spell_arguments(schema, lambda a: f"{types[a.name]}{_alias(a)} {a.name}" + (
        "=" + _schema_default(a) if a.has_default_value() else ""))
    rets = [f"{schema_type(r.type)} {r.name}" if r.name else schema_type(r.type)
            for r in schema.returns]
    ret = rets[0] if len(rets) == 1 and not schema.returns[0].name else "(" + ", ".join(rets) + ")"
    return f"{schema.name}({', '.join(args)}) -> {ret}"


def signature(schema) -> inspect.Signature:
    params = []
    for a in schema.arguments:
        kind = (inspect.Parameter.KEYWORD_ONLY if a.kwarg_only
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)
        default = a.default_value if a.has_default_value() else inspect.Parameter.empty
        params.append(inspect.Parameter(a.name, kind, default=default,
                                        annotation=annotation(a.type)))
    return inspect.Signature(params, return_annotation=returns_annotation(schema))


def docstring(name: str, schema) -> str:
    lines = [
        f"The op {schema.name} (torch.ops.customop.{name}), schema:",
        "",
        f"    {schema_text(schema)}",
        "",
        "Args:",
    ]
    for a in schema.arguments:
        default = f", default {default_repr(a)}" if a.has_default_value() else ""
        written = ", written in place" if a.alias_info is not None and a.alias_info.is_write else ""
        lines.append(f"    {a.name} ({annotation(a.type)}{default}{written})")
    lines += [
        "",
        f"Returns: {returns_annotation(schema)}",
        "",
        f"Shapes, dtypes, devices, the formula and the errors it raises: the C++ header "
        f"customop/ops/{name.rstrip('_')}.h. Raises RuntimeError (or ValueError, TypeError) naming the op "
        f"and the argument on bad input.",
    ]
    return "\n".join(lines)
