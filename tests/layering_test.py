#!/usr/bin/env python3
"""Fails when a source file includes a header across a forbidden edge of the module graph.

Three graphs are checked (docs/ARCHITECTURE.md draws them):
1. Modules: base <- storage, engine; profiler -> storage, engine; run -> profiler, engine, storage;
   tuner -> run and below; gui and cli -> anything below them (gui never from cli and vice versa).
   Seen through `moewb/<module>/` includes, SQLite (storage and the tuner's study store only) and
   Qt (gui only).
2. The engine's layers, by the folder a file lives in and the folder its quoted include names
   (every engine include is a path under engine/, e.g. "runtime/tensor/tensor.h"):
       runtime, config <- ops, comm <- model <- train
   ops and comm are siblings and may not include each other. The public headers under
   engine/include/moewb/engine/ belong to a layer too (PUBLIC_HEADER_LAYER).
3. The GUI: gui/models (a library with no widgets) never includes gui/widgets or gui/app headers,
   nor Qt Widgets; gui/widgets never includes gui/app.
Usage: layering_test.py REPO_ROOT
"""
import pathlib
import re
import sys
import tempfile

ALLOWED = {
    "base": {"base"},
    "storage": {"base", "storage"},
    "engine": {"base", "engine"},
    "profiler": {"base", "storage", "engine", "profiler"},
    "run": {"base", "storage", "engine", "profiler", "run"},
    "tuner": {"base", "storage", "engine", "run", "tuner"},
    "gui": {"base", "storage", "engine", "profiler", "run", "tuner", "gui"},
    "cli": {"base", "storage", "engine", "profiler", "run", "tuner", "cli"},
}
# Third-party headers a module may not use either: SQLite belongs to storage (the trace store)
# and the tuner (its own study files, tuner/src/study_store.cpp), Qt to gui.
FORBIDDEN_SYSTEM = {
    "sqlite3.h": {"storage", "tuner"},
}
QT_RE = re.compile(r'#\s*include\s*[<"](Q[A-Za-z]+|Qt[A-Za-z]+/)')
INCLUDE_RE = re.compile(r'#\s*include\s*[<"]moewb/([a-z_]+)/')
SYSTEM_RE = re.compile(r'#\s*include\s*[<"]([^>"]+)[>"]')
QUOTED_RE = re.compile(r'#\s*include\s*"([^"]+)"')
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}

# The engine's layers, lowest first; a layer may include its own folder and the layers it lists.
ENGINE_LAYERS = {
    "runtime": {"runtime"},
    "config": {"config"},
    "ops": {"runtime", "config", "ops"},
    "comm": {"runtime", "config", "comm"},
    "model": {"runtime", "config", "ops", "comm", "model"},
    "train": {"runtime", "config", "ops", "comm", "model", "train"},
}
PUBLIC_HEADER_LAYER = {
    "event_sink.h": "runtime",
    "config.h": "config",
    "swap.h": "config",  # validateConfig checks swap.ops; the planner is in model/swap/
    "model_flops.h": "model",
    "model_parameters.h": "model",
    "trainer.h": "train",
}
# Qt Widgets headers (the gui/models library links Qt Core and Gui only).
QT_WIDGETS_RE = re.compile(
    r'#\s*include\s*[<"](QtWidgets/|Q(Widget|MainWindow|Dialog|Label|PushButton|AbstractScrollArea|'
    r'ScrollArea|DockWidget|TableView|TreeView|HeaderView|Application|MessageBox|FileDialog|ToolBar|'
    r'Menu|MenuBar|StatusBar|Splitter|ComboBox|SpinBox|DoubleSpinBox|CheckBox|LineEdit|[VHG]?BoxLayout|'
    r'GridLayout|FormLayout|ToolTip|Style|TabWidget|GroupBox|ProgressBar|Slider|Frame)\b)')


def sources(base: pathlib.Path):
    for path in base.rglob("*"):
        if path.suffix in SOURCE_SUFFIXES:
            yield path


def module_violations(root: pathlib.Path):
    found = []
    for module, allowed in ALLOWED.items():
        base = root / module
        if not base.is_dir():
            continue
        for path in sources(base):
            text = path.read_text(errors="replace")
            for lineno, line in enumerate(text.splitlines(), 1):
                m = INCLUDE_RE.search(line)
                if m and m.group(1) not in allowed:
                    found.append(f"{path.relative_to(root)}:{lineno}: {module} may not include "
                                 f"moewb/{m.group(1)}/ (allowed: {', '.join(sorted(allowed))})")
                s = SYSTEM_RE.search(line)
                if s and s.group(1) in FORBIDDEN_SYSTEM and module not in FORBIDDEN_SYSTEM[s.group(1)]:
                    found.append(f"{path.relative_to(root)}:{lineno}: {module} may not include "
                                 f"{s.group(1)} (only {', '.join(FORBIDDEN_SYSTEM[s.group(1)])})")
                if QT_RE.search(line) and module != "gui":
                    found.append(f"{path.relative_to(root)}:{lineno}: {module} may not include Qt")
    return found


