"""Reading the optimized programs XLA's plugins dump: what XLA made of a
program, read after the fact (bench/step_copies.py, bench/gemm_floor.py and
their tests, tests/test_donation.py).

    proc = run_dumping(["-c", code], dump_dir)   # a child process that dumps
    for path in optimized_modules(dump_dir):
        instrs = entry_instructions(path)
        copies = [i for i in param_copies(instrs) if i.elements > 1]

XLA_FLAGS is read when the plugin loads, so the run to dump is a process of
its own; it is part of the persistent cache's key, so that run compiles its
programs afresh (with the dump) rather than loading them.
"""
import collections
import glob
import os
import re
import subprocess
import sys

__all__ = ["Instr", "Dot", "dump_flags", "run_dumping", "optimized_modules",
           "entry_instructions", "param_copies", "dots"]

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
# "%name = f32[2,3]{1,0} op(%a, %b), ..." (array-typed results; tuples are skipped)
_INSTR = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\S* (\w[\w-]*)\((.*)$")

Instr = collections.namedtuple("Instr", "name dtype elements nbytes op operand")
Instr.__doc__ = "An entry instruction: its result's element count and bytes, its first operand."
Dot = collections.namedtuple("Dot", "dtype out lhs rhs lhs_batch lhs_contract rhs_batch rhs_contract")
Dot.__doc__ = "A dot: its result's, its operands' dims and its dimension numbers (tuples of ints)."
# "%x = f32[4,3]{1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, ..."
_DOT = re.compile(r"%\S+ = (\w+)\[([\d,]*)\]\S* dot\(%([^,\s]+), %([^,\s)]+)\)(.*)$")
# Any typed value: "%name = f32[4,3]" (an instruction) or "name: f32[4,3]" (a parameter)
_SHAPE = re.compile(r"%?([\w.\-]+)(?: =|:) \w+\[([\d,]*)\]")


def dump_flags(dump_dir, flags=None):
    """XLA_FLAGS (`flags`, else the environment's) plus a text dump of each
    optimized program into dump_dir."""
    base = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    return (f"{base} --xla_dump_to={dump_dir} --xla_dump_hlo_as_text "
            "--xla_dump_hlo_pass_re=NONE").strip()


def run_dumping(args, dump_dir, flags=None, env=None, timeout=None):
    """`python *args` in a child process whose plugin dumps its optimized
    programs into dump_dir (dump_flags: `flags`, else the environment's
    XLA_FLAGS); `env`: more variables for the child. Its
    subprocess.CompletedProcess, output captured as text."""
    child_env = dict(os.environ, **(env or {}), XLA_FLAGS=dump_flags(dump_dir, flags))
    return subprocess.run([sys.executable, *args], env=child_env, capture_output=True,
                          text=True, timeout=timeout)


def optimized_modules(dump_dir):
    """The dumped optimized programs' files."""
    return glob.glob(os.path.join(dump_dir, "*after_optimizations.txt"))


def entry_instructions(path):
    """The array-typed instructions of the module's entry computation, in order."""
    out, inside = [], False
    with open(path) as f:
        for line in f:
            if line.startswith("ENTRY"):
                inside = True
            elif inside and line.startswith("}"):
                break
            elif inside and (m := _INSTR.match(line)):
                name, dtype, dims, op, rest = m.groups()
                n = 1
                for d in filter(None, dims.split(",")):
                    n *= int(d)
                operand = rest.split(")")[0].split(",")[0].strip().lstrip("%")
                out.append(Instr(name, dtype, n, n * _BYTES.get(dtype, 4), op, operand))
    return out


def param_copies(instrs):
    """The `copy` instructions whose operand is an entry parameter: buffers XLA
    copies when the program starts (a donated one it could not write in place)."""
    params = {i.name for i in instrs if i.op == "parameter"}
    return [i for i in instrs if i.op == "copy" and i.operand in params]


def _ints(text):
    return tuple(int(x) for x in filter(None, text.split(",")))


def dots(path):
    """Every dot of the module, the ones inside fusions (XLA's CPU backend
    puts most in YNNPACK fusions) included: operand dims and dimension numbers."""
    with open(path) as f:
        text = f.read()
    shapes = {m.group(1): _ints(m.group(2)) for m in _SHAPE.finditer(text)}
    out = []
    for line in text.splitlines():
        m = _DOT.search(line)
        if not m or m.group(3) not in shapes or m.group(4) not in shapes:
            continue
        dims = dict(re.findall(r"(\w+_dims)=\{([\d,]*)\}", m.group(5)))
        out.append(Dot(m.group(1), _ints(m.group(2)), shapes[m.group(3)], shapes[m.group(4)],
                       _ints(dims.get("lhs_batch_dims", "")),
                       _ints(dims.get("lhs_contracting_dims", "")),
                       _ints(dims.get("rhs_batch_dims", "")),
                       _ints(dims.get("rhs_contracting_dims", ""))))
    return out
