"""Twin pairs keep their contract, and twins stay leaves.

1. Contracts.  Every native/pure pair has a ``typing.Protocol`` in
   ``kraft_storage/_contracts.py`` / ``kraft_node/_contracts.py``.  Both
   implementations are imported directly (``<pkg>._native.X`` and
   ``<pkg>._pure.X``; the native one is built in either mode, so this runs the
   same with ``KRAFT_NO_EXTENSIONS=1``) and checked against it:

   * every name of the contract exists in both;
   * functions and methods: parameter names, kinds and defaults equal the
     contract's (Cython builds with ``binding=True``, so ``inspect.signature``
     reads the ``.so`` functions and methods; slot wrappers of dunders only
     give an arity, so dunders are compared by arity);
   * classes: a cdef class has no introspectable constructor
     (``inspect.signature`` raises ValueError, ``__init__`` is a slot wrapper
     without ``__text_signature__``), so each class is *called* with the
     contract's documented arguments, positionally and by keyword, and the
     instance must have the contract's attributes; generated message classes
     (constructor ``**fields``) must agree between the twins (constructor
     keywords, defaults, nested struct classes, class constants);
   * constants are equal in both twins (classes in them compared by name).

   ``test_a_removed_name_fails`` proves the check fails when a name goes missing
   from either twin (and when a parameter or a constant changes).

2. Import rule.  A kernel (``kraft_storage/_pure/*.py``, ``kraft_node/_pure/*.py``)
   imports nothing above it: only the standard library, numpy, its sibling
   kernels and the leaves (``LEAVES``); the leaves themselves import only each
   other.  The native sources (``.pyx``/``.pxi``, read as text) follow the same
   rule and must not import their pure twins.  What cannot move yet is in the
   commented allow-list; an entry that no longer matches an import fails too,
   so the list only shrinks.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import typing
from pathlib import Path
from types import ModuleType

import pytest
from conftest import REPO

import kraft_node._contracts as node_contracts
import kraft_storage._contracts as storage_contracts

PAIRS = ([("kraft_storage", name, proto) for name, proto in storage_contracts.TWINS.items()]
         + [("kraft_node", name, proto) for name, proto in node_contracts.TWINS.items()])
PAIR_IDS = [f"{pkg}.{name}" for pkg, name, _ in PAIRS]


def _twins(pkg: str, name: str) -> tuple[ModuleType, ModuleType]:
    return (importlib.import_module(f"{pkg}._native.{name}"), importlib.import_module(f"{pkg}._pure.{name}"))


# ------------------------------------------------------------------ reading a contract

#: Dunders a contract may state (others on a Protocol are typing's machinery).
_DUNDERS = {"__init__", "__enter__", "__exit__", "__len__", "__iter__", "__contains__",
            "__getitem__", "__setitem__", "__delitem__"}


def _is_protocol(obj) -> bool:
    return isinstance(obj, type) and bool(getattr(obj, "_is_protocol", False))


def _methods(proto: type) -> dict[str, object]:
    """Functions a Protocol states, inherited ones included (name -> the attribute as got from the class)."""
    out: dict[str, object] = {}
    for base in reversed(proto.__mro__):
        if base in (object, typing.Protocol, typing.Generic) or not _is_protocol(base):
            continue
        for k, v in vars(base).items():
            fn = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
            written_here = inspect.isfunction(fn) and fn.__qualname__ == f"{base.__qualname__}.{k}"
            if written_here and (not k.startswith("_") or k in _DUNDERS):
                out[k] = getattr(proto, k)
    return out


def _annotations(proto: type) -> dict[str, object]:
    return {k: v for k, v in typing.get_type_hints(proto).items() if not k.startswith("_")}


def _properties(proto: type) -> dict[str, property]:
    return {k: v for base in reversed(proto.__mro__) if _is_protocol(base)
            for k, v in vars(base).items() if isinstance(v, property)}


def _module_members(proto: type) -> dict[str, object]:
    """Name -> type of a module Protocol's attributes: constants (annotations) and classes (properties)."""
    out = dict(_annotations(proto))
    for k, prop in _properties(proto).items():
        out[k] = typing.get_type_hints(prop.fget)["return"]
    return out


def _attributes(proto: type) -> list[str]:
    """Instance attributes an instance Protocol states: its annotations and its (read-only) properties."""
    return sorted(set(_annotations(proto)) | set(_properties(proto)))


