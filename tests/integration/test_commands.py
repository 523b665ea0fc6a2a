"""The line commands' one table, as a user meets it in both front ends: ``%ktrain help`` and
``ktrain --help`` list every command of it; bad input is one error naming what was wrong and
the usage, in the notebook and in a shell alike; options go anywhere; the shell's commands
run without IPython."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.errors import JobNotFound, SpecError
from jupyter_ktrain.frontends import commands
from jupyter_ktrain.frontends.commands import COMMANDS, Target
from jupyter_ktrain.runner.front import shell_words as for_shell

KTRAIN = str(Path(sys.executable).parent / "ktrain")


@pytest.fixture
def shell(ktrain_home: Path) -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    yield sh
    sh.reset(new_session=True)


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KTRAIN_HOME": str(home)}
    env.pop("KUBERNETES_SERVICE_HOST", None)  # not in a pod: the default backend is local
    return subprocess.run([KTRAIN, *args], env=env, capture_output=True, text=True, timeout=60)


def test_both_helps_list_every_command_with_its_arguments(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert shell.run_cell("%ktrain help").success
    magic = capsys.readouterr().out
    cli = _cli("--help", home=tmp_path)
    assert cli.returncode == 0, cli.stderr
    for command in COMMANDS:
        assert f"%ktrain {command.usage}" in magic
        assert f"ktrain {command.usage}" in cli.stdout
    assert "ktrain logs NAME [--rank R] [--grep TEXT] [--run N]" in cli.stdout
    assert "ktrain warm NAME --idle DURATION" in cli.stdout
    assert "ktrain render" in cli.stdout
    assert "%ktrain" not in cli.stdout
    # one command's help, in either front end
    assert shell.run_cell("%ktrain cancel --help").success
    assert "%ktrain cancel NAME [--run N]" in capsys.readouterr().out
    one = _cli("warm", "-h", home=tmp_path)
    assert (one.returncode, one.stdout.splitlines()[0].split()[:4]) == (
        0,
        ["ktrain", "warm", "NAME", "--idle"],
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["frobnicate"], "Unknown %ktrain command 'frobnicate': the commands are list, attach,"),
        (["logs"], "%ktrain logs needs a job name: `%ktrain logs NAME [--rank R]"),
        (["warm", "a"], "%ktrain warm needs --idle DURATION (e.g. 15m; 0 ends it now)"),
        (["warm", "a", "--idle", "soon"], "--idle 'soon' is not a duration: use e.g. 90s"),
        (["logs", "a", "--rank", "one"], "--rank 'one' is not a rank: use e.g. --rank 0."),
        (["cancel", "a", "--run", "x"], "--run 'x' is not a run number: use e.g. --run 2."),
        (["logs", "a", "--grep"], "--grep needs a value: the text to look for."),
        (["list", "extra"], "%ktrain list: unrecognized arguments: extra. Usage: `%ktrain list`"),
        (["status", "a", "b"], "%ktrain status: unrecognized arguments: b."),
        (["config", "--backend", "local"], "%ktrain config: unrecognized arguments: --backend"),
        (["status", "a", "--namespace"], "--namespace needs a value: a Kubernetes namespace."),
        (["delete", "A_b"], "'A_b' is not a valid job name (a DNS-1035 label)"),
    ],
)
def test_bad_input_is_one_error_in_the_notebook_and_in_a_shell(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    argv: list[str],
    message: str,
) -> None:
    with pytest.raises(SpecError) as info:
        commands.parse(argv)
    assert str(info.value).startswith(message), info.value
    result = shell.run_cell("%ktrain " + " ".join(argv))
    assert isinstance(result.error_in_exec, UsageError)
    assert f"ktrain: {message}" in capsys.readouterr().err
    run = _cli(*argv, home=tmp_path)
    assert run.returncode == 2, run
    assert run.stderr.startswith(f"ktrain: {for_shell(message)}"), run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    assert "%ktrain" not in run.stderr
    assert run.stdout == ""


def test_options_go_anywhere_and_every_job_command_takes_backend_and_namespace() -> None:
    call = commands.parse(["compare", "a", "--metric", "loss", "b", "--namespace=team"])
    assert isinstance(call, commands.Call)
    assert call.values == {
        "names": ["a", "b"],
        "metric": "loss",
        "target": Target(None, "team"),
    }
    for command in COMMANDS:
        argv = [command.name] + (["job-a"] if command.args[:1] == (commands.NAME,) else [])
        if command.name == "warm":
            argv += ["--idle", "0"]
        argv += ["--backend", "kubernetes", "--namespace", "team-b"]
        if not command.on_backend:
            with pytest.raises(SpecError, match="unrecognized arguments: --backend"):
                commands.parse(argv)
            continue
        call = commands.parse(argv)
        assert isinstance(call, commands.Call)
        assert call.values["target"] == Target("kubernetes", "team-b"), command.name


def test_handlers_answer_plain_values(ktrain_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    reply = commands.run(["list"])
    assert (reply.text, reply.error, reply.follow) == ("No jobs yet on local.", None, None)
    with pytest.raises(JobNotFound, match="No local job named 'gone'"):
        commands.status(Target(), "gone")
    with pytest.raises(SpecError, match="--namespace is for the kubernetes backend"):
        commands.cancel(Target("local", "team-b"), "job-b", None)
    assert commands.config(["backend=local"]).text == "backend = local"


def test_the_shell_commands_run_without_ipython(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from jupyter_ktrain.frontends.cli import main\n"
        "codes = [main(['list']), main(['config']), main(['status', 'gone']), main(['x'])]\n"
        "assert codes == [0, 0, 1, 2], codes\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'IPython'))\n"
    )
    env = {**os.environ, "KTRAIN_HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    run = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "[]"
