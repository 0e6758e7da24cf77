#!/usr/bin/env python3
"""Will SGLang 0.5.23 run on sgl-kernel 0.4.5 and torch 2.11 (path D)? Evidence from the files alone, on a CPU.

Three questions, one subcommand each (standard library only; `symbols` needs binutils' nm):

  schemas OLD.so NEW.so
      The TORCH_LIBRARY op schemas ("name(Tensor x, ...) -> ...") embedded in two builds of
      sgl_kernel's common_ops library, and their difference: ops removed, added, changed.
  uses SGLANG_DIR OLD_PKG_DIR NEW_PKG_DIR
      Every `from sgl_kernel... import X` in SGLang's source where X is in the NEW sgl_kernel
      package and not in the OLD one, with what guards it (try/except, if, def) and whether its
      module is on the static import closure of a Llama + EAGLE-3 launch (LAUNCH below); then
      the sgl_kernel wrappers whose parameters differ between the two, with SGLang's calls of them;
      then the ops SGLang calls as torch.ops.sgl_kernel.X, present in which build.
      (*_PKG_DIR: the folder holding sgl_kernel/, e.g. a wheel unzipped; the .so files named by
      `schemas` are read for the torch.ops check: OLD_PKG_DIR/sgl_kernel/sm90/common_ops.abi3.so.)
  symbols TORCH_LIB_DIR SO [SO ...]
      The libtorch/libc10 symbols each SO needs that TORCH_LIB_DIR's libraries do not export
      (an extension built against another torch fails to load with "undefined symbol").
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

SCHEMA = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?)\((.*)\)\s*->\s*(.+)$", re.S)
# a mangled name in at::, c10::, torch:: or caffe2:: (also their typeinfo and vtables)
TORCH_SYMBOL = re.compile(r"_Z(T[IVS])?N[rVKRO]*(2at|3c10|5torch|6caffe2)")
ARGS = re.compile(r"[\w\s\[\]\?\!\(\),=\.\-\*'\"|:]*")
# Where a `launch_server --model <Llama-3.1-8B> --speculative-algorithm EAGLE3
# --attention-backend triton|flashinfer` starts importing (server, scheduler, workers, model, draft).
LAUNCH = [
    "sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
    "sglang.srt.managers.tp_worker", "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager", "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.cuda_graph_runner", "sglang.srt.models.llama", "sglang.srt.models.llama_eagle3",
    "sglang.srt.speculative.eagle_worker_v2", "sglang.srt.speculative.eagle_draft_cuda_graph_runner",
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner",
    "sglang.srt.layers.attention.triton_backend", "sglang.srt.layers.attention.flashinfer_backend",
]


# ------------------------------------------------------------------ schemas
def schemas(lib: Path) -> dict[str, str]:
    """name -> normalised schema, for every NUL-terminated string of ``lib`` that parses as one."""
    out: dict[str, str] = {}
    for raw in lib.read_bytes().split(b"\0"):
        if b"->" not in raw or b"(" not in raw or len(raw) > 4000:
            continue
        try:
            text = " ".join(raw.decode("ascii").split())
        except UnicodeDecodeError:
            continue
        for start in (m.start() for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_.]*\(", text)):
            m = SCHEMA.match(text[start:])
            if m and ARGS.fullmatch(m.group(2)):
                args = re.sub(r"\s*([,()\[\]])\s*", r"\1", m.group(2)).replace(",", ", ")
                out[m.group(1)] = f"{m.group(1)}({args}) -> {' '.join(m.group(3).split())}"
                break
    return out


def cmd_schemas(old: Path, new: Path) -> None:
    a, b = schemas(old), schemas(new)
    print(f"# {len(a)} op schemas in {old}\n# {len(b)} op schemas in {new}")
    for name in sorted(set(a) | set(b)):
        if name not in b:
            print(f"removed  {a[name]}")
        elif name not in a:
            print(f"added    {b[name]}")
        elif a[name] != b[name]:
            print(f"changed  {a[name]}\n      -> {b[name]}")
    print(f"# unchanged: {sum(1 for n in a if b.get(n) == a[n])}")


# ------------------------------------------------------------------ uses
def _module_path(root: Path, mod: str) -> Path | None:
    for p in (root / (mod.replace(".", "/") + ".py"), root / mod.replace(".", "/") / "__init__.py"):
        if p.is_file():
            return p
    return None


def _top_imports(tree: ast.Module, mod: str, is_pkg: bool) -> list[str]:
    """Modules imported when ``mod`` is imported: module level, class bodies, try/if bodies; no defs."""
    out: list[str] = []

    def walk(nodes: list[ast.stmt]) -> None:
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(n, ast.Import):
                out.extend(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (n.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                out.append(base)
                out.extend(f"{base}.{a.name}" for a in n.names)
            for fld in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(n, fld, None)
                if isinstance(sub, list):
                    walk(sub)

    walk(tree.body)
    return out


def launch_closure(root: Path) -> set[str]:
    """Source files (relative to ``root``) statically reachable from LAUNCH (an over-approximation:
    every branch of a module-level if/try counts)."""
    seen: set[str] = set()
    files: set[str] = set()
    stack = list(LAUNCH)
    while stack:
        mod = stack.pop()
        if mod in seen or not mod.startswith("sglang"):
            continue
        path = _module_path(root, mod)
        if path is None:
            continue
        seen.add(mod)
        files.add(str(path.relative_to(root)))
        parts = mod.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        stack.extend(_top_imports(ast.parse(path.read_text()), mod, path.name == "__init__.py"))
    return files


def exported(pkg_root: Path) -> set[str]:
    """'module:name' for every name defined or imported at the top of sgl_kernel's modules."""
    names: set[str] = set()
    for p in (pkg_root / "sgl_kernel").rglob("*.py"):
        mod = ".".join(p.relative_to(pkg_root).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names.update(f"{mod}:{a.asname or a.name}" for a in node.names)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(f"{mod}:{node.name}")
            elif isinstance(node, ast.Assign):
                names.update(f"{mod}:{t.id}" for t in node.targets if isinstance(t, ast.Name))
    return names


def wrappers(pkg_root: Path) -> dict[str, list[str]]:
    """Top-level function name -> its parameter names, over sgl_kernel's modules."""
    out: dict[str, list[str]] = {}
    for p in (pkg_root / "sgl_kernel").rglob("*.py"):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                a = node.args
                out.setdefault(node.name, [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs])
    return out


def _guards(stack: list[ast.AST], src: str) -> str:
    g = []
    for n in stack:
        if isinstance(n, ast.Try):
            g.append("try/except " + ",".join((ast.get_source_segment(src, h.type) or "*") if h.type else "*"
                                              for h in n.handlers))
        elif isinstance(n, ast.If):
            g.append("if " + (ast.get_source_segment(src, n.test) or "?")[:50])
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            g.append(f"in def {n.name}")
    return " > ".join(g) or "unguarded, module level"


def cmd_uses(sg: Path, old: Path, new: Path) -> None:
    e_old, e_new = exported(old), exported(new)
    w_old, w_new = wrappers(old), wrappers(new)
    changed = {n for n in set(w_old) & set(w_new) if w_old[n] != w_new[n]}
    onpath = launch_closure(sg)
    imports: list[tuple[bool, str]] = []
    calls: list[tuple[bool, str]] = []
    ops: dict[str, set[str]] = {}
    for p in sorted(sg.rglob("*.py")):
        rel = str(p.relative_to(sg))
        src = p.read_text()
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        local: dict[str, str] = {}

        def visit(node: ast.AST, stack: list[ast.AST], rel: str = rel, src: str = src,
                  local: dict[str, str] = local) -> None:
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sgl_kernel":
                for a in node.names:
                    local[a.asname or a.name] = a.name
                    key = f"{node.module}:{a.name}"
                    if key in e_new and key not in e_old:
                        imports.append((rel in onpath, f"{rel}:{node.lineno} from {node.module} import "
                                                       f"{a.name} [{_guards(stack, src)}]"))
            if isinstance(node, ast.Call):
                f = node.func
                name = local.get(f.id) if isinstance(f, ast.Name) else None
                if isinstance(f, ast.Attribute):
                    chain = ast.unparse(f)
                    if chain.startswith("sgl_kernel."):
                        name = f.attr
                    elif chain.startswith("torch.ops.sgl_kernel."):
                        ops.setdefault(f.attr, set()).add(rel)
                if name in changed:
                    calls.append((rel in onpath, f"{rel}:{node.lineno} {name}(keywords "
                                                 f"{[k.arg for k in node.keywords]})"))
            scope = (ast.Try, ast.If, ast.FunctionDef, ast.AsyncFunctionDef)
            nxt = stack + [node] if isinstance(node, scope) else stack
            for c in ast.iter_child_nodes(node):
                visit(c, nxt)

        visit(tree, [])
    tag = lambda on: "ON " if on else "off"  # noqa: E731
    print(f"# launch closure: {len(onpath)} source files statically reachable from {len(LAUNCH)} launch modules")
    print(f"# imports of a name {new.name} has and {old.name} lacks: {len(imports)}")
    for on, line in sorted(imports, key=lambda r: (not r[0], r[1])):
        print(f"{tag(on)} {line}")
    print(f"# wrappers whose parameters differ: {len(changed)}")
    for n in sorted(changed):
        print(f"    {n}: ({', '.join(w_old[n])}) -> ({', '.join(w_new[n])})")
    for on, line in sorted(calls, key=lambda r: (not r[0], r[1])):
        print(f"{tag(on)} call {line}")
    so = "sgl_kernel/sm90/common_ops.abi3.so"
    s_old, s_new = schemas(old / so), schemas(new / so)
    print("# torch.ops.sgl_kernel.X called by SGLang, excluding *_cpu (in OLD / NEW sm90 build; schema equal?)")
    for n, files in sorted(ops.items()):
        if n.endswith("_cpu"):
            continue
        on = any(f in onpath for f in files)
        same = "same schema" if n in s_old and s_old.get(n) == s_new.get(n) else ""
        print(f"{tag(on)} {n}: old {'yes' if n in s_old else 'no'}, new {'yes' if n in s_new else 'no'} {same} "
              f"({', '.join(sorted(files)[:2])})")


# ------------------------------------------------------------------ symbols
def _nm(args: list[str]) -> set[str]:
    out = subprocess.run(["nm", "-D", *args], capture_output=True, text=True, check=False).stdout
    return {ln.split()[-1].split("@")[0] for ln in out.splitlines() if ln.strip()}


def cmd_symbols(torch_lib: Path, sos: list[Path]) -> None:
    libs = sorted(str(p) for p in torch_lib.glob("*.so*"))
    defined = _nm(["--defined-only", *libs])
    for so in sos:
        need = _nm(["--undefined-only", str(so)])
        torchish = {s for s in need if TORCH_SYMBOL.match(s) or s.startswith(("torch_", "THP"))}
        missing = sorted(torchish - defined)
        print(f"{so}: needs {len(torchish)} torch symbols, {len(missing)} not exported by {torch_lib}")
        if missing:
            demangled = subprocess.run(["c++filt"], input="\n".join(missing), capture_output=True, text=True).stdout
            for ln in demangled.splitlines():
                print(f"    {ln}")


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "schemas":
        cmd_schemas(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 4 and argv[0] == "uses":
        cmd_uses(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    elif len(argv) >= 3 and argv[0] == "symbols":
        cmd_symbols(Path(argv[1]), [Path(a) for a in argv[2:]])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