def engine_layer_of(rel_parts):
    """The layer of a file under engine/ (path parts after 'engine'), or None."""
    if rel_parts[0] == "include":
        return PUBLIC_HEADER_LAYER.get(rel_parts[-1], "train")
    return rel_parts[0] if rel_parts[0] in ENGINE_LAYERS else None


def engine_violations(root: pathlib.Path):
    found = []
    engine = root / "engine"
    if not engine.is_dir():
        return found
    for path in sources(engine):
        layer = engine_layer_of(path.relative_to(engine).parts)
        if layer is None:
            found.append(f"{path.relative_to(root)}: engine source outside the layer folders "
                         f"({', '.join(ENGINE_LAYERS)}, include)")
            continue
        allowed = ENGINE_LAYERS[layer]
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            q = QUOTED_RE.search(line)
            if not q:
                continue
            target = q.group(1)
            if target.startswith("moewb/engine/"):
                target_layer = PUBLIC_HEADER_LAYER.get(target.rsplit("/", 1)[-1], "train")
            elif target.startswith("moewb/"):
                continue
            else:
                target_layer = target.split("/", 1)[0] if "/" in target else layer
                if target_layer not in ENGINE_LAYERS:
                    found.append(f"{path.relative_to(root)}:{lineno}: \"{target}\" is not a path "
                                 f"under engine/ (write \"<layer>/...\")")
                    continue
            if target_layer not in allowed:
                found.append(f"{path.relative_to(root)}:{lineno}: engine layer {layer} may not "
                             f"include \"{q.group(1)}\" ({target_layer} sits above or beside it; "
                             f"{layer} may use {', '.join(sorted(allowed))})")
    return found


def gui_violations(root: pathlib.Path):
    found = []
    for part, forbidden in (("models", ("widgets/", "app/")), ("widgets", ("app/",))):
        base = root / "gui" / part
        if not base.is_dir():
            continue
        widget_headers = {p.name for p in (root / "gui" / "widgets").glob("*.h")} if part == "models" else set()
        for path in sources(base):
            for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                q = QUOTED_RE.search(line)
                if q and (q.group(1).startswith(forbidden) or q.group(1) in widget_headers):
                    found.append(f"{path.relative_to(root)}:{lineno}: gui/{part} may not include "
                                 f"\"{q.group(1)}\"")
                if part == "models" and QT_WIDGETS_RE.search(line):
                    found.append(f"{path.relative_to(root)}:{lineno}: gui/models may not include "
                                 f"Qt Widgets (the models library has no widgets)")
    return found


def violations(root: pathlib.Path):
    return module_violations(root) + engine_violations(root) + gui_violations(root)


def self_test():
    """Planted wrong includes must be found, allowed ones must not."""
    cases = [
        ("engine/runtime/bad.cpp", '#include "moewb/storage/trace_writer.h"\n', True),
        ("engine/runtime/bad.cpp", '#include <sqlite3.h>\n', True),
        ("engine/runtime/bad.cpp", '#include "moewb/base/status.h"\n', False),
        ("engine/runtime/bad.cpp", '#include "model/cpu/model.h"\n', True),
        ("engine/ops/x/bad.cpp", '#include "comm/communicator.h"\n', True),
        ("engine/model/bad.cpp", '#include "moewb/engine/trainer.h"\n', True),
        ("engine/model/bad.cpp", '#include "ops/kda/kda.h"\n', False),
        ("engine/train/bad.cpp", '#include "model/cpu/model.h"\n', False),
        ("engine/src/bad.cpp", '#include "runtime/tensor/tensor.h"\n', True),
        ("gui/models/bad.cpp", '#include <QWidget>\n', True),
        ("gui/models/bad.cpp", '#include "widgets/chart_view.h"\n', True),
        ("gui/models/bad.cpp", '#include <QAbstractTableModel>\n', False),
        ("run/bad.cpp", '#include "moewb/gui/trace_document.h"\n', True),
        ("run/bad.cpp", '#include <sqlite3.h>\n', True),
        ("tuner/src/ok.cpp", '#include <sqlite3.h>\n', False),
        ("tuner/src/bad.cpp", '#include "moewb/profiler/host_tracer.h"\n', True),
    ]
    for rel, text, expect in cases:
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / rel
            path.parent.mkdir(parents=True)
            path.write_text(text)
            got = bool(violations(pathlib.Path(tmp)))
            assert got == expect, f"self-test: {rel} with {text.strip()} flagged={got}, expected {expect}"


def main():
    root = pathlib.Path(sys.argv[1])
    self_test()
    found = violations(root)
    for v in found:
        print(v)
    print(f"{0 if found else 1} passed, {1 if found else 0} failed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
