#!/usr/bin/env python3
"""docs/memory.md's worked examples cannot drift from the tool: every ```console block that opens
with `$ zero ...` is run and its output compared with the block's, line by line; and every byte
count (124,439,808) and size (237.35 MiB) in the text of the worked-example section must appear in
that section's outputs. With --write, the blocks are rewritten with the tool's output instead.
Usage: test_memory_doc.py path/to/zero path/to/docs/memory.md [--write]. Prints 'N passed, N failed'."""
import os, re, shlex, subprocess, sys

ZERO, DOC = sys.argv[1], sys.argv[2]
WRITE = "--write" in sys.argv[3:]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402

BLOCK = re.compile(r"```console\n\$ (zero [^\n]*)\n(.*?)```", re.S)
SIZE = re.compile(r"\b\d+(?:\.\d+)? (?:KiB|MiB|GiB|TiB)\b")
COUNT = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")
SECTION = "## A worked example"


def output_of(command):
    args = shlex.split(command)
    r = subprocess.run([ZERO, *args[1:]], capture_output=True, text=True, timeout=120,
                       env=user_env())
    return r.returncode, r.stdout, r.stderr


with open(DOC) as f:
    text = f.read()

outputs = {}  # command -> its output


def replace(m):
    command, shown = m.group(1), m.group(2)
    rc, out, err = output_of(command)
    check(f"`{command}` runs", rc == 0, err)
    outputs[command] = out
    lines = lambda s: [l.rstrip() for l in s.rstrip("\n").splitlines()]  # noqa: E731
    if not WRITE:
        got, want = lines(out), lines(shown)
        diff = [f"line {i + 1}: doc {w!r} / tool {g!r}" for i, (w, g) in
                enumerate(zip(want + [""] * len(got), got + [""] * len(want))) if w != g]
        check(f"docs/memory.md shows `{command}`'s output as the tool prints it", not diff,
              "\n     ".join(diff[:8]))
    return f"```console\n$ {command}\n{out.rstrip()}\n```" if out.strip() else m.group(0)


new_text = BLOCK.sub(replace, text)
check("docs/memory.md has command blocks to check", len(outputs) >= 3, len(outputs))
if WRITE:
    with open(DOC, "w") as f:
        f.write(new_text)

# The worked example's text: every size and byte count in it comes out of its commands.
start = text.find(SECTION)
end = text.find("\n## ", start + len(SECTION))
section = text[start:end if end > 0 else len(text)]
check("docs/memory.md has its worked example", start >= 0)
prose = BLOCK.sub("", section)
section_outputs = "".join(out for command, out in outputs.items() if command in section)
figures = SIZE.findall(prose) + COUNT.findall(prose)
check("the worked example's text quotes the tool's figures", len(figures) >= 10, figures)
for figure in dict.fromkeys(figures):
    check(f"the worked example's {figure} is in the tool's output", figure in section_outputs)

finish()
