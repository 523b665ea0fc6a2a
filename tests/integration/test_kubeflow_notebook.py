"""jupyter-ktrain where a Kubeflow user sits: JupyterLab in a Notebook pod of a profile
namespace, as the profile's ``default-editor`` (``kubeflow-edit`` by a RoleBinding, nothing
cluster-wide), with no kubeconfig: the kernel finds the cluster, its credentials and its
namespace in the pod. One Notebook pod serves the whole module (``tests/kubeflow_notebook.py``);
a second profile stands beside it. Kubeflow's roles are Kubeflow's own YAML
(``tests/data/kubeflow``), aggregated by the real kube-controller-manager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from tests.kubeflow_notebook import BUILT, KernelSession, NotebookPod, notebook_pod

from .k8s_helpers import SETUP, wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"

HELPER = """
def step():
    return 1
"""


def _can(profile: Any, *args: str) -> bool:
    got = profile.kubectl("auth", "can-i", *args)
    assert got.stdout.strip() in ("yes", "no"), got.stderr
    return got.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def alice(kubeflow_profiles: Any) -> Any:
    return kubeflow_profiles("alice")


@pytest.fixture(scope="module")
def bob(kubeflow_profiles: Any) -> Any:
    return kubeflow_profiles("bob")


@pytest.fixture(scope="module")
def notebook(alice: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotebookPod]:
    if not (BUILT / "package.json").exists():
        pytest.skip("the labextension is not built: `make setup` builds it (needs npm)")
    with notebook_pod(alice, "lab", tmp_path_factory.mktemp("notebook")) as pod:
        yield pod


@pytest.fixture(scope="module")
def kernel(notebook: NotebookPod) -> Iterator[KernelSession]:
    """The notebook ``train.ipynb``'s kernel, with the extension loaded and the cells every
    test uses defined."""
    cells = ["%load_ext jupyter_ktrain", SETUP, HELPER]
    session = KernelSession(notebook, "train.ipynb", cells)
    try:
        for cell in cells:
            got = session.run(cell)
            assert got.ok, (got.error, got.text)
        yield session
    finally:
        session.close()


def test_profile_account_has_kubeflow_edit_and_nothing_cluster_wide(alice: Any) -> None:
    assert _can(alice, "create", "pytorchjobs.kubeflow.org")
    assert _can(alice, "create", "trainjobs.trainer.kubeflow.org")
    assert _can(alice, "create", "pods", "--subresource=exec")
    assert _can(alice, "create", "configmaps")
    assert _can(alice, "get", "pods", "--subresource=log")
    for cluster_wide in ("nodes", "namespaces", "customresourcedefinitions", "clusterroles"):
        got = alice.kubectl("get", cluster_wide)
        assert got.returncode != 0, got.stdout
        assert "forbidden" in got.stderr, got.stderr
    assert not _can(alice, "create", "roles.rbac.authorization.k8s.io")
    assert not _can(alice, "create", "rolebindings.rbac.authorization.k8s.io")


def test_ktrain_cell_in_the_notebook_pod_runs_a_pytorchjob(
    kernel: KernelSession, alice: Any
) -> None:
    # no kubeconfig and no `%ktrain config`: the pod's account, its namespace, the cluster
    got = kernel.run("%%ktrain --nodes 2 --procs-per-node 1 --name kf-plain\nr = train(2)\n")
    assert got.ok, (got.error, got.text)
    assert "Started 'kf-plain': 2 node(s) x 1 process(es) on kubernetes" in got.text
    assert "Set from rank 0: r" in got.text
    assert kernel.run("print(r)").text.strip() == "6.0"  # (1 + 2) * 2: both ranks all-reduced
    job = alice.kubectl("get", "pytorchjob", "kf-plain", "-o", "jsonpath={.metadata.namespace}")
    assert job.stdout == alice.namespace, job.stderr
    # what the user holds nothing of was not checked and not complained about: the namespace
    # and the nodes stay unread, no warning line (a CPU job asks no node capacity)
    assert "warning" not in got.text, got.text


def test_failing_cell_error_reaches_the_cell(kernel: KernelSession) -> None:
    got = kernel.run('%%ktrain --nodes 2 --procs-per-node 1 --name kf-fail\nfail_on(1, "exit")\n')
    assert got.error is not None, got.text
    assert got.error["ename"] == "JobFailed", got.error
    assert "rank 1" in got.error["evalue"], got.error
    assert "the loader found no data" in "\n".join(got.error["traceback"]), got.error


def test_warm_runs_twice_with_a_changed_helper(kernel: KernelSession, alice: Any) -> None:
    """``--warm`` as a profile user: no Role, no RoleBinding; the second run, with a changed
    helper, reaches the same pods."""
    cell = "%%ktrain --warm --nodes 2 --procs-per-node 1 --name kf-warm\nw = step()\n"
    first = kernel.run(cell)
    assert first.ok, (first.error, first.text)
    assert kernel.run("print(w)").text.strip() == "1"
    pods = alice.kubectl("get", "pods", "-l", "ktrain.io/job=kf-warm", "-o", "name").stdout
    assert kernel.run("def step():\n    return 2\n").ok
    second = kernel.run(cell)
    assert second.ok, (second.error, second.text)
    assert "Run 2 on the warm job 'kf-warm'" in second.text
    assert kernel.run("print(w)").text.strip() == "2"
    again = alice.kubectl("get", "pods", "-l", "ktrain.io/job=kf-warm", "-o", "name").stdout
    assert again == pods  # the same pods ran it
    # nothing of RBAC was made (the profile could not have): only the profile's own bindings
    assert alice.kubectl("get", "roles", "-o", "name", admin=True).stdout.split() == []
    bindings = alice.kubectl("get", "rolebindings", "-o", "name", admin=True).stdout.split()
    assert sorted(b.rsplit("/", 1)[1] for b in bindings) == ["default-editor", "default-viewer"]
    assert kernel.run("%ktrain warm kf-warm --idle 0").ok


def test_profiles_see_and_touch_only_their_own_jobs(
    kernel: KernelSession, notebook: NotebookPod, alice: Any, bob: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from .k8s_helpers import make_shell

    # bob starts a job in his profile, from his own notebook (here: this process, his token)
    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path / "bob-home"))
    bob_shell = make_shell(bob)
    bob_shell.run_cell_magic(
        "ktrain",
        "--nodes 1 --procs-per-node 1 --image local/python --name bob-job --detach",
        "sleepy()\n",
    )
    uid = wait_for(lambda: bob.kubectl("get", "pytorchjob", "bob-job", "-o",
                                       "jsonpath={.metadata.uid}").stdout)  # fmt: skip
    assert kernel.run("%%ktrain --nodes 1 --procs-per-node 1 --name alice-job\nr = 1\n").ok
    # alice lists her jobs only: in the notebook and in the panel's REST API
    listed = kernel.run("%ktrain list --backend kubernetes")
    assert listed.ok, (listed.error, listed.text)
    assert "alice-job" in listed.text, listed.text
    assert "bob-job" not in listed.text, listed.text
    with notebook.client() as http:
        names = [j["name"] for j in http.get("/ktrain/api/jobs").json()["jobs"]]
    assert "alice-job" in names, names
    assert "bob-job" not in names, names
    # cancelling or deleting bob's job by name: one line, forbidden, naming the namespace
    for command in ("cancel", "delete", "status"):
        got = kernel.run(f"%ktrain {command} bob-job --namespace {bob.namespace}")
        assert not got.ok, got.text
        (line,) = got.text.strip().splitlines()
        assert line.startswith("UsageError: ktrain: forbidden: you may not list pytorchjobs"), line
        assert f"in namespace {bob.namespace!r}" in line, line
    listed = kernel.run(f"%ktrain list --namespace {bob.namespace}")
    assert not listed.ok, listed.text
    assert "forbidden: you may not list pytorchjobs" in listed.text, listed.text
    # nothing of bob's changed
    assert bob.kubectl("get", "pytorchjob", "bob-job", "-o",
                       "jsonpath={.metadata.uid}").stdout == uid  # fmt: skip
    bob_shell.run_line_magic("ktrain", "delete bob-job")


def test_preflight_of_a_profile_user_says_once_what_it_did_not_check(alice: Any) -> None:
    """What the profile may not read (nodes, Kueue's LocalQueues) is one warning line; what it
    may read (its PVCs, its Secrets) is checked as before."""
    from jupyter_ktrain.backends.kubernetes.client.kube_api import Api
    from jupyter_ktrain.backends.kubernetes.plans.preflight import run_preflight
    from jupyter_ktrain.errors import PreflightError
    from jupyter_ktrain.flags import parse_flags, spec_from_args

    def spec(flags: str) -> Any:
        return spec_from_args(parse_flags(f"--name pf --nodes 2 --image local/python {flags}"))

    api = Api.connect(str(alice.kubeconfig), None)
    ns = alice.namespace
    warnings = run_preflight(api, spec("--gpus-per-node 1 --kueue-queue team-a"), ns, True)
    assert len(warnings) == 1, warnings
    (line,) = warnings
    assert line.startswith("not checked, as you may not read them: "), line
    assert "whether a node offers 1 nvidia.com/gpu per pod (nodes)" in line
    assert "Kueue LocalQueue 'team-a' (--kueue-queue)" in line
    # a PVC and a Secret it may read are checked: missing ones are problems, as for anyone
    bad = spec("--dataset imagenet:/data:ro --secret-env HF_TOKEN=hf/token")
    with pytest.raises(PreflightError) as info:
        run_preflight(api, bad, ns, configmap=True)
    problems = info.value.problems
    assert any(p.startswith("PersistentVolumeClaim 'imagenet'") for p in problems), problems
    assert any(p.startswith("Secret 'hf'") for p in problems), problems


def test_side_panel_through_the_prefix_lists_shows_logs_and_cancels(
    kernel: KernelSession, notebook: NotebookPod, alice: Any
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed at {CHROMIUM} (.ci/run installs it)")
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    from tests.browser.test_widget_browser import CHROMIUM_ARGS, screenshot

    got = kernel.run("%%ktrain --nodes 2 --procs-per-node 1 --name kf-long --detach\n"
                     "steps(3000, 0.2)\n")  # fmt: skip
    assert got.ok, (got.error, got.text)
    rows = """() => [...document.querySelectorAll('#ktrain-jobs-panel .ktrain-JobRow')]
      .map(r => r.dataset.name + ':' + r.dataset.state)"""
    # each pod's veth pair is added while the pod starts: Chromium takes that for a network
    # change and drops a page load under way (ERR_NETWORK_CHANGED), so the pods come first
    wait_for(lambda: alice.kubectl("get", "pods", "-l", "ktrain.io/job=kf-long", "-o",
                                   "jsonpath={.items[*].status.phase}").stdout.split()
             == ["Running", "Running"], 180)  # fmt: skip
    calls: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("request", lambda r: calls.append(r.url) if "/ktrain/api/" in r.url else None)
        try:
            # the lab's page, served by the pod's Jupyter server through the prefix: its
            # bundle loads in one to several tens of seconds on a loaded 2-core machine, so
            # what is waited for is the panel in it, not the page's load event (30 s)
            for _ in range(3):  # a load dropped by a network change is loaded again
                page.goto(
                    f"{notebook.base}/lab?reset&token={notebook.token}",
                    wait_until="commit",
                    timeout=90_000,
                )
                page.wait_for_function(
                    "() => !!document.querySelector('#ktrain-jobs-panel')"
                    " || location.href.startsWith('chrome-error:')",
                    timeout=150_000,
                )
                if not page.url.startswith("chrome-error:"):
                    break
            assert not page.url.startswith("chrome-error:"), "the lab's page never loaded"
            page.evaluate("() => window.jupyterapp.commands.execute('ktrain:open-panel')")
            page.wait_for_function(f"() => ({rows})().includes('kf-long:Running')",
                                   timeout=60_000)  # fmt: skip
            page.locator("#ktrain-jobs-panel .ktrain-JobRow[data-name='kf-long']").click()
            page.wait_for_function(
                """() => { const t = document.querySelector('#ktrain-job-kf-long .ktrain-Logs');
                   return !!t && t.innerText.includes('[rank0] rank 0 step 3')
                              && t.innerText.includes('[rank1] rank 1 step 3'); }""",
                timeout=60_000,
            )
            page.locator("#ktrain-job-kf-long .ktrain-Cancel").click()
            wait_for(lambda: not alice.kubectl("get", "pods", "-l", "ktrain.io/job=kf-long",
                                               "-o", "name").stdout, 60)  # fmt: skip
            header = page.locator("#ktrain-job-kf-long .ktrain-JobHeader")
            header.filter(has_text="Cancelled").wait_for(timeout=30_000)
            page.wait_for_function(f"() => !({rows})().includes('kf-long:Running')",
                                   timeout=30_000)  # fmt: skip
            screenshot(page, "kubeflow-panel.png")
        except Exception:
            screenshot(page, "kubeflow-panel-failed.png")
            raise
        finally:
            browser.close()
    # every call of the panel went under the Notebook's prefix
    assert calls, "the panel asked nothing"
    assert all(f"{notebook.prefix}/ktrain/api/" in u for u in calls), calls[:5]
