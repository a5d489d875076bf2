"""The mutants of a module: Cosmic Ray's operators at Cosmic Ray's positions, one change each.

Cosmic Ray (the `mutate` extra) names each mutation by operator and occurrence (the n-th place in
the module where that operator applies), which is stable as long as the module is: the store
keys mutants by it, with the module's digest. The triage, which outlives edits, keys a mutant by
what an unrelated edit leaves alone (`Mutant.key`): the definition, the operator, the text of the
mutated line and the how-many-th such mutant of that definition it is. Its full operator set replaces every binary
operator by each of eleven others; most of those are crashes the first case sees (`*` as `<<`).
The kit's set keeps one realistic replacement per operator (as mutmut does: `+` for `-`, `<` for
`<=`) and every boundary and logic operator, so the campaign spends its time on mutants a
careful reader could have written.

Positions inside type annotations are skipped: with `from __future__ import annotations` an
annotation is never evaluated, so its mutants are equivalent by construction.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import KvconformError

KIT_OPERATORS = (
    # boundaries and equality
    "ReplaceComparisonOperator_Lt_LtE", "ReplaceComparisonOperator_LtE_Lt",
    "ReplaceComparisonOperator_Gt_GtE", "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Eq_NotEq", "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Is_IsNot", "ReplaceComparisonOperator_IsNot_Is",
    # arithmetic: one replacement per operator
    "ReplaceBinaryOperator_Add_Sub", "ReplaceBinaryOperator_Sub_Add", "ReplaceBinaryOperator_Mul_Add",
    "ReplaceBinaryOperator_FloorDiv_Mul", "ReplaceBinaryOperator_Div_Mul", "ReplaceBinaryOperator_Mod_FloorDiv",
    "ReplaceBinaryOperator_Pow_Mul", "ReplaceBinaryOperator_LShift_RShift", "ReplaceBinaryOperator_RShift_LShift",
    "ReplaceBinaryOperator_BitAnd_BitOr", "ReplaceBinaryOperator_BitOr_BitAnd", "ReplaceBinaryOperator_BitXor_BitOr",
    "ReplaceUnaryOperator_USub_UAdd", "ReplaceUnaryOperator_Delete_Not",
    # logic and control flow
    "AddNot", "ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr", "ReplaceOrWithAnd",
    "ReplaceBreakWithContinue", "ReplaceContinueWithBreak", "ZeroIterationForLoop", "ExceptionReplacer",
    # constants: n + 1 and n - 1
    "NumberReplacer",
)
PROVIDER = "core"


@dataclass(frozen=True)
class Mutant:
    """One mutation of one module. `path` is relative to the kit's root."""
    path: str
    operator: str
    occurrence: int
    line: int
    column: int
    diff: str
    module_digest: str
    key: str = ""

    @property
    def id(self) -> str:
        """Unique at one text of the module (the store's key); a line moved by an edit changes it."""
        return f"{self.path}:{self.line}:{self.operator}:{self.occurrence}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "Mutant":
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})


def stable_key(path: str, definition: str, operator: str, text: str, index: int) -> str:
    """The triage's key of a mutant: `PATH::DEFINITION OPERATOR#INDEX: LINE TEXT`, where INDEX
    counts the mutants of that operator on lines of that text in that definition, in file order
    (two NumberReplacer mutants of one constant are #0 and #1). Lines added or moved elsewhere,
    even in the same definition, leave it as it is."""
    return f"{path}::{definition} {operator}#{index}: {text}"


def definitions_by_line(source: str) -> dict[int, str]:
    """Each line's innermost definition as a dotted name (`RadixCache._evict`), `<module>` outside any."""
    names: dict[int, str] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    names[line] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)
    visit(ast.parse(source), "")
    return names


def code_lines(source: str) -> list[str]:
    """Each line's code without its comment, whitespace runs as one space (a comment edited or
    the code re-indented is no change to the mutant)."""
    import io
    import tokenize
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return [" ".join(line.split()) for line in lines]


