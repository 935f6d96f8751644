"""``isolated_module_command``: ``python -I`` that still runs this veeksha's modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import veeksha
from veeksha.isolated import isolated_module_command, veeksha_root

_PROBE = (
    "import json, sys\n"
    "seen = {'name': __name__, 'argv': sys.argv[1:], 'file': __file__, 'which': WHICH}\n"
    "print(json.dumps(seen))\n"
)


def _probe(folder: Path, which: str) -> None:
    folder.mkdir()
    (folder / "veeksha_probe_module.py").write_text(_PROBE.replace("WHICH", repr(which)))


def test_the_module_comes_from_the_given_root_whatever_the_environment_and_folder_say(
    tmp_path: Path,
) -> None:
    _probe(tmp_path / "ours", "ours")
    _probe(tmp_path / "other", "other")  # what PYTHONPATH and the working folder hold
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "other")}
    command = isolated_module_command(
        "veeksha_probe_module", "a", "--", "-b", root=str(tmp_path / "ours")
    )
    done = subprocess.run(
        command, env=env, cwd=tmp_path / "other", capture_output=True, text=True, check=True
    )
    seen = json.loads(done.stdout)
    assert seen == {
        "name": "__main__",
        "argv": ["a", "--", "-b"],
        "file": str(tmp_path / "ours" / "veeksha_probe_module.py"),
        "which": "ours",
    }
    # without the bootstrap, -I finds neither: the environment's path and the folder are ignored
    plain = [sys.executable, "-I", "-m", "veeksha_probe_module"]
    refused = subprocess.run(
        plain, check=False, env=env, cwd=tmp_path / "other", capture_output=True
    )
    assert refused.returncode != 0
    assert b"No module named veeksha_probe_module" in refused.stderr


def test_by_default_the_root_is_this_veeksha_and_its_helpers_start_under_it() -> None:
    command = isolated_module_command("veeksha.server.watch_process")
    assert repr(veeksha_root()) in command[3]
    assert Path(veeksha_root()) / "veeksha" == Path(veeksha.__file__).resolve().parent
    # the server watch run through the bootstrap: without its settings line it ends at once
    done = subprocess.run(
        command, check=False, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