def _class_target(hint) -> type | None:
    """``P`` when ``hint`` is ``type[P]``, else None."""
    if typing.get_origin(hint) is type:
        (arg,) = typing.get_args(hint)
        return arg
    return None


# ------------------------------------------------------------------ comparing signatures

_EMPTY = inspect.Parameter.empty


def _signature(obj) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (ValueError, TypeError):
        return None


def _compare_params(where: str, want: list[inspect.Parameter], got: list[inspect.Parameter]) -> list[str]:
    shape = [(p.name, p.kind) for p in want]
    if [(p.name, p.kind) for p in got] != shape:
        return [f"{where}: parameters {_fmt(got)} != contract {_fmt(want)}"]
    out = []
    for w, g in zip(want, got):
        if (w.default is _EMPTY) != (g.default is _EMPTY):
            out.append(f"{where}: parameter {w.name!r} default {'missing' if g.default is _EMPTY else 'added'}")
        elif w.default not in (_EMPTY, Ellipsis) and not _same(w.default, g.default):
            out.append(f"{where}: parameter {w.name!r} default {g.default!r} != contract {w.default!r}")
    return out


def _fmt(params) -> str:
    return "(" + ", ".join(f"{p.kind.description} {p.name}" for p in params) + ")"


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. numpy arrays
        return repr(a) == repr(b)


def _arity(params) -> tuple[int, bool]:
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    return n, any(p.kind is p.VAR_POSITIONAL for p in params)


def _check_callable(where: str, contract_fn, impl_fn, *, drop_self: bool, dunder: bool) -> list[str]:
    if not callable(impl_fn):
        return [f"{where}: not callable ({type(impl_fn).__name__})"]
    want = list(inspect.signature(contract_fn).parameters.values())
    if drop_self:
        want = want[1:]
    sig = _signature(impl_fn)
    if sig is None:
        text = getattr(impl_fn, "__text_signature__", None)
        return [f"{where}: signature not introspectable (__text_signature__={text!r}); build with binding=True"]
    got = list(sig.parameters.values())
    if dunder:  # slot wrappers say (self, key, /): compare the arity
        return [] if _arity(got) == _arity(want) else [f"{where}: arity {_fmt(got)} != contract {_fmt(want)}"]
    return _compare_params(where, want, got)


# ------------------------------------------------------------------ constructor samples

def _registry(m):
    return m.SnapshotRegistry()


#: (kernel, class) -> kwargs of a call with the contract's documented arguments (every
#: parameter named, in the contract's order); the module is the twin under test.
def _topic_plan_args(m):
    from kraft_node.metadata.controller.errors import ReplayError
    from kraft_node.metadata.image.topics import COMPACT_MIN_OVERRIDES, TopicDelta, TopicImage, TopicPartitions
    return {"delta_cls": TopicDelta, "topic_cls": TopicImage, "partitions_cls": TopicPartitions,
            "empty_partitions": TopicPartitions.EMPTY, "compact_min": COMPACT_MIN_OVERRIDES,
            "compact": TopicPartitions.compacted, "error_cls": ReplayError}


def _run_scanner_args() -> dict:
    from kraft_node.metadata.controller.replication_control import DirectoryId, PartitionRegistration
    return {"registration_cls": PartitionRegistration, "migrating": DirectoryId.MIGRATING, "change_api_key": 5}


SAMPLES: dict[tuple[str, str], typing.Callable[[ModuleType], dict]] = {
    ("_change_replay", "RunScanner"): lambda m: _run_scanner_args(),
    ("_batch", "Record"): lambda m: {"offset": 7, "timestamp": 1, "key": None, "value": b"v", "headers": (),
                                     "attributes": 0},
    ("_fdsync", "AsyncFdatasync"): lambda m: {"depth": 4},
    ("_index", "IndexSearcher"): lambda m: {"buf": bytearray(32), "base_offset": 100, "kind": "offset", "n": 0},
    ("_logappend", "Appender"): lambda m: {},
    ("_partition_fold", "PartitionFold"): lambda m: {},
    ("_topics_map", "TopicMap"): lambda m: {"items": {"a": 1}},
    ("_topics_map", "TopicMapMutation"): lambda m: {"base": m.TopicMap()},
    ("_topics_map", "TopicPlan"): _topic_plan_args,
    ("_timeline", "Snapshot"): lambda m: {"epoch": 5},
    ("_timeline", "SnapshotRegistry"): lambda m: {},
    ("_timeline", "TimelineHashMap"): lambda m: {"registry": _registry(m), "expected_size": 4},
    ("_timeline", "TimelineHashSet"): lambda m: {"registry": _registry(m), "expected_size": 4},
    ("_timeline", "TimelineInteger"): lambda m: {"registry": _registry(m), "value": 3},
    ("_timeline", "TimelineLong"): lambda m: {"registry": _registry(m), "value": 3},
    ("_timeline", "TimelineObject"): lambda m: {"registry": _registry(m), "initial": "x"},
}


