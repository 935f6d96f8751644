"""``veeksha.bytecode.all_fresh`` decides as ``compileall`` does whether a package's bytecode is
fresh, so ``warm`` can skip importing ``compileall`` when nothing is to be compiled."""

from __future__ import annotations

import compileall
import os
from pathlib import Path

from veeksha.bytecode import all_fresh


def _package(root: Path) -> Path:
    package = root / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 2\n")
    (package / "notes.txt").write_text("not a module\n")
    return package


def test_fresh_after_compileall_stale_after_an_edit_or_a_missing_file(tmp_path: Path) -> None:
    package = _package(tmp_path)
    assert not all_fresh(package)  # (nothing compiled yet)
    compileall.compile_dir(package, quiet=2, workers=1)
    assert all_fresh(package)
    source = package / "sub" / "b.py"
    stat = source.stat()
    os.utime(source, (stat.st_atime, stat.st_mtime + 10))  # an edit: a newer source
    assert not all_fresh(package)
    compileall.compile_dir(package, quiet=2, workers=1)
    assert all_fresh(package)
    (package / "c.py").write_text("C = 3\n")  # a new module, not compiled yet
    assert not all_fresh(package)
