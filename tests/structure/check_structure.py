"""The project's structure, checked: every include points down the floors (docs/design.md), cli/
goes through zero's public headers only (no comm/ or kernels/ header, no MPI call), no function in
zero/, comm/, cli/ or models/ is longer than 120 lines and no source file longer than 500.
Usage: check_structure.py SOURCE_ROOT [--list] (--list: print every function's length, longest
first, instead of checking)."""
import pathlib
import re
import sys

from checks import check, finish

SOURCE = (".cpp", ".hpp", ".cu", ".cuh", ".h")
# What each floor may include from the project (docs/design.md, "Layers").
FLOORS = {
    "base": set(),
    "precision": {"base", "precision"},
    "kernels": {"base", "precision", "kernels"},
    "comm": {"base", "precision", "kernels", "comm"},
}
CLI_FORBIDDEN = ("comm/", "kernels/")
MAX_FUNCTION = 120
MAX_FILE = 500
FUNCTION_DIRS = ("zero", "comm", "cli", "models")
FILE_DIRS = ("base", "precision", "kernels", "comm", "zero", "models", "cli", "examples", "bench")
# Test files kept whole past the limit: generated fixtures, one table per file.
LONG_FILES_KEPT = {"tests/kernels/fixtures/torch_adamw.hpp"}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
MPI_CALL = re.compile(r"\bMPI_[A-Z][A-Za-z_]*\s*\(")


def strip(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            d = text.find("(", i)
            end = ")" + text[i + 2:d] + '"'
            j = text.find(end, d)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            out.append(c)  # a digit separator (10'000), not a character literal
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^(){};]*$|\bextern\s*\"*\s*$")
FUNCTION_HEAD = re.compile(r"\)\s*(const|noexcept|override|final|mutable|volatile|&|&&|\s|->[^{;=]*)*$")
CONTROL = re.compile(r"\b(if|for|while|switch|catch)\s*\(")
NAME = re.compile(r"([~\w:]+)\s*\(")  # the first name called: the function's own


def functions(path):
    """(name, first line, lines) of every function body at namespace or class scope."""
    text = strip(path.read_text(errors="replace"))
    stack, found, head_start = [], [], 0
    for i, c in enumerate(text):
        if c == "{":
            head = text[head_start:i].strip()
            if all(kind == "scope" for kind, _, _ in stack):
                if SCOPE.search(head) or head.endswith('extern ""'):
                    stack.append(("scope", i, head))
                elif FUNCTION_HEAD.search(head) and not CONTROL.match(head) and "=" not in head.split("(")[0]:
                    stack.append(("function", i, head))
                else:
                    stack.append(("block", i, head))
            else:
                stack.append(("block", i, head))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start, head = stack.pop()
                if kind == "function":
                    first = text.count("\n", 0, start) + 1
                    last = text.count("\n", 0, i) + 1
                    m = NAME.search(head)
                    found.append((m.group(1) if m else head[-40:], first, last - first + 1))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    listing = "--list" in sys.argv[2:]
    files = [p for p in root.rglob("*") if p.suffix in SOURCE and p.is_file()
             and p.relative_to(root).parts[0] not in ("build", ".git") and
             not p.relative_to(root).parts[0].startswith("build")]
    if listing:
        rows = []
        for p in files:
            if p.relative_to(root).parts[0] in FUNCTION_DIRS:
                rows += [(n, str(p.relative_to(root)), line, name) for name, line, n in functions(p)]
        for n, f, line, name in sorted(rows, reverse=True)[:40]:
            print(f"{n:5d}  {f}:{line}  {name}")
        return
    for p in sorted(files):
        rel = p.relative_to(root)
        top = rel.parts[0]
        text = p.read_text(errors="replace")
        includes = INCLUDE.findall(text)
        if top in FLOORS:
            bad = [inc for inc in includes if "/" in inc and inc.split("/")[0] in
                   ("base", "precision", "kernels", "comm", "zero", "models", "cli")
                   and inc.split("/")[0] not in FLOORS[top]]
            check(f"{rel} includes only its floor and those below", not bad, f"includes {bad}")
        if top == "cli":
            bad = [inc for inc in includes if inc.startswith(CLI_FORBIDDEN) or inc == "mpi.h"]
            check(f"{rel} includes no comm/, kernels/ or MPI header", not bad, f"includes {bad}")
            calls = sorted(set(m.group(0).rstrip("( ") for m in MPI_CALL.finditer(strip(text))))
            check(f"{rel} calls no MPI function", not calls, f"calls {calls}")
        if top in FUNCTION_DIRS:
            long = [(name, line, n) for name, line, n in functions(p) if n > MAX_FUNCTION]
            check(f"{rel}: no function over {MAX_FUNCTION} lines", not long,
                  "; ".join(f"{name} at line {line}: {n} lines" for name, line, n in long))
        lines = text.count("\n")
        if (top in FILE_DIRS or top == "tests") and str(rel) not in LONG_FILES_KEPT:
            check(f"{rel}: {MAX_FILE} lines at most", lines <= MAX_FILE, f"{lines} lines")
    finish()


if __name__ == "__main__":
    main()