def _close(obj) -> None:
    for name in ("close", "release"):
        if callable(getattr(obj, name, None)):
            getattr(obj, name)()


def _check_class(where: str, kernel: str, name: str, cls, proto: type, module: ModuleType) -> list[str]:
    if not isinstance(cls, type):
        return [f"{where}: not a class ({type(cls).__name__})"]
    out: list[str] = []
    methods = _methods(proto)
    for mname, fn in methods.items():
        if mname == "__init__":
            continue
        impl = getattr(cls, mname, None)
        if impl is None:
            out.append(f"{where}.{mname}: missing")
            continue
        # got from the classes: both sides keep ``self``, a classmethod is bound on both sides
        out += _check_callable(f"{where}.{mname}", fn, impl, drop_self=False, dunder=mname.startswith("__"))
    init = inspect.signature(methods["__init__"])
    want = list(init.parameters.values())[1:]
    if any(p.kind is p.VAR_KEYWORD for p in want):  # a generated message class
        out += [f"{where}: class has no attribute {a!r}" for a in _attributes(proto) if not hasattr(cls, a)]
        return out  # its fields: compared twin against twin (test_generated_classes_agree)
    sig = _signature(cls)
    if sig is not None:  # a Python class: its constructor is introspectable
        out += _compare_params(f"{where}()", want, list(sig.parameters.values()))
    # Any class (and the only way into a cdef class's __cinit__): call it as documented.
    sample = SAMPLES[(kernel, name)]
    try:
        kwargs = sample(module)
    except Exception as exc:  # noqa: BLE001 - e.g. the registry class is missing
        return out + [f"{where}(): cannot build the documented arguments: {exc!r}"]
    assert list(kwargs) == [p.name for p in want], f"SAMPLES[{kernel}, {name}] must name {[p.name for p in want]}"
    calls = [("keywords", (), kwargs)]
    if all(p.kind is p.POSITIONAL_OR_KEYWORD for p in want):
        calls.append(("positions", tuple(sample(module).values()), {}))
    for how, args, kw in calls:
        try:
            obj = cls(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - TypeError: names/arity; anything else: reported too
            out.append(f"{where}(): refuses the contract's arguments by {how}: {exc!r}")
            continue
        try:
            for attr in _attributes(proto):
                if not hasattr(obj, attr):
                    out.append(f"{where}: instance has no attribute {attr!r}")
        finally:
            _close(obj)
    return out


# ------------------------------------------------------------------ the checks

def check_twin(module: ModuleType, proto: type, kernel: str) -> list[str]:
    """Problems of one implementation ``module`` against the contract ``proto`` (empty: it keeps it)."""
    out: list[str] = []
    where = module.__name__
    for name, fn in _methods(proto).items():
        if not hasattr(module, name):
            out.append(f"{where}.{name}: missing")
            continue
        out += _check_callable(f"{where}.{name}", fn, getattr(module, name), drop_self=True, dunder=False)
    for name, hint in _module_members(proto).items():
        if not hasattr(module, name):
            out.append(f"{where}.{name}: missing")
            continue
        value = getattr(module, name)
        target = _class_target(hint)
        if target is None:
            origin = typing.get_origin(hint) or hint
            if isinstance(origin, type) and not isinstance(value, origin):
                out.append(f"{where}.{name}: {type(value).__name__}, contract says {origin.__name__}")
        elif _is_protocol(target):
            out += _check_class(f"{where}.{name}", kernel, name, value, target, module)
        elif not (isinstance(value, type) and issubclass(value, target)):
            out.append(f"{where}.{name}: {value!r} is not a subclass of {target.__module__}.{target.__name__}")
    return out


def _norm(v):
    """A constant, with the twin-specific parts (classes) replaced by their names."""
    if isinstance(v, type):
        return ("class", v.__qualname__)
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_norm(x) for x in v)
    return v