def with_keys(source: str, mutants: list[Mutant]) -> list[Mutant]:
    """`mutants` (of one module, in file order) with their stable keys."""
    from dataclasses import replace
    names, lines = definitions_by_line(source), code_lines(source)
    seen: dict[tuple, int] = {}
    out = []
    for m in mutants:
        where = (names.get(m.line, "<module>"), m.operator, lines[m.line - 1])
        index = seen[where] = seen.get(where, -1) + 1
        out.append(replace(m, key=stable_key(m.path, *where, index)))
    return out


def cosmic_ray():
    """Cosmic Ray's plugins, or one line saying how to install the extra."""
    try:
        import cosmic_ray.plugins as plugins
        from cosmic_ray.ast import ast_nodes, get_ast
        from cosmic_ray.mutating import mutate_code
    except ImportError:
        raise KvconformError("the mutation campaign needs Cosmic Ray, an optional extra: "
                             "pip install 'kvconform[mutate]'") from None
    return plugins, ast_nodes, get_ast, mutate_code


def digest_of(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions (line, column) of every annotation: never evaluated here."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        notes = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            notes.append(node.returns)
        if isinstance(node, ast.arg) and node.annotation is not None:
            notes.append(node.annotation)
        if isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        spans += [((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset)) for n in notes]
    return spans


def mutants_of(root: Path, relpath: str, operators: tuple[str, ...] = KIT_OPERATORS,
               lines: set[int] | None = None) -> list[Mutant]:
    """Every mutant of the module `root/relpath` under `operators` (on `lines` only, when given),
    in file order. Only positions are listed here (one parse of the module); the mutated text
    and its diff are made where the mutant is judged (`apply`)."""
    plugins, ast_nodes, get_ast, _ = cosmic_ray()
    source = (root / relpath).read_text(encoding="utf-8")
    digest, skip = digest_of(source), annotation_spans(source)
    nodes = list(ast_nodes(get_ast(source)))
    out = []
    for name in operators:
        operator = plugins.get_operator(f"{PROVIDER}/{name}")()
        positions = [start for node in nodes for start, _ in operator.mutation_positions(node)]
        for occurrence, start in enumerate(positions):
            if any(a <= start < b for a, b in skip):
                continue
            out.append(Mutant(relpath, name, occurrence, start[0], start[1], "", digest))
    everything = with_keys(source, sorted(out, key=lambda m: (m.line, m.column, m.operator, m.occurrence)))
    return [m for m in everything if lines is None or m.line in lines]     # keys count the whole module


def apply(root: Path, mutant: Mutant) -> tuple[str, str]:
    """(the module's text with `mutant` applied, its unified diff). KvconformError when the module
    changed since the mutant was listed, or the operator cannot make this mutation (Cosmic Ray's
    ExceptionReplacer fails on `except (A, B)`)."""
    plugins, _, _, mutate_code = cosmic_ray()
    source = (root / mutant.path).read_text(encoding="utf-8")
    if digest_of(source) != mutant.module_digest:
        raise KvconformError(f"{mutant.path} changed since its mutants were listed (digest {digest_of(source)}, "
                             f"listed at {mutant.module_digest}): list them again")
    try:
        mutated = mutate_code(source, plugins.get_operator(f"{PROVIDER}/{mutant.operator}")(), mutant.occurrence)
    except Exception as e:
        raise KvconformError(f"{mutant.id}: Cosmic Ray cannot make this mutation ({type(e).__name__}: {e})") from None
    if mutated is None or mutated == source:
        raise KvconformError(f"{mutant.id}: no such mutation in {mutant.path}")
    diff = "".join(difflib.unified_diff(source.splitlines(True), mutated.splitlines(True),
                                        f"a/{mutant.path}", f"b/{mutant.path}", n=1))
    return mutated, diff
