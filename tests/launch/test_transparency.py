"""A script under `memsight run` sees and does exactly what it would under plain `python`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import child_env, find_python, run_memsight, run_plain, write_script

# Every test runs a script under `memsight run` and under plain python.
pytestmark = pytest.mark.slow

PROBE = """
import json, os, sys
main = sys.modules["__main__"]
print(json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "globals": sorted(k for k in globals() if k != "json"),
    "doc": __doc__,
    "spec": [getattr(__spec__, "name", None), getattr(__spec__, "origin", None)],
    "same_main": main.__dict__ is globals(),
    "stdin": sys.stdin.read(),
    "env": {k: v for k, v in os.environ.items()},
    "memsight_modules": sorted(m for m in sys.modules if m.startswith(("memsight", "profiler", "app"))),
}))
"""


def both(
    args: list[str], cwd: Path, stdin: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    traced = run_memsight(args, cwd, stdin=stdin, out=cwd.parent / "probe.memsight")
    plain = run_plain(args, cwd, stdin=stdin)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    return json.loads(traced.stdout), json.loads(plain.stdout)


def test_a_script_sees_the_same_argv_main_module_path_cwd_stdin_and_environment(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    write_script(work, "scripts/probe.py", PROBE)
    traced, plain = both(
        ["scripts/probe.py", "--epochs", "2", "-m", "x", "--", "-v"], work, stdin="line1\nline2\n"
    )
    assert traced == plain
    assert traced["argv"] == ["scripts/probe.py", "--epochs", "2", "-m", "x", "--", "-v"]
    assert traced["name"] == "__main__" and traced["same_main"]
    assert traced["path0"] == str(work / "scripts")
    assert traced["stdin"] == "line1\nline2\n"
    assert "MEMSIGHT_AGENT" not in traced["env"]


def test_a_script_reached_through_a_symlink_gets_the_real_folder_as_path0(tmp_path: Path) -> None:
    write_script(tmp_path, "real/probe.py", PROBE)
    (tmp_path / "link.py").symlink_to(tmp_path / "real" / "probe.py")
    traced, plain = both(["link.py"], tmp_path)
    assert traced == plain
    assert traced["path0"] == str(tmp_path / "real")


def test_dash_m_runs_a_module_like_python_dash_m(tmp_path: Path) -> None:
    write_script(tmp_path, "pkg/__init__.py", "")
    write_script(tmp_path, "pkg/probe.py", PROBE)
    traced, plain = both(["-m", "pkg.probe", "a", "b"], tmp_path)
    assert traced == plain
    assert traced["argv"] == [str(tmp_path / "pkg" / "probe.py"), "a", "b"]
    assert traced["path0"] == str(tmp_path)


def test_a_folder_with_its_own_profiler_and_app_modules_imports_those(tmp_path: Path) -> None:
    write_script(tmp_path, "profiler.py", "WHO = 'the user profiler'\n")
    write_script(tmp_path, "app.py", "WHO = 'the user app'\n")
    write_script(tmp_path, "main.py", "import profiler, app\nprint(profiler.WHO, '/', app.WHO)\n")
    traced = run_memsight(["main.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == "the user profiler / the user app\n"


def test_an_uncaught_exception_prints_the_same_traceback_and_exits_1(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "boom.py",
        """
        def inner():
            raise ValueError("bad <value> & more")
        inner()
        """,
    )
    traced = run_memsight(["boom.py"], tmp_path)
    plain = run_plain(["boom.py"], tmp_path)
    assert traced.returncode == plain.returncode == 1
    assert traced.stderr == plain.stderr
    assert "memsight" not in traced.stderr and "_memsight_profiler" not in traced.stderr
    exception = next(traced.profile().events_of("exception"))
    assert exception.get("exc_type") == "builtins.ValueError"
    assert exception.get("message") == "bad <value> & more"
    assert exception.get("uncaught") is True
    assert [frame[2] for frame in exception.get("traceback")] == ["<module>", "inner"]
    assert exception.get("traceback")[-1][3] == 'raise ValueError("bad <value> & more")'


def test_a_custom_excepthook_is_honoured(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "hook.py",
        """
        import sys
        sys.excepthook = lambda t, e, tb: print("custom hook:", t.__name__, e)
        raise KeyError("k")
        """,
    )
    traced, plain = run_memsight(["hook.py"], tmp_path), run_plain(["hook.py"], tmp_path)
    assert (
        (traced.returncode, traced.stdout)
        == (plain.returncode, plain.stdout)
        == (1, "custom hook: KeyError 'k'\n")
    )


def test_a_syntax_error_is_reported_exactly_like_python(tmp_path: Path) -> None:
    write_script(tmp_path, "bad.py", "x = (\n")
    traced, plain = run_memsight(["bad.py"], tmp_path), run_plain(["bad.py"], tmp_path)
    assert (traced.returncode, traced.stderr) == (plain.returncode, plain.stderr)


@pytest.mark.parametrize(
    ("source", "code"),
    [("import sys; sys.exit(7)", 7), ("raise SystemExit('fatal: no data')", 1), ("pass", 0)],
)
def test_the_exit_status_and_its_message_pass_through(
    tmp_path: Path, source: str, code: int
) -> None:
    write_script(tmp_path, "exits.py", source)
    traced, plain = run_memsight(["exits.py"], tmp_path), run_plain(["exits.py"], tmp_path)
    assert traced.returncode == plain.returncode == code
    assert traced.stderr == plain.stderr
    assert traced.profile().info.exit_code == code


def test_an_import_of_torch_is_reported_with_its_version(tmp_path: Path) -> None:
    import torch

    write_script(tmp_path, "t.py", "import torch\nprint(torch.ones(3).sum().item())\n")
    traced = run_memsight(["t.py"], tmp_path)
    assert traced.stdout == "3.0\n"
    assert traced.profile().info.torch_version == torch.__version__


def test_a_missing_script_is_a_clear_usage_error(tmp_path: Path) -> None:
    traced = run_memsight(["nope.py"], tmp_path)
    assert traced.returncode == 2
    assert traced.stderr == "memsight: error: The script nope.py does not exist.\n"
    assert not (tmp_path / "run.memsight").exists()


def test_the_agent_runs_on_python_3_9(tmp_path: Path) -> None:
    python39 = find_python("3.9")
    if python39 is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    write_script(tmp_path, "old.py", PROBE)
    traced = run_memsight(["--python", python39, "old.py"], tmp_path, stdin="", env=child_env())
    assert traced.returncode == 0, traced.stderr
    assert json.loads(traced.stdout)["argv"] == ["old.py"]
    profile = traced.profile()
    assert profile.info.python_version.startswith("3.9.")
    assert profile.sample_count > 0