def compare_constants(native: ModuleType, pure: ModuleType, proto: type) -> list[str]:
    out = []
    for name, hint in _module_members(proto).items():
        if _class_target(hint) is not None or not (hasattr(native, name) and hasattr(pure, name)):
            continue
        a, b = _norm(getattr(native, name)), _norm(getattr(pure, name))
        if not _same(a, b):
            out.append(f"{name}: native {str(a)[:80]} != pure {str(b)[:80]}")
    return out


def _message_shape(cls, path: str, out: dict) -> None:
    """Constructor, class constants and nested message classes of a generated message class."""
    sig = inspect.signature(cls)
    out[path] = [(p.name, p.kind, repr(p.default)) for p in sig.parameters.values()]
    for k in sorted(dir(cls)):
        if k.startswith("_"):
            continue
        v = getattr(cls, k)
        if isinstance(v, type) and hasattr(v, "read_prefix"):
            _message_shape(v, f"{path}.{k}", out)
        elif isinstance(v, (int, str)) and k.isupper():
            out[f"{path}.{k}"] = v


def compare_generated(native: ModuleType, pure: ModuleType, proto: type) -> list[str]:
    out = []
    for name, hint in _module_members(proto).items():
        target = _class_target(hint)
        if not (_is_protocol(target) and "fields" in inspect.signature(target.__init__).parameters):
            continue
        if not (hasattr(native, name) and hasattr(pure, name)):
            continue  # reported by check_twin
        a: dict = {}
        b: dict = {}
        _message_shape(getattr(native, name), name, a)
        _message_shape(getattr(pure, name), name, b)
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(f"{key}: native {a.get(key)!r} != pure {b.get(key)!r}")
    return out


# ------------------------------------------------------------------ tests: contracts

@pytest.mark.parametrize("pkg,name,proto", PAIRS, ids=PAIR_IDS)
def test_both_twins_keep_the_contract(pkg, name, proto):
    native, pure = _twins(pkg, name)
    problems = check_twin(native, proto, name) + check_twin(pure, proto, name)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("pkg,name,proto", PAIRS, ids=PAIR_IDS)
def test_constants_are_equal_in_both_twins(pkg, name, proto):
    native, pure = _twins(pkg, name)
    problems = compare_constants(native, pure, proto)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("pkg,name,proto", PAIRS, ids=PAIR_IDS)
def test_generated_classes_agree(pkg, name, proto):
    native, pure = _twins(pkg, name)
    assert compare_generated(native, pure, proto) == []


def test_every_twin_pair_has_a_contract():
    for pkg, contracts in (("kraft_storage", storage_contracts), ("kraft_node", node_contracts)):
        built = {p.stem for p in (REPO / pkg / "_native").glob("*.pyx")}
        assert built == set(contracts.TWINS), f"{pkg}: pairs without a contract or contracts without a pair"


def test_every_contract_member_has_a_docstring():
    for _pkg, _name, proto in PAIRS:
        assert inspect.getdoc(proto), proto.__name__
        for mname, fn in _methods(proto).items():
            assert inspect.getdoc(fn), f"{proto.__name__}.{mname} has no docstring"
        for pname, prop in _properties(proto).items():
            assert inspect.getdoc(prop), f"{proto.__name__}.{pname} has no docstring"
        for cname, hint in _module_members(proto).items():
            target = _class_target(hint)
            if _is_protocol(target):
                for mname, fn in _methods(target).items():
                    assert inspect.getdoc(fn), f"{target.__name__}.{mname} ({cname}) has no docstring"
                for pname, prop in _properties(target).items():
                    assert inspect.getdoc(prop), f"{target.__name__}.{pname} ({cname}) has no docstring"
        src = inspect.getsource(proto)
        for attr in _annotations(proto):  # a constant: the annotation is followed by its docstring line
            assert re.search(rf'^    {attr}: .*\n    """', src, re.MULTILINE), f"{proto.__name__}.{attr}: no docstring"


#: (kernel, name removed, which twin): a function, a constant, a class, in either twin.
REMOVALS = [("_batch", "scan", "native"), ("_batch", "scan", "pure"),
            ("_batch", "CRC_VERIFY", "native"), ("_logappend", "MODE_LEADER", "pure"),
            ("_timeline", "TimelineHashSet", "native"), ("_timeline", "SnapshotRegistry", "pure")]


