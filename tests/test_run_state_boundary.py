"""No module reads the checkpoint's JSON but wizard/checkpoint.py (issue #23, point 1).

Every other module reads the run through the typed model (``RunState``, ``StepRecord``)
and the fold (``wizard.runview``). Three ways the JSON could leak out again, each checked:

1. a module outside checkpoint.py reaches into it: ``read_state`` (the raw reader), a
   private name of the module, or a private member of ``Checkpoint`` (``_state``,
   ``_record``), or it opens ``state.json`` itself;
2. a checkpoint accessor is read as JSON again: a string subscript or ``.get("key")`` on
   what ``record()``/``run()``/``load_run()`` return, directly or through a name bound
   to it in the same function;
3. checkpoint.py grows a public accessor that hands out a dict (its annotation says so):
   only the journal's and the identity records' accessors may, named below with why.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

import wizard.checkpoint as checkpoint_module
from wizard.checkpoint import Checkpoint

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("wizard", "frontend", "steps", "simulator")
OWNER = ROOT / "wizard" / "checkpoint.py"
# Calls whose result is the checkpoint's typed state: never to be read as JSON.
ACCESSORS = {"record", "run", "load_run"}
# Public accessors that return dicts on purpose, and why.
DICT_ALLOWED = {
    "read_journal": "journal entries: the journal is its own format, not state.json",
    "living_children": "journal entries of processes a stopped run started",
    "node_identity": "a node's identity record, wizard/identity.py's format",
    "cluster_identity": "the cluster's identity record, wizard/identity.py's format",
    "earlier_with_failure": "written back into the record by the engine, never read",
    "open_regular": "a file object to read a checkpoint file with, not its content",
    "read_state": "the raw reader: for tests of the on-disk format (flagged in product code)",
}


def product_files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py") if p.resolve() != OWNER)


def private_members() -> set[str]:
    """Private names of the module and of Checkpoint (class and instance attributes)."""
    names = {n for n in vars(checkpoint_module) if n.startswith("_") and not n.startswith("__")}
    names |= {n for n in vars(Checkpoint) if n.startswith("_") and not n.startswith("__")}
    for node in ast.walk(ast.parse(OWNER.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            names.add(node.attr)
    return names


def _accessor_call(node: ast.AST) -> bool:
    """``x.record(...)``, ``x.run()``, ``load_run(...)`` (directly or through attributes)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ACCESSORS


def _json_read(node: ast.AST) -> ast.AST | None:
    """The object a JSON-style read reads: ``obj["key"]`` or ``obj.get("key"...)``."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "setdefault", "pop")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.func.value
    return None


def violations(source: str, private: set[str]) -> list[str]:
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "wizard.checkpoint":
            for alias in node.names:
                if alias.name == "read_state" or alias.name in private:
                    found.append(f"line {node.lineno}: imports {alias.name} from wizard.checkpoint")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"line {node.lineno}: reaches into the checkpoint's {node.attr}")
        elif isinstance(node, ast.Constant) and node.value == "state.json":
            found.append(f"line {node.lineno}: names state.json")
    # Reads of an accessor's result as JSON, directly or through a name bound to it.
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            continue
        bound = {
            target.id
            for node in ast.walk(func)
            if isinstance(node, ast.Assign) and _accessor_call(node.value)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(func):
            read = _json_read(node)
            if read is None:
                continue
            if _accessor_call(read) or (isinstance(read, ast.Name) and read.id in bound):
                found.append(f"line {node.lineno}: reads a checkpoint record as JSON")
    return sorted(set(found))


def test_no_product_module_reads_the_checkpoint_json():
    private = private_members()
    assert {"_state", "_record"} <= private  # the scan knows what it looks for
    problems = {
        str(path.relative_to(ROOT)): found
        for path in product_files()
        if (found := violations(path.read_text(), private))
    }
    assert problems == {}


@pytest.mark.parametrize(
    "source",
    [
        "from wizard.checkpoint import read_state\n",
        "def f(cp):\n    return cp._state['steps']\n",
        "def f(engine):\n    return engine.checkpoint._record('a', 'b')\n",
        "def f(cp):\n    return cp.record('a', 'b')['extra']\n",
        "def f(cp):\n    record = cp.record('a', 'b')\n    return record.get('state')\n",
        "def f(d):\n    return load_run(d).get('steps')\n",
        "def f(d):\n    return json.loads((d / 'state.json').read_text())\n",
    ],
)
def test_the_scan_flags_each_way_the_json_could_leak(source):
    assert violations(source, private_members())


def test_typed_reads_pass_the_scan():
    source = (
        "def f(cp, plan, site):\n"
        "    record = cp.record('a', 'b')\n"
        "    view = fold(cp.run(), plan, site)\n"
        "    return record.result.get('bus_info'), record.state, view.gates()['T00']\n"
    )
    assert violations(source, private_members()) == []


def _returns_dict(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return "dict" in str(text) or str(text) in ("Any", "typing.Any")


def test_checkpoint_accessors_hand_out_typed_state():
    public = [
        (name, obj)
        for name, obj in [*vars(checkpoint_module).items(), *vars(Checkpoint).items()]
        if not name.startswith("_")
        and callable(obj)
        and getattr(obj, "__module__", None) == checkpoint_module.__name__
    ]
    assert len(public) > 20  # the module's functions and Checkpoint's methods
    handing_out = []
    for name, obj in public:
        target = obj.__func__ if isinstance(obj, classmethod | staticmethod) else obj
        if inspect.isclass(target):
            continue
        hints = typing.get_type_hints(target, vars(checkpoint_module))
        if "return" in hints and _returns_dict(hints["return"]) and name not in DICT_ALLOWED:
            handing_out.append(name)
    assert handing_out == []