@pytest.mark.parametrize("kernel,name,side", REMOVALS)
def test_a_removed_name_fails(monkeypatch, kernel, name, side):
    native, pure = _twins("kraft_storage", kernel)
    module = native if side == "native" else pure
    proto = storage_contracts.TWINS[kernel]
    assert check_twin(module, proto, kernel) == []
    monkeypatch.delattr(module, name)
    assert f"{module.__name__}.{name}: missing" in check_twin(module, proto, kernel)


def test_a_changed_signature_method_or_constant_fails(monkeypatch):
    native, pure = _twins("kraft_storage", "_crc32c")
    monkeypatch.setattr(pure, "crc32c", lambda data, seed=0: 0)
    assert any("crc32c: parameters" in p for p in check_twin(pure, storage_contracts.Crc32cKernel, "_crc32c"))
    monkeypatch.setattr(pure, "crc32c", lambda data, crc=1: 0)
    assert any("default 1" in p for p in check_twin(pure, storage_contracts.Crc32cKernel, "_crc32c"))

    native, pure = _twins("kraft_storage", "_index")
    monkeypatch.delattr(pure.IndexSearcher, "lookup")
    assert "kraft_storage._pure._index.IndexSearcher.lookup: missing" in check_twin(
        pure, storage_contracts.IndexKernel, "_index")

    native, pure = _twins("kraft_storage", "_batch")
    monkeypatch.setattr(pure, "HEADER_SIZE", 62)
    assert [p for p in compare_constants(native, pure, storage_contracts.BatchKernel) if p.startswith("HEADER_SIZE")]

    native, pure = _twins("kraft_node", "_rpc_headers")
    monkeypatch.setattr(pure.RequestHeader, "HIGHEST_VERSION", 99)
    assert compare_generated(native, pure, node_contracts.RpcHeadersCodec)


def test_a_class_that_refuses_the_documented_arguments_fails(monkeypatch):
    _native, pure = _twins("kraft_storage", "_timeline")

    class Renamed(pure.TimelineObject):
        def __init__(self, registry, start):  # contract: (registry, initial)
            super().__init__(registry, start)

    monkeypatch.setattr(pure, "TimelineObject", Renamed)
    problems = check_twin(pure, storage_contracts.TimelineKernel, "_timeline")
    assert any("TimelineObject()" in p for p in problems), problems


# ------------------------------------------------------------------ tests: twins are leaves

#: Modules a kernel may import from the project: leaves that import nothing above them.
LEAVES = {
    "kraft_storage",           # the package: its __init__ imports only accel
    "kraft_storage.accel",    # the chooser (load): importlib and os only
    "kraft_storage._common",   # constants and helpers shared by twins and callers
    "kraft_storage._contracts",  # the twin pairs' Protocols (typing only), used by typed facades
    "kraft_storage.errors",    # the error classes
    "kraft_storage.crc32c",    # the CRC facade: accel and the _crc32c kernel only
    "kraft_storage.messages",          # the package: its __init__ imports only the runtime
    "kraft_storage.messages.runtime",  # the generated codecs' runtime: errors only
}
KERNEL_PACKAGES = ("kraft_storage._pure.", "kraft_node._pure.")
NATIVE_PACKAGES = ("kraft_storage._native.", "kraft_node._native.")

#: (file, module it imports) that cannot follow the rule yet.  Each one says why and what moves it.
ALLOWED: set[tuple[str, str]] = set()  # empty: every kernel and native module follows the rule


def _py_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (``from a import b`` gives ``a`` and, for a package
    of this project, ``a.b``); relative imports resolved."""
    rel = path.relative_to(REPO).with_suffix("")
    package = ".".join(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            if base in ("kraft_storage", "kraft_node") or base.endswith(("._pure", "._native")):
                out.update(f"{base}.{a.name}" for a in node.names)
    return out


_PYX_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import\b(?!.*\bcimport\b)"
                         r"|import[ \t]+([\w.]+))", re.MULTILINE)


def _pyx_imports(path: Path) -> set[str]:
    """Python-level imports of a Cython source, read as text (``cimport`` is C-level and not checked)."""
    text = re.sub(r'"""[\s\S]*?"""', "", path.read_text())
    out = set()
    for m in _PYX_IMPORT.finditer(text):
        line = text[m.start():text.find("\n", m.start())]
        if "cimport" in line:
            continue
        out.add(m.group(1) or m.group(2))
    return out


def _project(mod: str) -> bool:
    return mod.split(".")[0] in ("kraft_storage", "kraft_node")


def _violations(path: Path, imports: set[str], *, native: bool) -> set[tuple[str, str]]:
    f = str(path.relative_to(REPO))
    bad = set()
    for mod in imports:
        if not _project(mod) or mod in LEAVES:
            continue
        if mod.startswith(KERNEL_PACKAGES) and not native:
            continue  # a sibling kernel (prefer accel.load: one chooser)
        if mod.startswith(NATIVE_PACKAGES) and native:
            continue  # a sibling native module
        bad.add((f, mod))
    return bad


def _kernel_files():
    for pkg in ("kraft_storage", "kraft_node"):
        for p in sorted((REPO / pkg / "_pure").glob("*.py")):
            yield p, _py_imports(p), False
        for p in sorted((REPO / pkg / "_native").glob("*.py")):
            yield p, _py_imports(p), True
        for ext in ("pyx", "pxi"):
            for p in sorted((REPO / pkg / "_native").glob(f"*.{ext}")):
                yield p, _pyx_imports(p), True


def test_kernels_import_nothing_above_them():
    found = set()
    for path, imports, native in _kernel_files():
        found |= _violations(path, imports, native=native)
    assert found - ALLOWED == set(), "kernels importing the layers above them (move the name to a leaf)"


def test_the_allow_list_has_no_stale_entries():
    found = set()
    for path, imports, native in _kernel_files():
        found |= _violations(path, imports, native=native)
    assert ALLOWED - found == set(), "fixed: remove these from ALLOWED"


def test_the_leaves_import_only_leaves():
    for mod in sorted(LEAVES):
        path = REPO / (mod.replace(".", "/") + ".py")
        if not path.exists():  # a package: its __init__
            path = REPO / mod.replace(".", "/") / "__init__.py"
        project = {m for m in _py_imports(path) if _project(m)}
        assert project <= LEAVES, f"{mod} imports {sorted(project - LEAVES)}"


def test_the_import_scan_sees_imports():
    # the rule is only as good as the parsers: both must see what the kernels import today
    assert "kraft_storage.accel" in _py_imports(REPO / "kraft_storage/_pure/_logappend.py")
    assert "kraft_storage._common" in _py_imports(REPO / "kraft_storage/_pure/_timeline.py")
    pyx = _pyx_imports(REPO / "kraft_storage/_native/_logappend.pyx")
    assert "kraft_storage.errors" in pyx
    assert not any("recordbatch" in m for m in pyx)  # cimport: C level, not checked
    assert "sys" in _pyx_imports(REPO / "kraft_storage/_native/_timeline.pyx")  # an indented (lazy) import
    assert _violations(REPO / "kraft_storage/_pure/_x.py", {"kraft_storage.record.batch"}, native=False)
    assert _violations(REPO / "kraft_storage/_native/_x.pyx", {"kraft_storage._pure._x"}, native=True)



_IMPLEMENTATIONS = {"kraft_storage._pure", "kraft_storage._native", "kraft_node._pure", "kraft_node._native"}


def _bypasses(imports: set[str]) -> set[str]:
    """The imports that pick a twin themselves (``<pkg>._native[.X]``/``<pkg>._pure[.X]``)."""
    return {m for m in imports if m in _IMPLEMENTATIONS or m.startswith(KERNEL_PACKAGES + NATIVE_PACKAGES)}


def test_only_the_chooser_picks_an_implementation():
    """One chooser, no bypass: outside the kernels themselves, no module imports
    ``<pkg>._native.X`` or ``<pkg>._pure.X``; they all go through ``kraft_storage.accel``."""
    found = []
    for pkg in ("kraft_storage", "kraft_node"):
        for p in sorted((REPO / pkg).rglob("*.py")):
            if p.parent.name not in ("_pure", "_native"):
                found += [(str(p.relative_to(REPO)), m) for m in sorted(_bypasses(_py_imports(p)))]
    assert found == []
    # what the scan catches: a twin by its module, or the package's "from ... import _batch"
    assert _bypasses({"kraft_storage._pure._batch", "numpy"}) == {"kraft_storage._pure._batch"}
    assert _bypasses({"kraft_storage._native"}) == {"kraft_storage._native"}
    assert _bypasses({"kraft_storage.accel", "kraft_storage._common"}) == set()
